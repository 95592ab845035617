package main

import (
	"encoding/json"
	"fmt"
	"github.com/harvest-hpc/harvest/internal/safefs"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/harvest-hpc/harvest/replay"
	"github.com/harvest-hpc/harvest/sim"
)

// replayCommand replays a trace window on the real SLURM cluster (issue
// 12): baseline and harvest runs, read back from SLURM's job completion
// log, and the simulator on the same window.
func replayCommand() *cli.Command {
	return &cli.Command{
		Name:  "replay",
		Usage: "replay a trace window on the real SLURM cluster, with and without harvest, and hold the simulator to it",
		Description: "Maps the jobs submitted in [--from, --to) of an SWF (or thesis) workload onto this cluster:\n" +
			"nodes = ceil(processors x --nodes / the traced machine's nodes), times divided by --scale, run time\n" +
			"rounded to the second, limits rounded up to whole minutes; trace users map onto --users in the order\n" +
			"they first submit. Each job is submitted at its scaled time with sbatch as its user (a sleep of its\n" +
			"run time). Runs (--runs): baseline (the trace alone; give it twice for the noise floor), polling\n" +
			"(harvest, the agent cancelling pilots) and preemption (harvest, pilots in the preemptible partition;\n" +
			"skipped with a message where the cluster has none). Start and end come from SLURM's job completion\n" +
			"log (the cluster needs JobCompType=jobcomp/filetxt: scripts/minicluster.sh JOBCOMP=1). Writes each\n" +
			"run's jobs CSV (as harvest sim) and the simulator's on the same window to --out, and prints the\n" +
			"figures side by side (--json: the whole report). Run as root (it submits as the users).\n\n" +
			"Example (a 16-node mini-cluster: JOBCOMP=1 PREEMPT=1 scripts/minicluster.sh start 16; scripts/minicluster.sh users alice bob carol):\n" +
			"  harvest replay --workload KTH-SP2-1996-2.1-cln.swf.gz --from 6647850 --to 6655050 --nodes 16 --scale 120 --out /tmp/replay",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "workload", Usage: "workload `FILE` (.swf, .swf.gz or thesis .txt)", Required: true},
			&cli.StringFlag{Name: "format", Usage: "thesis or swf (default: from the file name)"},
			&cli.Int64Flag{Name: "from", Usage: "window start, trace `S`econds", Required: true},
			&cli.Int64Flag{Name: "to", Usage: "window end, trace `S`econds", Required: true},
			&cli.IntFlag{Name: "nodes", Usage: "nodes to map onto (default: the cluster's, from sinfo)"},
			&cli.IntFlag{Name: "trace-nodes", Usage: "the traced machine's nodes (default: the SWF header's MaxNodes)"},
			&cli.Float64Flag{Name: "scale", Value: 60, Usage: "divide every time by this (60: trace hours become minutes)"},
			&cli.StringFlag{Name: "users", Value: "alice,bob", Usage: "cluster users the trace's users map onto (scripts/minicluster.sh users)"},
			&cli.StringFlag{Name: "harvest-user", Value: "carol", Usage: "cluster user who submits the harvest job"},
			&cli.StringFlag{Name: "runs", Value: "baseline,baseline,polling,preemption", Usage: "runs, in order: baseline, polling, preemption"},
			&cli.DurationFlag{Name: "poll", Value: 2 * time.Second, Usage: "agent poll interval (real time)"},
			&cli.DurationFlag{Name: "margin", Value: 30 * time.Second, Usage: "agent margin"},
			&cli.DurationFlag{Name: "mini-time", Value: 10 * time.Second, Usage: "agent mini time"},
			&cli.IntFlag{Name: "task-seconds", Value: 5, Usage: "length of one harvest task, seconds"},
			&cli.DurationFlag{Name: "lead", Usage: "start a harvest run's agent and harvest job this long before the window's first submission, so that the window finds the pool running (its simulation too; 0 = the window opens with the harvest)"},
			&cli.DurationFlag{Name: "drain", Value: 15 * time.Minute, Usage: "after the last submit, wait at most this for every job to end"},
			&cli.Int64Flag{Name: "threshold", Value: 10, Usage: "a job started more than `S` seconds later (earlier) than in the baseline counts as later (earlier)"},
			&cli.StringFlag{Name: "sim-latency", Value: "measured", Usage: "the simulator's scheduler latency: measured (each run's own, event by event: when SLURM started each job after its nodes were free, from the job completion log) or a fixed `DURATION` in whole seconds (1s: SLURM's bf_interval=1)"},
			&cli.IntFlag{Name: "sim-reservations", Value: 1000, Usage: "pending jobs the simulator reserves for (SLURM: every job it tests, bf_max_job_test)"},
			&cli.StringFlag{Name: "jobcomp-log", Usage: "SLURM's job completion log (default: JobCompLoc from scontrol show config)"},
			&cli.StringFlag{Name: "work-dir", Usage: "`DIR` every node and user reaches (default: $LAB/shared, else /tmp)"},
			&cli.StringFlag{Name: "out", Usage: "write the jobs CSVs and report.json to `DIR`"},
			&cli.BoolFlag{Name: "json", Usage: "print the report as JSON"},
			&cli.BoolFlag{Name: "quiet", Usage: "no progress on stderr"},
		},
		Action: runReplay,
	}
}

func runReplay(c *cli.Context) error {
	errw := c.App.ErrWriter
	if errw == nil {
		errw = os.Stderr
	}
	var kinds []replay.Kind
	for _, k := range strings.Split(c.String("runs"), ",") {
		switch kk := replay.Kind(strings.TrimSpace(k)); kk {
		case replay.Baseline, replay.Polling, replay.Preemption:
			kinds = append(kinds, kk)
		default:
			return cli.Exit(fmt.Sprintf("--runs: %q is not baseline, polling or preemption", k), 2)
		}
	}
	if c.Int("task-seconds") < 1 || c.Duration("poll") < time.Second || c.Float64("scale") < 1 {
		return cli.Exit("--task-seconds and --poll must be at least 1 s, --scale at least 1", 2)
	}
	latency := int64(-1) // measured
	if v := c.String("sim-latency"); v != "measured" {
		d, err := time.ParseDuration(v)
		if err != nil || d < 0 || d%time.Second != 0 {
			return cli.Exit(fmt.Sprintf("--sim-latency %q: measured, or whole seconds (0s, 1s...)", v), 2)
		}
		latency = int64(d / time.Second)
	}
	w, err := sim.ReadFile(c.String("workload"), c.String("format"))
	if err != nil {
		return cli.Exit(err.Error(), 2)
	}
	nodes := c.Int("nodes")
	if nodes == 0 {
		if nodes, err = clusterNodes(); err != nil {
			return cli.Exit(fmt.Sprintf("--nodes not given and sinfo cannot tell: %v", err), 2)
		}
	}
	cfg := replay.Config{
		Map: replay.MapConfig{From: c.Int64("from"), To: c.Int64("to"), Nodes: nodes, TraceNodes: c.Int("trace-nodes"),
			Scale: c.Float64("scale"), Users: splitList(c.String("users"))},
		Runs:            kinds,
		ShiftThreshold:  c.Int64("threshold"),
		SimLatency:      latency,
		SimReservations: c.Int64("sim-reservations"),
	}
	plan, err := replay.Map(w, cfg.Map)
	if err != nil {
		return cli.Exit(err.Error(), 2)
	}
	if !c.Bool("quiet") {
		fmt.Fprintf(errw, "replay: the traced machine has %d processors, from %s\n", plan.TraceNodes, plan.TraceNodesFrom)
	}
	if os.Geteuid() != 0 {
		return cli.Exit("harvest replay submits jobs as the cluster's users: run it as root", 2)
	}
	bin, err := os.Executable()
	if err != nil {
		return err
	}
	// scontrol retries a missing configuration file for a minute: say so now.
	if f := os.Getenv("SLURM_CONF"); f != "" {
		if _, err := os.Stat(f); err != nil {
			return cli.Exit(fmt.Sprintf("cannot reach the SLURM controller: SLURM_CONF names no readable file: %v", err), 2)
		}
	}
	conf, err := commandOutput("scontrol", "show", "config")
	if err != nil {
		return cli.Exit(fmt.Sprintf("cannot reach the SLURM controller (is the cluster running? scripts/minicluster.sh start N; SLURM_CONF=%q): %v", os.Getenv("SLURM_CONF"), err), 2)
	}
	setup, err := replay.ReadClusterSetup(conf, c.String("jobcomp-log"))
	if err != nil {
		return cli.Exit(err.Error(), 2)
	}
	// A bad --out is said now, not after the runs (an hour of them).
	if out := c.String("out"); out != "" {
		if err := safefs.SharedDir(out); err != nil {
			return cli.Exit(fmt.Sprintf("--out: %v", err), 2)
		}
	}
	work := c.String("work-dir")
	if work == "" {
		work = os.TempDir()
		if lab := os.Getenv("LAB"); lab != "" {
			work = filepath.Join(lab, "shared")
		}
	}
	if work, err = os.MkdirTemp(work, "replay-"); err != nil {
		return err
	}
	os.Chmod(work, 0o755)
	cfg.Run = replay.RunConfig{Harvest: bin, WorkDir: work, JobCompLog: setup.JobCompLog, Location: time.Local,
		Poll: c.Duration("poll"), Margin: c.Duration("margin"), MiniTime: c.Duration("mini-time"),
		TaskSeconds: float64(c.Int("task-seconds")), HarvestUser: c.String("harvest-user"),
		Drain: c.Duration("drain"), Tag: "harvest-pilot", Lead: c.Duration("lead")}
	if !c.Bool("quiet") {
		cfg.Run.Log = errw
	}
	skip := func(k replay.Kind) string {
		if k == replay.Preemption && !setup.Preemptible {
			return "the cluster has no preemptible partition (PreemptType=preempt/partition_prio; scripts/minicluster.sh PREEMPT=1)"
		}
		return ""
	}
	// A replay stopped by SIGTERM or SIGINT cancels its jobs and pilots and
	// stops its agent (killed outright, the agent lived on and kept
	// submitting pilots into the cluster).
	ctx, stop := signal.NotifyContext(c.Context, syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	rep, err := replay.Replay(ctx, w, cfg, skip)
	if err != nil {
		return err
	}
	if out := c.String("out"); out != "" {
		if err := writeReplay(out, rep); err != nil {
			return err
		}
	}
	if c.Bool("json") {
		enc := json.NewEncoder(c.App.Writer)
		enc.SetIndent("", "  ")
		return enc.Encode(rep)
	}
	return replay.WriteSummary(c.App.Writer, rep)
}

// writeReplay writes report.json and each run's jobs CSV, real and
// simulated.
func writeReplay(dir string, rep replay.Report) error {
	if err := safefs.SharedDir(dir); err != nil { // files are made there by name, as root
		return fmt.Errorf("--out: %w", err)
	}
	seen := map[replay.Kind]int{}
	for _, r := range rep.Runs {
		seen[r.Kind]++
		name := replay.RunName(r.Kind, seen[r.Kind])
		if err := writeFile(filepath.Join(dir, name+".jobs.csv"), func(f io.Writer) error { return sim.WriteJobsCSV(f, r.Result) }); err != nil {
			return err
		}
		if err := writeFile(filepath.Join(dir, name+".sim.jobs.csv"), func(f io.Writer) error { return sim.WriteJobsCSV(f, r.Sim) }); err != nil {
			return err
		}
	}
	return writeFile(filepath.Join(dir, "report.json"), func(f io.Writer) error {
		enc := json.NewEncoder(f)
		enc.SetIndent("", "  ")
		return enc.Encode(rep)
	})
}

// clusterNodes counts the nodes sinfo shows.
func clusterNodes() (int, error) {
	out, err := commandOutput("sinfo", "-h", "-N", "-o", "%N")
	if err != nil {
		return 0, err
	}
	seen := map[string]bool{}
	for _, n := range strings.Fields(out) {
		seen[n] = true
	}
	if len(seen) == 0 {
		return 0, fmt.Errorf("sinfo lists no node")
	}
	return len(seen), nil
}

// commandOutput runs a SLURM command; its error carries what the command
// said on stderr (scontrol's "Unable to contact slurm controller").
func commandOutput(name string, args ...string) (string, error) {
	b, err := exec.Command(name, args...).Output()
	if ee, ok := err.(*exec.ExitError); ok && len(ee.Stderr) > 0 {
		err = fmt.Errorf("%s: %w: %s", name, err, strings.TrimSpace(string(ee.Stderr)))
	}
	return string(b), err
}

func splitList(s string) []string {
	var out []string
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}
