package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/harvest-hpc/harvest/capacity"

	"github.com/harvest-hpc/harvest/master"
	"github.com/harvest-hpc/harvest/pilot"
	"github.com/harvest-hpc/harvest/queue/client"
	"github.com/harvest-hpc/harvest/worker"
	"github.com/harvest-hpc/harvest/worker/confine"
)

func pilotCommand() *cli.Command {
	return &cli.Command{
		Name:  "pilot",
		Usage: "run inside a pilot job: become the master (lease) or a worker of the master",
		Description: "Every pilot job runs `harvest pilot`. It asks the agent's queue for the master lease; the\n" +
			"winner runs the master (batches, SQLite checkpoint in the state directory) and a side worker\n" +
			"on cores-1 slots, the others run workers for the master the lease names. SIGTERM (scancel, time\n" +
			"limit) stops the pilot within seconds: its unfinished tasks are reported interrupted and requeued.\n" +
			"Tasks run with a clean environment and, where the kernel has Landlock, confined: they read the system\n" +
			"directories and the allowed roots, and write only their job's output directory and a temporary directory.\n" +
			"The deadline is --deadline, else SLURM_JOB_END_TIME, else squeue's end time for SLURM_JOB_ID,\n" +
			"else --time-limit from now, else none.",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "queue", EnvVars: []string{"HARVEST_QUEUE"}, Usage: "the agent's queue `URL` (http://head:port), or a comma-separated list of the agents serving one database (the agent sets it)"},
			&cli.StringFlag{Name: "state-dir", EnvVars: []string{"HARVEST_STATE_DIR"}, Usage: "shared `DIR` for the master checkpoint"},
			&cli.StringFlag{Name: "pilot-id", EnvVars: []string{"HARVEST_PILOT_ID", "SLURM_JOB_ID"}, Usage: "this pilot's id (the batch job id)"},
			&cli.IntFlag{Name: "slots", EnvVars: []string{"HARVEST_SLOTS", "SLURM_CPUS_ON_NODE"}, Usage: "tasks at once (default: the cores of this node)"},
			&cli.Int64Flag{Name: "deadline", EnvVars: []string{"HARVEST_DEADLINE"}, Usage: "the pilot's end, Unix seconds"},
			&cli.DurationFlag{Name: "time-limit", EnvVars: []string{"HARVEST_TIME_LIMIT"}, Usage: "the pilot's end, counted from now (when SLURM cannot tell)"},
			&cli.StringFlag{Name: "listen", EnvVars: []string{"HARVEST_LISTEN"}, Value: "0.0.0.0:0", Usage: "`ADDR` the master API listens on (when this pilot is master)"},
			&cli.StringFlag{Name: "advertise", EnvVars: []string{"HARVEST_ADVERTISE"}, Usage: "`HOST[:PORT]` other pilots reach this one at (default: hostname)"},
			&cli.DurationFlag{Name: "safety-margin", EnvVars: []string{"HARVEST_SAFETY_MARGIN"}, Value: time.Minute, Usage: "no batch is planned to end later than the worker's deadline minus this"},
			&cli.DurationFlag{Name: "master-grace", EnvVars: []string{"HARVEST_MASTER_GRACE"}, Value: 30 * time.Second, Usage: "a worker whose master does not answer for this long goes back to the lease"},
			&cli.DurationFlag{Name: "worker-timeout", EnvVars: []string{"HARVEST_WORKER_TIMEOUT"}, Value: time.Minute, Usage: "the master requeues the batches of a worker silent for this long"},
			&cli.DurationFlag{Name: "reconnect-grace", EnvVars: []string{"HARVEST_RECONNECT_GRACE"}, Value: 30 * time.Second, Usage: "a new master keeps the batches of workers that come back within this"},
			&cli.StringFlag{Name: "checkpoint-journal", EnvVars: []string{"HARVEST_CHECKPOINT_JOURNAL"}, Value: master.DefaultJournal, Usage: "SQLite rollback journal of the checkpoint on the shared state directory: TRUNCATE or DELETE (WAL is refused: it needs shared memory on one host)"},
			&cli.DurationFlag{Name: "heartbeat", EnvVars: []string{"HARVEST_HEARTBEAT"}, Value: 5 * time.Second, Usage: "worker heartbeat period (the master's queue heartbeat is twice this)"},
			&cli.Float64Flag{Name: "capacity-factor", EnvVars: []string{"HARVEST_CAPACITY_FACTOR"}, Value: capacity.DefaultConfig().Factor, Usage: "the master stops growing its pool where a job's tasks take more than this x their fastest (0: no cap)"},
			&cli.IntFlag{Name: "capacity-hold", EnvVars: []string{"HARVEST_CAPACITY_HOLD"}, Value: capacity.DefaultConfig().HoldRounds, Usage: "queue heartbeats the size found is held before a larger one is tried again"},
			&cli.IntFlag{Name: "capacity-initial", EnvVars: []string{"HARVEST_CAPACITY_INITIAL"}, Value: capacity.DefaultConfig().InitialSize, Usage: "pilots the pool may hold before any size is judged (it doubles while tasks keep their speed)"},
			&cli.StringFlag{Name: "confine", EnvVars: []string{"HARVEST_CONFINE"}, Value: string(confine.ModeAuto), Usage: "confine tasks with Landlock: auto (where the kernel can; the pilot says whether it did), require (refuse to start without), off"},
			&cli.StringFlag{Name: "site", EnvVars: []string{"HARVEST_SITE"}, Usage: "the site (cluster) this pilot runs at; its tasks see it as HARVEST_SITE (the agent sets it)"},
			&cli.StringSliceFlag{Name: "task-roots", EnvVars: []string{"HARVEST_TASK_ROOTS"}, Usage: "the queue's allowed roots `DIR`s: inputs must resolve inside them; a confined task reads only its own job's dataset and linked entry there (the agent sets it)"},
			&cli.StringSliceFlag{Name: "task-read", EnvVars: []string{"HARVEST_TASK_READ"}, Usage: "more `DIR`s every confined task may read (site software, shared reference data), separated by commas or colons: /cvmfs:/apps"},
			&cli.Int64Flag{Name: "task-log-max-mb", EnvVars: []string{"HARVEST_TASK_LOG_MAX_MB"}, Value: worker.DefaultLogMax >> 20, Usage: "each task log (stdout, stderr) keeps its first `MB` MiB, a marker line and its last 8 KiB; the task runs on (0: no limit)"},
			&cli.StringFlag{Name: "log-level", Value: "info", EnvVars: []string{"HARVEST_LOG_LEVEL"}, Usage: "debug, info, warn or error"},
			&cli.BoolFlag{Name: "log-json", EnvVars: []string{"HARVEST_LOG_JSON"}, Usage: "log as JSON lines"},
		},
		Action: runPilot,
	}
}

func runPilot(c *cli.Context) error {
	paceCollector()
	log := newLogger(os.Stderr, c.String("log-level"), c.Bool("log-json"))
	token := os.Getenv("HARVEST_PILOT_TOKEN")
	if c.String("queue") == "" {
		return cli.Exit("harvest pilot: --queue (or HARVEST_QUEUE) is required", 2)
	}
	qc := client.DefaultConfig()
	qc.URL, qc.Token = c.String("queue"), token
	cl, err := client.New(qc)
	if err != nil {
		return cli.Exit(fmt.Sprintf("harvest pilot: %v", err), 2)
	}
	var explicit time.Time
	if d := c.Int64("deadline"); d > 0 {
		explicit = time.Unix(d, 0)
	}
	deadline, source, err := pilot.ResolveDeadline(pilot.DeadlineSources{
		Explicit: explicit, TimeLimit: c.Duration("time-limit"), Start: time.Now(), Getenv: os.Getenv, Squeue: squeueEnd,
	})
	if err != nil {
		return cli.Exit(fmt.Sprintf("harvest pilot: deadline: %v", err), 2)
	}
	cfg := pilot.DefaultConfig()
	cfg.PilotID, cfg.Token, cfg.StateDir = c.String("pilot-id"), token, c.String("state-dir")
	cfg.Slots = c.Int("slots")
	if cfg.Slots == 0 {
		cfg.Slots = runtime.NumCPU()
	}
	cfg.Deadline, cfg.Listen, cfg.Advertise = deadline, c.String("listen"), c.String("advertise")
	cfg.Logger = log
	mode, err := confine.ParseMode(c.String("confine"))
	if err != nil {
		return cli.Exit(fmt.Sprintf("harvest pilot: --confine: %v", err), 2)
	}
	cfg.Confine, cfg.TaskRoots, cfg.TaskRead = mode, dirList(c.StringSlice("task-roots")), dirList(c.StringSlice("task-read"))
	cfg.Site = c.String("site")
	mb := c.Int64("task-log-max-mb")
	if mb < 0 || mb > 1<<30 {
		return cli.Exit(fmt.Sprintf("harvest pilot: --task-log-max-mb %d: want 0 (no limit) to %d", mb, int64(1<<30)), 2)
	}
	cfg.TaskLogMax = mb << 20
	cfg.Master.SafetyMargin = c.Duration("safety-margin")
	cfg.Master.WorkerTimeout, cfg.Master.ReconnectGrace = c.Duration("worker-timeout"), c.Duration("reconnect-grace")
	// The lease is renewed every second whatever the heartbeat (master
	// default): a failover's pause is bounded by the lease TTL.
	cfg.Master.HeartbeatInterval = 2 * c.Duration("heartbeat")
	cfg.Master.JournalMode = c.String("checkpoint-journal")
	if f := c.Float64("capacity-factor"); f == 0 {
		cfg.Master.Capacity = nil
	} else {
		cc := capacity.DefaultConfig()
		cc.Factor, cc.HoldRounds, cc.InitialSize = f, c.Int("capacity-hold"), c.Int("capacity-initial")
		cfg.Master.Capacity = &cc
	}
	cfg.Worker.MasterGrace, cfg.Worker.HeartbeatInterval = c.Duration("master-grace"), c.Duration("heartbeat")
	if pw := cfg.Master.WorkerTimeout / 3; pw < cfg.Master.PullWait {
		// Long-polls must end well within the worker timeout.
		cfg.Master.PullWait, cfg.Worker.PullWait = pw, pw
	}
	cfg.Master.Logger, cfg.Worker.Logger = log, log
	if err := cfg.Validate(); err != nil {
		return cli.Exit(fmt.Sprintf("harvest pilot: %v", err), 2)
	}
	log.Info("pilot deadline", "deadline", deadline, "source", source)
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	return pilot.Run(ctx, cfg, cl)
}

// dirList splits directory lists given with commas (the flag) or colons
// (as PATH, which survives --pilot-env, whose values are cut at commas).
func dirList(vals []string) []string {
	var out []string
	for _, v := range vals {
		for _, d := range strings.Split(v, ":") {
			if d = strings.TrimSpace(d); d != "" {
				out = append(out, d)
			}
		}
	}
	return out
}

// workerExecRunner is the bench worker's runner of real tasks, confined
// under mode as a pilot's are.
func workerExecRunner(mode string, roots []string) (*worker.ExecRunner, error) {
	m, err := confine.ParseMode(mode)
	if err != nil {
		return nil, fmt.Errorf("--confine: %w", err)
	}
	r := worker.DefaultExecRunner()
	for _, d := range roots {
		real, err := filepath.EvalSymlinks(d)
		if err != nil {
			return nil, fmt.Errorf("--task-roots: %w", err)
		}
		r.Roots = append(r.Roots, real)
	}
	if m != confine.ModeOff {
		if r.Jail, err = confine.Self(m); err != nil {
			return nil, err
		}
	}
	return r, nil
}

// squeueEnd asks SLURM for the job's end time in Unix seconds.
func squeueEnd(jobID string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "squeue", "-h", "-j", jobID, "-o", "%e")
	cmd.Env = append(os.Environ(), "SLURM_TIME_FORMAT=%s")
	out, err := cmd.Output()
	return string(out), err
}

// workerCommand is a bare worker for a known master: the processes of
// `harvest bench dispatch`, and a debugging aid. Hidden: pilots find
// their master through the lease instead.
func workerCommand() *cli.Command {
	return &cli.Command{
		Name:   "worker",
		Usage:  "run a worker for the master at --master (benchmarks, debugging)",
		Hidden: true,
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "master", Required: true, Usage: "master `URL`"},
			&cli.StringFlag{Name: "id", Usage: "worker id (default: host-pid)"},
			&cli.IntFlag{Name: "slots", Value: 1, Usage: "tasks at once"},
			&cli.DurationFlag{Name: "task-time", Usage: "run every task as an in-process sleep of this long (0: no-op) instead of its command"},
			&cli.BoolFlag{Name: "exec", Usage: "run each task's real command (the bench sends sleep/true)"},
			&cli.StringFlag{Name: "confine", Value: string(confine.ModeOff), Usage: "with --exec: confine tasks with Landlock as a pilot does: auto, require, off"},
			&cli.StringSliceFlag{Name: "task-roots", Usage: "with --exec: the queue's allowed roots (`DIR`s, separated by commas or colons): inputs must lie in them, a confined task reads its own job's dataset there"},
			&cli.StringFlag{Name: "log-level", Value: "warn", EnvVars: []string{"HARVEST_LOG_LEVEL"}},
			&cli.StringFlag{Name: "profile-dir", Usage: "write CPU and allocation profiles to `DIR`/ID.cpu.pprof and ID.allocs.pprof when the worker stops"},
		},
		Action: func(c *cli.Context) error {
			paceCollector() // a pilot's worker's
			log := newLogger(os.Stderr, c.String("log-level"), false)
			cfg := worker.DefaultConfig()
			cfg.ID = c.String("id")
			if cfg.ID == "" {
				host, _ := os.Hostname()
				cfg.ID = host + "-" + strconv.Itoa(os.Getpid())
			}
			cfg.PilotID, cfg.Slots, cfg.Token, cfg.Logger = cfg.ID, c.Int("slots"), os.Getenv("HARVEST_PILOT_TOKEN"), log
			switch {
			case c.Bool("exec"):
				r, err := workerExecRunner(c.String("confine"), dirList(c.StringSlice("task-roots")))
				if err != nil {
					return cli.Exit(fmt.Sprintf("harvest worker: %v", err), 2)
				}
				cfg.Runner = r
			case c.Duration("task-time") > 0:
				cfg.Runner = worker.SleepRunner{D: c.Duration("task-time")}
			default:
				cfg.Runner = worker.NoopRunner{}
			}
			url := c.String("master")
			w, err := worker.New(cfg, func(context.Context) (worker.Endpoint, error) { return worker.Endpoint{URL: url}, nil })
			if err != nil {
				return cli.Exit(fmt.Sprintf("harvest worker: %v", err), 2)
			}
			stopProfiles, err := startProfiles(c.String("profile-dir"), cfg.ID)
			if err != nil {
				return cli.Exit(fmt.Sprintf("harvest worker: %v", err), 1)
			}
			ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
			defer stop()
			err = w.Run(ctx)
			return errors.Join(err, stopProfiles())
		},
	}
}
