package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/harvest-hpc/harvest/pilot/bench"
)

func benchCommand() *cli.Command {
	return &cli.Command{
		Name:  "bench",
		Usage: "measure harvest itself",
		Subcommands: []*cli.Command{{
			Name:  "dispatch",
			Usage: "master + N worker processes on this machine: dispatch throughput and per-task overhead",
			Description: "One master in process (real SQLite checkpoint, real HTTP on 127.0.0.1) fed by an in-memory\n" +
				"queue, and --workers worker processes (`harvest worker`). With --task-time 0 every task is a\n" +
				"no-op: the worker marks it done without starting anything, so the figure is harvest's own cost\n" +
				"per task (queue pull, checkpoint, batch hand-out, result, checkpoint, queue report).\n" +
				"--exec runs each task as a real process (true, or sleep --task-time).\n" +
				"--shape thesis repeats the original experiment's shape (150 tasks on 1, 2, 4, 8 one-slot\n" +
				"workers, --task-time per task, batch size 1) and reports efficiency = ideal / measured makespan.\n" +
				"--json prints {\"tasks_per_s\": X, \"overhead_ms\": Y, ...} (a list of rows for --shape thesis).",
			Flags: []cli.Flag{
				&cli.IntFlag{Name: "workers", Value: 4, Usage: "worker processes"},
				&cli.IntFlag{Name: "slots", Value: 4, Usage: "slots per worker"},
				&cli.IntFlag{Name: "tasks", Value: 50000, Usage: "tasks"},
				&cli.DurationFlag{Name: "task-time", Usage: "each task's duration (0: no-op)"},
				&cli.IntFlag{Name: "batch-size", Value: 100, Usage: "the job's batch size"},
				&cli.BoolFlag{Name: "exec", Usage: "run every task as a real process"},
				&cli.StringFlag{Name: "shape", Usage: "thesis: 150 tasks on 1, 2, 4, 8 workers"},
				&cli.BoolFlag{Name: "json", Usage: "print JSON"},
			},
			Action: runBench,
		}, benchSubmitCommand()},
	}
}

func runBench(c *cli.Context) error {
	bin, err := os.Executable()
	if err != nil {
		return cli.Exit(fmt.Sprintf("harvest bench: %v", err), 1)
	}
	dir, err := os.MkdirTemp("", "harvest-bench-")
	if err != nil {
		return cli.Exit(fmt.Sprintf("harvest bench: %v", err), 1)
	}
	defer os.RemoveAll(dir)
	cfg := bench.DefaultConfig()
	cfg.Workers, cfg.Slots, cfg.Tasks = c.Int("workers"), c.Int("slots"), c.Int("tasks")
	cfg.TaskTime, cfg.BatchSize, cfg.Exec = c.Duration("task-time"), c.Int("batch-size"), c.Bool("exec")
	cfg.Binary, cfg.Dir = bin, dir
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	out := c.App.Writer
	switch c.String("shape") {
	case "":
		if err := cfg.Validate(); err != nil {
			return cli.Exit(err.Error(), 2)
		}
		r, err := bench.Run(ctx, cfg)
		if err != nil {
			return cli.Exit(fmt.Sprintf("harvest bench: %v", err), 1)
		}
		if c.Bool("json") {
			return json.NewEncoder(out).Encode(r)
		}
		fmt.Fprintf(out, "%d tasks (%s each) on %d workers x %d slots, batch size %d: makespan %.3f s\n",
			r.Tasks, taskKind(cfg), r.Workers, r.Slots, cfg.BatchSize, r.MakespanS)
		fmt.Fprintf(out, "throughput %.0f tasks/s, overhead %.4f ms per task\n", r.TasksPerS, r.OverheadMS)
		if r.Efficiency > 0 {
			fmt.Fprintf(out, "efficiency %.1f%% (ideal makespan %.3f s)\n", 100*r.Efficiency, r.IdealS)
		}
		return nil
	case "thesis":
		if !c.IsSet("task-time") {
			cfg.TaskTime = 200 * time.Millisecond
		}
		if !c.IsSet("tasks") {
			cfg.Tasks = 150
		}
		cfg.Slots = 1
		if !c.IsSet("batch-size") {
			cfg.BatchSize = 1
		}
		var rows []bench.Result
		for _, w := range []int{1, 2, 4, 8} {
			cfg.Workers = w
			r, err := bench.Run(ctx, cfg)
			if err != nil {
				return cli.Exit(fmt.Sprintf("harvest bench: %v", err), 1)
			}
			rows = append(rows, r)
		}
		if c.Bool("json") {
			return json.NewEncoder(out).Encode(rows)
		}
		printThesis(out, cfg, rows)
		return nil
	default:
		return cli.Exit(fmt.Sprintf("harvest bench: unknown --shape %q (want thesis)", c.String("shape")), 2)
	}
}

func taskKind(cfg bench.Config) string {
	switch {
	case cfg.Exec && cfg.TaskTime == 0:
		return "exec true"
	case cfg.Exec:
		return "exec sleep " + cfg.TaskTime.String()
	case cfg.TaskTime == 0:
		return "no-op"
	}
	return "in-process sleep " + cfg.TaskTime.String()
}

func printThesis(out io.Writer, cfg bench.Config, rows []bench.Result) {
	fmt.Fprintf(out, "%d tasks x %s (%s), batch size %d, one slot per worker (original: 150 x 20 s, 75.7%% at 8 nodes)\n",
		cfg.Tasks, cfg.TaskTime, taskKind(cfg), cfg.BatchSize)
	fmt.Fprintf(out, "%8s %10s %10s %11s %12s\n", "workers", "ideal_s", "measured_s", "efficiency", "overhead_ms")
	for _, r := range rows {
		fmt.Fprintf(out, "%8d %10.3f %10.3f %10.1f%% %12.3f\n", r.Workers, r.IdealS, r.MakespanS, 100*r.Efficiency, r.OverheadMS)
	}
}
