// Command harvest is the single binary of the harvest system: the agent on
// the head node, the pilot inside each pilot job, the user and admin CLI,
// the adapter plugins and the simulator.
package main

import (
	"fmt"
	"os"

	"github.com/urfave/cli/v2"

	"github.com/harvest-hpc/harvest/worker/confine"
)

func main() {
	confine.Main() // `harvest __harvest-confine ...`: the pilot starting a task confined
	closeInheritedOnExec()
	if err := newApp().Run(os.Args); err != nil {
		fmt.Fprintln(os.Stderr, "harvest:", err)
		os.Exit(exitCode(err))
	}
}

func newApp() *cli.App {
	return &cli.App{
		Name:  "harvest",
		Usage: "fill the idle nodes of a SLURM or HTCondor cluster with splittable work, without delaying anybody",
		Description: "harvest runs an agent on the head node that submits one-node pilot jobs into the holes\n" +
			"left by the backfill scheduler and cancels them the moment a waiting job could use the nodes.\n" +
			"Users submit harvest jobs (a dataset directory, a command, a batch size) to the agent's queue;\n" +
			"the pilots elect a master that hands batches of tasks to workers.",
		EnableBashCompletion: true,
		Commands: []*cli.Command{
			versionCommand(),
			agentCommand(),
			adapterCommand(),
			decideCommand(),
			simCommand(),
			replayCommand(),
			pilotCommand(),
			workerCommand(),
			benchCommand(),
			queueCommand(),
			submitCommand(),
			statusCommand(),
			failuresCommand(),
			jobsCommand(),
			cancelCommand(),
			usersCommand(),
			withAdminOps(adminCommand()),
			explainCommand(),
			tokenCommand(),
			docsCommand(), // hidden: man pages and completion, for scripts/package.sh
		},
	}
}

// exitCode maps an error to the process exit code: a cli.ExitCoder keeps
// its own code, anything else is 1.
func exitCode(err error) int {
	if ec, ok := err.(cli.ExitCoder); ok {
		return ec.ExitCode()
	}
	return 1
}
