package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/harvest-hpc/harvest/pilot/bench"
	"github.com/harvest-hpc/harvest/queue/store"
)

func benchCommand() *cli.Command {
	return &cli.Command{
		Name:  "bench",
		Usage: "measure harvest itself",
		Subcommands: []*cli.Command{{
			Name:  "dispatch",
			Usage: "queue -> master -> N worker processes -> queue on this machine: end-to-end throughput, per-task overhead, where the time goes",
			Description: "End to end by default: the real queue (a fresh SQLite database, its HTTP API on 127.0.0.1, the\n" +
				"fair-share order over --users users with one job each, results applied with their usage) feeds\n" +
				"a master in process (real SQLite checkpoint, real HTTP) over HTTP, as a pilot's master is fed,\n" +
				"and --workers worker processes (`harvest worker`) run the tasks and send the results back\n" +
				"through the master to the queue. The makespan runs from the moment the master may pull (jobs\n" +
				"stored, workers registered: not timed) until the queue has acknowledged every result.\n" +
				"--in-memory replaces the queue by an in-memory feed: the master and the workers alone, fed the\n" +
				"tasks of --users jobs a batch of each in turn (as the fair-share order hands them out; --users 1: one job).\n" +
				"With --task-time 0 every task is a no-op: the worker marks it done without starting anything,\n" +
				"so the figure is harvest's own cost per task (queue pull, checkpoint, batch hand-out, result,\n" +
				"checkpoint, queue report). The report says where the time went: CPU per task of this process\n" +
				"(queue and master) and of the workers, the queue's handlers and SQLite's write lock.\n" +
				"--exec runs each task as a real process (true, or sleep --task-time), and the same program in one\n" +
				"plain shell loop per worker (the fork/exec floor) before and after the run; --rounds N alternates\n" +
				"N runs with N+1 floors and takes each run against the two floors around it (the machine's load\n" +
				"drifts): the report gives every floor and round, the median ratios and their spread. Harvest's CPU\n" +
				"per task is this process's from the first pull to the last result (queue, master) and the worker\n" +
				"processes' from their start to their exit, their runners' and tasks' included; the floor's is\n" +
				"the loops' and their programs'.\n" +
				"--shape thesis repeats the original experiment's shape (150 tasks on 1, 2, 4, 8 one-slot\n" +
				"workers, --task-time per task, batch size 1) and reports efficiency = ideal / measured makespan.\n" +
				"--compare runs --in-memory first, then the real queue, in this one invocation, and prints the\n" +
				"ratio of their throughputs. The real queue's report ends with the WAL frames SQLite writes for a\n" +
				"pull of one task of each of --users jobs and for its results (exact counts from PRAGMA\n" +
				"wal_checkpoint on a fresh database, the store alone).\n" +
				"--json prints {\"tasks_per_s\": X, \"overhead_ms\": Y, ...} (a list of rows for --shape thesis).",
			Flags: []cli.Flag{
				&cli.IntFlag{Name: "workers", Value: 4, Usage: "worker processes"},
				&cli.StringFlag{Name: "db", Usage: "the real queue on this PostgreSQL database (a postgres:// `URL`; each run in a fresh schema of it, dropped after) instead of a fresh SQLite file"},
				&cli.IntFlag{Name: "slots", Value: 4, Usage: "slots per worker"},
				&cli.IntFlag{Name: "worker-gomaxprocs", Usage: "GOMAXPROCS of each worker process (0: this machine's cores shared out among the workers, at least 1 each, as if each had its own node)"},
				&cli.IntFlag{Name: "tasks", Value: 50000, Usage: "tasks"},
				&cli.IntFlag{Name: "users", Value: 1000, Usage: "users competing, one job each (the tasks are shared out; --in-memory: a batch of each job in turn)"},
				&cli.BoolFlag{Name: "in-memory", Usage: "an in-memory feed instead of the real queue: the master and the workers alone"},
				&cli.BoolFlag{Name: "compare", Usage: "run the in-memory feed with the same settings first, then the real queue, and print the ratio of their throughputs"},
				&cli.StringFlag{Name: "profile-dir", Usage: "write CPU and allocation profiles of every process to `DIR` (bench.*: queue and master; worker-N.*: the workers; go tool pprof)"},
				&cli.StringFlag{Name: "trace", Usage: "write a Go execution trace of this process (queue and master) to `FILE` (go tool trace); each write transaction is a region \"write\""},
				&cli.DurationFlag{Name: "task-time", Usage: "each task's duration (0: no-op)"},
				&cli.IntFlag{Name: "batch-size", Value: 100, Usage: "the job's batch size"},
				&cli.BoolFlag{Name: "exec", Usage: "run every task as a real process, and the same program in plain loops (the fork/exec floor)"},
				&cli.IntFlag{Name: "rounds", Value: 1, Usage: "with --exec: `N` harvest runs, each between two runs of the floor (floor, harvest, floor, ...); each against the floors around it, the median and the spread reported"},
				&cli.BoolFlag{Name: "batched", Usage: "with --exec: the job's command is batched (true {inputs}: once per batch of --batch-size entries); the floor stays one true per task"},
				&cli.StringFlag{Name: "confine", Value: "auto", Usage: "with --exec: the workers confine tasks as a pilot does: auto (Landlock where the kernel has it), require, off"},
				&cli.StringFlag{Name: "shape", Usage: "thesis: 150 tasks on 1, 2, 4, 8 workers"},
				&cli.BoolFlag{Name: "json", Usage: "print JSON"},
			},
			Action: runBench,
		}, benchSubmitCommand(), benchHostCommand()},
	}
}

func runBench(c *cli.Context) error {
	// The library reads 0 rounds as 1; said on the command line, 0 is a mistake.
	if c.Int("rounds") < 1 {
		return cli.Exit(fmt.Sprintf("harvest bench: --rounds %d: at least 1", c.Int("rounds")), 2)
	}
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
	cfg.WorkerProcs = c.Int("worker-gomaxprocs")
	cfg.TaskTime, cfg.BatchSize, cfg.Exec, cfg.Batched = c.Duration("task-time"), c.Int("batch-size"), c.Bool("exec"), c.Bool("batched")
	cfg.Users, cfg.InMemory, cfg.Confine, cfg.Rounds = c.Int("users"), c.Bool("in-memory"), c.String("confine"), c.Int("rounds")
	cfg.Binary, cfg.Dir, cfg.DB = bin, dir, c.String("db")
	if cfg.DB != "" && !store.IsURL(cfg.DB) {
		return cli.Exit(fmt.Sprintf("harvest bench: --db %q: not a postgres:// URL (the default is a fresh SQLite file)", cfg.DB), 2)
	}
	if !cfg.InMemory {
		hostQueueProcs() // this process hosts the queue, as the agent does
	}
	paceCollector() // the queue's and the master's, as in the agent and the pilot
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	cfg.ProfileDir = c.String("profile-dir")
	if p := c.String("trace"); p != "" {
		stopTrace, err := startTrace(p)
		if err != nil {
			return cli.Exit(fmt.Sprintf("harvest bench: %v", err), 1)
		}
		defer func() {
			if err := stopTrace(); err != nil {
				fmt.Fprintf(c.App.ErrWriter, "harvest bench: %v\n", err)
			}
		}()
	}
	stopProfiles, err := startProfiles(cfg.ProfileDir, "bench")
	if err != nil {
		return cli.Exit(fmt.Sprintf("harvest bench: %v", err), 1)
	}
	defer func() {
		if err := stopProfiles(); err != nil {
			fmt.Fprintf(c.App.ErrWriter, "harvest bench: %v\n", err)
		}
	}()
	out := c.App.Writer
	switch c.String("shape") {
	case "":
		if err := cfg.Validate(); err != nil {
			return cli.Exit(err.Error(), 2)
		}
		var mem bench.Result
		if c.Bool("compare") && !cfg.InMemory {
			m := cfg
			m.InMemory = true
			if mem, err = bench.Run(ctx, m); err != nil {
				return cli.Exit(fmt.Sprintf("harvest bench: in memory: %v", err), 1)
			}
			if !c.Bool("json") {
				printDispatch(out, m, mem)
				fmt.Fprintln(out)
			}
		}
		r, err := bench.Run(ctx, cfg)
		if err != nil {
			return cli.Exit(fmt.Sprintf("harvest bench: %v", err), 1)
		}
		if mem.TasksPerS > 0 {
			r.InMemoryTasksPerS, r.RatioToInMemory = mem.TasksPerS, r.TasksPerS/mem.TasksPerS
		}
		if !cfg.InMemory {
			w, err := bench.MeasureWALFrames(ctx, dir, cfg.DB, cfg.Users)
			if err != nil {
				return cli.Exit(fmt.Sprintf("harvest bench: WAL frames: %v", err), 1)
			}
			r.WAL = &w
		}
		if c.Bool("json") {
			return json.NewEncoder(out).Encode(r)
		}
		printDispatch(out, cfg, r)
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
		if !c.IsSet("users") {
			cfg.Users = 1 // the original experiment: one job
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

func printDispatch(out io.Writer, cfg bench.Config, r bench.Result) {
	path := fmt.Sprintf("end to end: real queue (%d users) -> master -> workers -> queue", r.Users)
	if r.Queue == "memory" {
		path = fmt.Sprintf("in-memory feed (%d jobs, a batch of each in turn) -> master -> workers (no queue)", r.Users)
	}
	kind := taskKind(cfg)
	if !cfg.Batched {
		kind += " each"
	}
	if cfg.Exec {
		kind += ", confinement " + cfg.Confine
	}
	if len(r.Rounds) > 1 {
		fmt.Fprintf(out, "round %d of %d in detail (its CPU ratio the median; every round below):\n", r.MedianRound, len(r.Rounds))
	}
	fmt.Fprintf(out, "%s\n%d tasks (%s) on %d workers x %d slots (GOMAXPROCS %d each), batch size %d: makespan %.3f s\n",
		path, r.Tasks, kind, r.Workers, r.Slots, r.WorkerProcs, cfg.BatchSize, r.MakespanS)
	fmt.Fprintf(out, "throughput %.0f tasks/s, overhead %.4f ms per task\n", r.TasksPerS, r.OverheadMS)
	if r.Efficiency > 0 {
		fmt.Fprintf(out, "efficiency %.1f%% (ideal makespan %.3f s)\n", 100*r.Efficiency, r.IdealS)
	}
	fmt.Fprintf(out, "CPU per task: %.1f us in this process (queue + master), %.1f us in the workers\n", r.ProcessCPUUS, r.WorkersCPUUS)
	if w := r.WorkerSplit; w != nil {
		fmt.Fprintf(out, "the workers' CPU per task during the run: %.1f us the worker processes, %.1f us their task runners, %.1f us the tasks (/proc/PID/stat, 10 ms ticks)\n",
			w.WorkerUS, w.RunnerUS, w.TaskUS)
	}
	fmt.Fprintf(out, "the master's exchanges: %d worker pulls, %d worker results posts, %d checkpoint commits (%.1f tasks per commit)\n",
		r.WorkerPulls, r.WorkerResults, r.Commits, float64(r.Tasks)/float64(max(r.Commits, 1)))
	if r.Floor != nil {
		printFloors(out, r)
	}
	fmt.Fprintf(out, "the machine during the run: %.0f%% busy, %.1f%% stolen by the hypervisor (/proc/stat; stolen time lengthens every figure here)\n", r.MachineBusyPct, r.StealPct)
	fmt.Fprintf(out, "Go scheduler latency in this process (GOMAXPROCS %d; goroutines runnable, waiting to run): p99 %.3f ms, p99.9 %.3f ms, longest up to %.1f ms\n", r.Procs, r.SchedP99MS, r.SchedP999MS, r.SchedMaxMS)
	if b := r.Breakdown; b != nil {
		per := func(ms float64) float64 { return ms * 1000 / float64(r.Tasks) }
		fmt.Fprintf(out, "queue handlers per task: pull %.1f us (%d calls, %d empty), results %.1f us (%d calls), heartbeat %.1f us (%d calls)\n",
			per(b.PullMS), b.PullCalls, b.EmptyPulls, per(b.ResultsMS), b.ResultsCalls, per(b.HeartbeatMS), b.HeartbeatCalls)
		if cfg.DB == "" {
			fmt.Fprintf(out, "WAL file at the end: %.1f MiB (SQLite's autocheckpoint)\n", b.WALMB)
		}
		fmt.Fprintf(out, "%s: %.1f us per task, %d transactions (%d over 5 ms), mean %.2f ms, p99 %.2f ms, longest %.1f ms (%s)\n", lockName(cfg.DB),
			per(b.WriteLockMS), b.Transactions, b.SlowTx, b.WriteLockMS/float64(max(b.Transactions, 1)), b.P99TxMS, b.LongestTxMS, b.LongestTxIn)
		if len(b.SlowTxIn) > 0 {
			var parts []string
			for _, m := range slices.Sorted(maps.Keys(b.SlowTxIn)) {
				parts = append(parts, fmt.Sprintf("%s %d", strings.TrimPrefix(m, "store.(*Store)."), b.SlowTxIn[m]))
			}
			fmt.Fprintf(out, "transactions over 5 ms by store method: %s\n", strings.Join(parts, ", "))
		}
	}
	if w := r.WAL; w != nil && w.PullBytes > 0 {
		fmt.Fprintf(out, "WAL bytes (PostgreSQL, pg_current_wal_insert_lsn deltas of the whole server; the store alone in a fresh schema): %d for a pull of one task of each of %d users' jobs, %d for its results\n",
			w.PullBytes, w.Users, w.ResultsBytes)
	} else if w != nil {
		fmt.Fprintf(out, "WAL frames (exact, from SQLite; the store alone on a fresh database): %d for a pull of one task of each of %d users' jobs, %d for its results\n",
			w.Pull, w.Users, w.Results)
	}
	if r.RatioToInMemory > 0 {
		fmt.Fprintf(out, "end to end %.0f tasks/s against %.0f tasks/s in memory (same settings, this invocation): %.2fx\n", r.TasksPerS, r.InMemoryTasksPerS, r.RatioToInMemory)
	}
}

// printFloors prints every floor and round of an --exec run, then the
// median ratios and their spread.
func printFloors(out io.Writer, r bench.Result) {
	f := r.Floor
	fmt.Fprintf(out, "fork/exec floor: the same program %d times in %d plain shell loops at once, before and after each harvest run (CPU: the loops and their programs)\n",
		f.Tasks/max(len(r.Floors), 1), f.Procs)
	for i, fl := range r.Floors {
		fmt.Fprintf(out, "  floor %d: %.0f tasks/s, %.1f us of CPU per task\n", i+1, fl.TasksPerS, fl.CPUUS)
		if i < len(r.Rounds) {
			k := r.Rounds[i]
			fmt.Fprintf(out, "  round %d: harvest %.0f tasks/s, %.1f us of CPU per task; against floors %d and %d (%.0f tasks/s, %.1f us): %.2fx its tasks/s, %.2fx its CPU\n",
				i+1, k.TasksPerS, k.CPUUS, i+1, i+2, k.FloorTasksPerS, k.FloorCPUUS, k.RateRatio, k.CPURatio)
		}
	}
	lo, hi := f.TasksPerS, f.TasksPerS
	clo, chi := f.CPUUS, f.CPUUS
	for _, fl := range r.Floors {
		lo, hi, clo, chi = min(lo, fl.TasksPerS), max(hi, fl.TasksPerS), min(clo, fl.CPUUS), max(chi, fl.CPUUS)
	}
	fmt.Fprintf(out, "the floors' spread: %.0f-%.0f tasks/s (+-%.0f%%), %.1f-%.1f us of CPU per task (+-%.0f%%)\n",
		lo, hi, 50*(hi-lo)/f.TasksPerS, clo, chi, 50*(chi-clo)/f.CPUUS)
	fmt.Fprintf(out, "harvest against the floor (median of %d rounds, each against the floors around it): %.2fx its tasks/s (%.2f-%.2f), %.2fx its CPU per task (%.2f-%.2f)\n",
		len(r.Rounds), r.RateRatio, r.RateRatioSpread.Min, r.RateRatioSpread.Max, r.CPURatio, r.CPURatioSpread.Min, r.CPURatioSpread.Max)
	fmt.Fprintln(out, "harvest's CPU per task: this process (queue + master) from the first pull to the last result, the workers from their start to their exit, their runners' and tasks' included")
}

func taskKind(cfg bench.Config) string {
	switch {
	case cfg.Batched:
		return "exec true {inputs}, once per batch"
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

// lockName names what the write-transaction figures time: SQLite's one
// write lock, or PostgreSQL's transactions (BEGIN to COMMIT, retries apart).
func lockName(db string) string {
	if db == "" {
		return "SQLite write lock"
	}
	return "PostgreSQL write transactions"
}
