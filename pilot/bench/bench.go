// Package bench measures the dispatch path. By default end to end: the
// real queue (SQLite, its HTTP API, the fair-share order over Users users,
// results applied) feeds a master in process (real SQLite checkpoint, real
// HTTP on 127.0.0.1) over HTTP, and the master feeds N worker processes
// (`harvest worker`) whose results go back to the queue (endtoend.go).
// With InMemory, an in-memory task feed (feed.go) stands in for the queue:
// the master and the workers alone, fed the tasks of Users jobs in the
// queue's fair-share order (a batch of each job in turn).
package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"syscall"
	"time"

	"github.com/harvest-hpc/harvest/master"
	"github.com/harvest-hpc/harvest/pilotproto"
	"github.com/harvest-hpc/harvest/worker/confine"
	"github.com/harvest-hpc/harvest/workerproto"
)

// Config of one run.
type Config struct {
	Workers   int           // worker processes
	Slots     int           // slots per worker
	Tasks     int           // tasks in the job
	TaskTime  time.Duration // each task's run time (0: no-op)
	BatchSize int           // the job's batch size
	Exec      bool          // run each task as a real process (sleep/true) instead of in the worker
	// Batched (with Exec, no task time): the job's command is batched,
	// `true {inputs}`, run once per batch (issue 30 item 3); the floor
	// stays one `true` per task.
	Batched bool
	// Confine is the workers' confinement of real tasks (--exec), as a
	// pilot's --confine: auto confines with Landlock where the kernel can.
	Confine string
	// Rounds (with Exec) is how many harvest runs alternate with the
	// floor: floor, harvest, floor, ... (rounds.go). 0 counts as 1.
	Rounds   int
	Users    int    // users competing, one job each (the in-memory feed: a batch of each job in turn)
	InMemory bool   // an in-memory feed instead of the real queue: the master and workers alone
	Binary   string // the harvest binary to start workers with
	Dir      string // scratch directory (checkpoint, task logs)
	// DB is the real queue's database: "" for a SQLite file in Dir, or a
	// postgres:// URL, each run in a fresh schema of its own (dropped).
	DB string
	// WorkerProcs is each worker process's GOMAXPROCS. 0: the machine's
	// cores shared out among the workers (at least 1 each), as if each
	// had its node: on a 2-core machine 4 Go runtimes of 2 threads each
	// spin for work on the cores the queue needs, which production, one
	// worker per node, does not do.
	WorkerProcs int
	// ProfileDir, if set, gets each worker's CPU and allocation profiles
	// (worker-N.cpu.pprof, worker-N.allocs.pprof).
	ProfileDir string
	Logger     *slog.Logger
}

// DefaultConfig is the dispatch benchmark: the real queue with 1,000
// users, 4 workers x 4 slots, 50,000 no-op tasks in batches of 100.
func DefaultConfig() Config {
	return Config{Workers: 4, Slots: 4, Tasks: 50000, BatchSize: 100, Users: 1000, Confine: "auto", Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
}

// Validate reports the first problem.
func (c Config) Validate() error {
	switch {
	case c.Workers < 1 || c.Slots < 1 || c.Tasks < 1 || c.BatchSize < 1:
		return errors.New("bench: workers, slots, tasks and batch size must be at least 1")
	case c.Users < 1 || c.Users > c.Tasks:
		return errors.New("bench: users must be 1..tasks (each user has a job of at least one task)")
	case c.TaskTime < 0:
		return errors.New("bench: task time must not be negative")
	case c.Rounds < 0 || (c.Rounds > 1 && !c.Exec):
		return errors.New("bench: rounds alternate harvest with the fork/exec floor: at least 1, and more only with exec")
	case c.WorkerProcs < 0:
		return errors.New("bench: worker GOMAXPROCS must not be negative (0: the cores shared out)")
	case c.Batched && (!c.Exec || c.TaskTime != 0):
		return errors.New("bench: batched commands are measured with --exec and no task time (true {inputs})")
	case c.Batched && c.BatchSize > pilotproto.MaxBatchedEntries:
		return fmt.Errorf("bench: a batched command takes at most %d entries per batch", pilotproto.MaxBatchedEntries)
	case c.Exec && !validConfine(c.Confine):
		return fmt.Errorf("bench: confine %q: want auto, require or off", c.Confine)
	case c.Binary == "" || c.Dir == "":
		return errors.New("bench: binary and scratch directory must be set")
	}
	return nil
}

func validConfine(m string) bool {
	_, err := confine.ParseMode(m)
	return err == nil
}

// Result of one run. Makespan runs from the moment the master may pull
// (tasks in the queue, all workers registered) until the queue has
// acknowledged every result.
type Result struct {
	Queue string `json:"queue"` // "real" (end to end) or "memory" (master and workers alone)
	// With the in-memory run of the same settings in the same invocation
	// (harvest bench dispatch --compare): its throughput and this run's
	// ratio to it.
	InMemoryTasksPerS float64 `json:"in_memory_tasks_per_s,omitempty"`
	RatioToInMemory   float64 `json:"ratio_to_in_memory,omitempty"`
	// WAL is the queue's WAL frames per pull and per its results with
	// Users users (MeasureWALFrames; real queue only).
	WAL     *WALFrames `json:"wal_frames,omitempty"`
	Users   int        `json:"users,omitempty"`
	Workers int        `json:"workers"`
	Slots   int        `json:"slots_per_worker"`
	// WorkerProcs is each worker process's GOMAXPROCS, Procs this
	// process's (the queue's and the master's).
	WorkerProcs int     `json:"worker_gomaxprocs"`
	Procs       int     `json:"gomaxprocs"`
	Tasks       int     `json:"tasks"`
	TaskTimeMS  float64 `json:"task_time_ms"`
	MakespanS   float64 `json:"makespan_s"`
	IdealS      float64 `json:"ideal_makespan_s"`
	TasksPerS   float64 `json:"tasks_per_s"`
	OverheadMS  float64 `json:"overhead_ms"` // (makespan - ideal) / tasks
	Efficiency  float64 `json:"efficiency"`  // ideal / makespan (0 for no-op tasks)
	// The Go scheduler's latency in this process during the run (how long
	// goroutines waited runnable), to a bucket of the runtime's histogram.
	SchedP99MS  float64 `json:"sched_latency_p99_ms"`
	SchedP999MS float64 `json:"sched_latency_p999_ms"`
	SchedMaxMS  float64 `json:"sched_latency_max_ms"`
	// The whole machine during the run (/proc/stat): the share of its CPU
	// time busy, and the share the hypervisor stole (see parseProcStat).
	MachineBusyPct float64 `json:"machine_busy_pct"`
	StealPct       float64 `json:"steal_pct"`
	// Where the time went (per task, microseconds): CPU of this process
	// (queue and master with their HTTP; the master alone in memory) and
	// of the workers; the queue's handlers' wall time and SQLite's write
	// lock (real queue only).
	ProcessCPUUS float64 `json:"process_cpu_us_per_task"`
	WorkersCPUUS float64 `json:"workers_cpu_us_per_task"`
	// WorkerSplit divides the workers' CPU (from the start of the run to
	// its last result, /proc/PID/stat) into the worker processes', their
	// task runners' and the tasks'.
	WorkerSplit *WorkerSplit `json:"workers_split,omitempty"`
	// The exchanges of the master during the run: its workers' pulls and
	// results posts (its HTTP API, by endpoint) and its checkpoint
	// commits (transactions that wrote).
	WorkerPulls   int        `json:"worker_pulls"`
	WorkerResults int        `json:"worker_results"`
	Commits       int64      `json:"checkpoint_commits"`
	Breakdown     *Breakdown `json:"breakdown,omitempty"`
	// With Exec: the same program in plain loops, one per worker (the
	// machine's fork/exec floor), run before and after each harvest run
	// (rounds.go), and harvest's figures against it: tasks/s (harvest /
	// floor) and CPU per task, all of harvest's processes and the tasks
	// (harvest / floor). Floor is every floor run pooled, Floors each of
	// them in order; Rounds are the harvest runs, each against the floors
	// around it; the ratios are the rounds' medians, the spreads their
	// lowest and highest. The other figures of this Result are of the
	// round MedianRound (from 1), the median CPU ratio's.
	Floor           *Floor  `json:"floor,omitempty"`
	RateRatio       float64 `json:"rate_vs_floor,omitempty"`
	CPURatio        float64 `json:"cpu_vs_floor,omitempty"`
	Floors          []Floor `json:"floors,omitempty"`
	Rounds          []Round `json:"rounds,omitempty"`
	MedianRound     int     `json:"median_round,omitempty"`
	RateRatioSpread Spread  `json:"rate_vs_floor_spread,omitzero"`
	CPURatioSpread  Spread  `json:"cpu_vs_floor_spread,omitzero"`
}

// Run performs one measurement; with Exec, cfg.Rounds of them, each
// between two runs of the fork/exec floor.
func Run(ctx context.Context, cfg Config) (Result, error) {
	if err := cfg.Validate(); err != nil {
		return Result{}, err
	}
	if !cfg.Exec {
		return runOnce(ctx, cfg)
	}
	return runRounds(ctx, max(cfg.Rounds, 1), func(ctx context.Context) (Result, error) { return runOnce(ctx, cfg) },
		func(ctx context.Context) (Floor, error) { return RunFloor(ctx, floorArgv(cfg), cfg.Workers, cfg.Tasks) })
}

// runOnce is one harvest run of cfg.
func runOnce(ctx context.Context, cfg Config) (Result, error) {
	var q pilotproto.Queue
	var start func()
	var finish func(context.Context) error
	var rq *realQueue
	var g *gate
	if cfg.InMemory {
		f := newFeed()
		q = f
		start = func() { f.add(feedTasks(cfg)) }
		finish = func(ctx context.Context) error {
			if err := f.wait(ctx); err != nil {
				return err
			}
			if done, twice := f.counts(); done != cfg.Tasks || twice != 0 {
				return fmt.Errorf("bench: %d of %d tasks done, %d twice", done, cfg.Tasks, twice)
			}
			return nil
		}
	} else {
		var err error
		if rq, err = openRealQueue(ctx, cfg); err != nil {
			return Result{}, err
		}
		defer rq.close()
		g = newGate(rq.pilot)
		q = g
		start = func() {
			g.empty.Store(0)
			rq.q.WriteStats(true)
			rq.timer.reset()
			close(g.opened)
		}
	}

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return Result{}, err
	}
	url := "http://" + ln.Addr().String()
	mc := master.DefaultConfig()
	mc.PilotID, mc.Epoch, mc.Token, mc.Address = "bench", 1, pilotToken, url
	if rq != nil {
		l, err := rq.pilot.Lease(ctx, pilotproto.LeaseRequest{PilotID: mc.PilotID, Address: url})
		if err != nil || !l.Granted {
			ln.Close()
			return Result{}, fmt.Errorf("bench: lease: %+v %v", l, err)
		}
		mc.Epoch = l.Epoch
	}
	mc.CheckpointDir = filepath.Join(cfg.Dir, fmt.Sprintf("bench-%d", time.Now().UnixNano()))
	if err := os.Mkdir(mc.CheckpointDir, 0o700); err != nil {
		ln.Close()
		return Result{}, fmt.Errorf("bench: %w", err)
	}
	// Polls of an empty queue (the run's tail, once every task is
	// pulled) cost the queue and the master a request each: 5 ms made
	// 300-360 of the 400 queue pulls of a 5,000-task --exec run empty
	// (production: a second). The first pull waits for the start instead
	// (gate, feed).
	mc.IdlePoll = 50 * time.Millisecond
	mc.MinBuffer = max(4*cfg.BatchSize, 256)
	mc.SafetyMargin = 0
	mc.Logger = cfg.Logger
	m, err := master.New(mc, q)
	if err != nil {
		ln.Close()
		return Result{}, err
	}
	mctx, mstop := context.WithCancel(ctx)
	mdone := make(chan error, 1)
	go func() { mdone <- m.Run(mctx) }()
	defer func() { mstop(); <-mdone }()
	mtimer := newTiming()
	srv := &http.Server{Handler: mtimer.wrap(m.Handler())}
	go srv.Serve(ln)
	defer srv.Close()

	roots := cfg.Dir
	if rq != nil {
		roots = rq.data
	}
	// The workers' CPU is theirs from their start to their exit (their
	// runners and tasks with it): what this process's children used
	// before (another round, the floor) is not.
	children0 := cpu(syscall.RUSAGE_CHILDREN)
	procs, err := startWorkers(cfg, url, pilotToken, roots)
	defer stopWorkers(procs)
	if err != nil {
		return Result{}, err
	}
	wait, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	if err := m.WaitFor(wait, func(s master.Stats) bool { return s.Workers >= cfg.Workers }); err != nil {
		return Result{}, fmt.Errorf("bench: only %d of %d workers registered: %w", m.Stats().Workers, cfg.Workers, err)
	}

	pids := make([]int, len(procs))
	for i, p := range procs {
		pids[i] = p.Process.Pid
	}
	split0 := sampleSplit(pids)
	machine0, haveMachine := readCPUTimes()
	cpu0, sched0, begin := cpu(syscall.RUSAGE_SELF), readSchedLatency(), time.Now()
	reported0 := m.Stats().Reported
	mtimer.reset()
	commits0 := m.Commits()
	start()
	if finish == nil {
		finish = func(ctx context.Context) error {
			return m.WaitFor(ctx, func(s master.Stats) bool { return s.Reported-reported0 >= cfg.Tasks })
		}
	}
	if err := finish(ctx); err != nil {
		return Result{}, err
	}
	makespan := time.Since(begin)
	procCPU := cpu(syscall.RUSAGE_SELF) - cpu0
	split := sampleSplit(pids).perTask(split0, cfg.Tasks)
	machine1, haveMachine1 := readCPUTimes()
	schedQ, schedMost := schedQuantiles(sched0, readSchedLatency(), 0.99, 0.999)
	stopWorkers(procs)
	procs = nil
	r := summarize(cfg, makespan)
	r.ProcessCPUUS = float64(procCPU.Microseconds()) / float64(cfg.Tasks)
	r.SchedP99MS, r.SchedP999MS, r.SchedMaxMS = 1000*schedQ[0], 1000*schedQ[1], 1000*schedMost
	if haveMachine && haveMachine1 {
		r.MachineBusyPct, r.StealPct = shares(machine0, machine1)
	}
	r.WorkersCPUUS = float64((cpu(syscall.RUSAGE_CHILDREN) - children0).Microseconds()) / float64(cfg.Tasks)
	r.WorkerSplit = split
	r.WorkerPulls, _ = mtimer.get(workerproto.PathPull)
	r.WorkerResults, _ = mtimer.get(workerproto.PathResults)
	r.Commits = m.Commits() - commits0
	r.Users = cfg.Users
	if rq == nil {
		r.Queue = "memory"
		return r, nil
	}
	r.Queue = "real"
	if err := rq.check(ctx, cfg.Tasks); err != nil {
		return r, err
	}
	ws := rq.q.WriteStats(false)
	b := &Breakdown{WriteLockMS: float64(ws.Total.Microseconds()) / 1000, LongestTxMS: float64(ws.Longest.Microseconds()) / 1000, LongestTxIn: ws.LongestIn, SlowTx: ws.Slow, SlowTxIn: ws.SlowBy,
		P99TxMS: float64(ws.Quantile(0.99).Microseconds()) / 1000, Transactions: ws.Transactions, ProcessCPUS: procCPU.Seconds(), WorkersCPUS: r.WorkersCPUUS * float64(cfg.Tasks) / 1e6}
	b.PullCalls, b.PullMS = rq.timer.get(pilotproto.PathPull)
	b.EmptyPulls = g.empty.Load()
	b.ResultsCalls, b.ResultsMS = rq.timer.get(pilotproto.PathResults)
	b.HeartbeatCalls, b.HeartbeatMS = rq.timer.get(pilotproto.PathHeartbeat)
	b.WALMB = float64(rq.q.WALBytes()) / (1 << 20)
	r.Breakdown = b
	return r, nil
}

// feedTasks are the in-memory feed's tasks, in the order the queue's
// fair share hands out the real run's jobs (Users users of equal standing,
// one job each, the tasks shared out as openRealQueue does, no cores
// quota): the jobs in turn, a batch of each per turn.
func feedTasks(cfg Config) []pilotproto.Task {
	tasks := make([]pilotproto.Task, 0, cfg.Tasks)
	argv := taskArgv(cfg)
	out := filepath.Join(cfg.Dir, "out")
	left := make([]int, cfg.Users)
	per, extra := cfg.Tasks/cfg.Users, cfg.Tasks%cfg.Users
	for u := range left {
		left[u] = per
		if u < extra {
			left[u]++
		}
	}
	for len(tasks) < cfg.Tasks {
		for u := range left {
			for k := min(max(cfg.BatchSize, 1), left[u]); k > 0; k-- {
				i := len(tasks)
				tasks = append(tasks, pilotproto.Task{ID: int64(i + 1), JobID: int64(u + 1), Name: strconv.Itoa(i), Command: argv,
					OutputDir: out, Output: filepath.Join(out, strconv.Itoa(i)), BatchSize: cfg.BatchSize})
				left[u]--
			}
		}
	}
	return tasks
}

// taskArgv is the command of every task: true, or sleep TaskTime; with
// Batched, true {inputs}.
func taskArgv(cfg Config) []string {
	if cfg.Batched {
		return []string{"true", pilotproto.PlaceholderInputs}
	}
	return floorArgv(cfg)
}

// floorArgv is the program the floor runs once per task.
func floorArgv(cfg Config) []string {
	if cfg.TaskTime > 0 {
		return []string{"sleep", strconv.FormatFloat(cfg.TaskTime.Seconds(), 'f', 3, 64)}
	}
	return []string{"true"}
}

func summarize(cfg Config, makespan time.Duration) Result {
	slots := cfg.Workers * cfg.Slots
	waves := (cfg.Tasks + slots - 1) / slots
	ideal := time.Duration(waves) * cfg.TaskTime
	r := Result{Workers: cfg.Workers, Slots: cfg.Slots, WorkerProcs: workerProcs(cfg, runtime.NumCPU()), Procs: runtime.GOMAXPROCS(0), Tasks: cfg.Tasks,
		TaskTimeMS: float64(cfg.TaskTime) / 1e6, MakespanS: makespan.Seconds(), IdealS: ideal.Seconds(),
		TasksPerS:  float64(cfg.Tasks) / makespan.Seconds(),
		OverheadMS: float64(makespan-ideal) / 1e6 / float64(cfg.Tasks)}
	if ideal > 0 {
		r.Efficiency = ideal.Seconds() / makespan.Seconds()
	}
	return r
}

func startWorkers(cfg Config, url, token, roots string) ([]*exec.Cmd, error) {
	var procs []*exec.Cmd
	for i := 0; i < cfg.Workers; i++ {
		args := []string{"worker", "--master", url, "--id", fmt.Sprintf("worker-%d", i),
			"--slots", strconv.Itoa(cfg.Slots), "--task-time", cfg.TaskTime.String()}
		if cfg.Exec {
			args = append(args, "--exec", "--confine", cfg.Confine, "--task-roots", roots)
		}
		if cfg.ProfileDir != "" {
			args = append(args, "--profile-dir", cfg.ProfileDir)
		}
		cmd := exec.Command(cfg.Binary, args...)
		cmd.Env = append(os.Environ(), "HARVEST_PILOT_TOKEN="+token, "GOMAXPROCS="+strconv.Itoa(workerProcs(cfg, runtime.NumCPU())))
		logf, err := os.Create(filepath.Join(cfg.Dir, fmt.Sprintf("worker-%d.log", i)))
		if err != nil {
			return procs, err
		}
		cmd.Stdout, cmd.Stderr = logf, logf
		if err := cmd.Start(); err != nil {
			logf.Close()
			return procs, fmt.Errorf("bench: start worker: %w", err)
		}
		logf.Close()
		procs = append(procs, cmd)
	}
	return procs, nil
}

// workerProcs is the GOMAXPROCS of each worker process on a machine of
// cpus cores.
func workerProcs(cfg Config, cpus int) int {
	if cfg.WorkerProcs > 0 {
		return cfg.WorkerProcs
	}
	return max(1, cpus/cfg.Workers)
}

func stopWorkers(procs []*exec.Cmd) {
	for _, p := range procs {
		p.Process.Signal(syscall.SIGTERM)
	}
	for _, p := range procs {
		done := make(chan struct{})
		go func() { p.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			p.Process.Kill()
			<-done
		}
	}
}
