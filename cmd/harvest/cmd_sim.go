package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	simcluster "github.com/harvest-hpc/harvest/adapters/sim"
	"github.com/harvest-hpc/harvest/capacity"
	"github.com/harvest-hpc/harvest/cluster"
	"github.com/harvest-hpc/harvest/sim"
	"github.com/urfave/cli/v2"
)

// simCommand replays a workload on the simulated cluster (DESIGN.md,
// "harvest sim").
func simCommand() *cli.Command {
	return &cli.Command{
		Name:  "sim",
		Usage: "replay a workload on a simulated cluster, with or without harvesting, and measure it",
		Description: "Modes: baseline (every job an ordinary batch job), harvest (the agent fills the holes;\n" +
			"thesis Calibration jobs and --harvest-backlog go to the harvest queue), fixed (pilots with\n" +
			"--fixed-limit whenever nodes are idle, as pilot-job tools do). Times are virtual seconds.\n" +
			"Give-back modes (harvest mode): polling (the agent cancels pilots at its next round),\n" +
			"preemption (pilots above the floor in a preemptible tier the scheduler preempts at once,\n" +
			"--grace seconds before their node is free), preemption-sizing (preemption, plus the scheduler\n" +
			"sizing pilots to its plan and the agent pulling in the end of pilots the top job needs).\n" +
			"Several modes (--give-back all) run a baseline too and print them side by side, with each\n" +
			"mode's delays of the foreign jobs against the baseline, job by job.",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "workload", Usage: "workload `FILE` (.txt thesis format, .swf or .swf.gz)", Required: true},
			&cli.StringFlag{Name: "format", Usage: "thesis or swf (default: from the file name)"},
			&cli.IntFlag{Name: "nodes", Usage: "cluster size in nodes (default for SWF: the header's MaxNodes, else MaxProcs)"},
			&cli.StringFlag{Name: "mode", Usage: "baseline, harvest or fixed", Value: "harvest"},
			&cli.StringFlag{Name: "give-back", Usage: "`MODES`: polling, preemption, preemption-sizing, a comma-separated list, or all", Value: "polling"},
			&cli.DurationFlag{Name: "grace", Usage: "in the preemption modes, how long a preempted pilot keeps its node"},
			&cli.DurationFlag{Name: "fixed-limit", Usage: "pilot time limit in fixed mode", Value: time.Hour},
			&cli.Int64Flag{Name: "from", Usage: "replay jobs submitted from `S` seconds of the trace (default: its start)", Value: -1},
			&cli.Int64Flag{Name: "to", Usage: "... until `S` seconds (default: last submit + 30 min)", Value: -1},
			&cli.Int64Flag{Name: "harvest-backlog", Usage: "`N` harvest tasks queued at the start"},
			&cli.DurationFlag{Name: "harvest-lead", Usage: "start the harvest (backlog, agent, pilots) this long before --from, as a pool already running when the window opens; the figures stay those of the window (0 = the harvest starts at --from)"},
			&cli.Int64Flag{Name: "task-seconds", Usage: "length of one harvest task", Value: 60},
			&cli.BoolFlag{Name: "harvest-while-idle", Usage: "keep pilots on idle nodes even with no backlog"},
			&cli.DurationFlag{Name: "poll", Usage: "agent round interval (virtual time)", Value: 10 * time.Second},
			&cli.DurationFlag{Name: "fast-poll", Usage: "agent round interval while pilots hold nodes a waiting job could start on once one running job ends (harvest agent --fast-poll; 0 = always --poll)", Value: time.Duration(sim.DefaultConfig().FastPoll) * time.Second},
			&cli.DurationFlag{Name: "event-check", Usage: "how often the agent asks the job-event count between rounds; a change brings a round a second later (harvest agent --event-check; SLURM: one sdiag; 0 = off)", Value: time.Duration(sim.DefaultConfig().EventCheck) * time.Second},
			&cli.DurationFlag{Name: "latency", Usage: "batch system reaction latency (scheduler interval)", Value: 0},
			&cli.DurationFlag{Name: "bf-interval", Usage: "backfill only every `D` (SLURM's bf_interval; 30s is its default): between backfill passes the main scheduler starts jobs in priority order and stops at the first that cannot start (0 = every pass backfills)"},
			&cli.BoolFlag{Name: "bf-busy", Usage: "with --bf-interval: backfill every interval even when nothing changed (a site whose job traffic keeps SLURM's backfill thread busy)"},
			&cli.IntFlag{Name: "reservations", Usage: "pending jobs that get a backfill reservation (1 = EASY)", Value: 1},
			&cli.DurationFlag{Name: "max-time", Usage: "partition MaxTime: the longest pilot limit (0 = unlimited)"},
			&cli.IntFlag{Name: "min-nodes", Usage: "admin floor of pilots the harvest keeps (policy MinNodes)"},
			&cli.IntFlag{Name: "idle-margin", Usage: "idle nodes the agent leaves free while a foreign job waits, when polling (harvest agent --idle-margin; 0 = off)", Value: sim.DefaultConfig().Agent.Policy.IdleMargin},
			&cli.IntFlag{Name: "max-nodes", Usage: "admin cap of pilots (policy MaxNodes; 0 = none): a fixed pool size"},
			&cli.IntFlag{Name: "contention", Usage: "harvest tasks a shared resource serves at full speed: past `C` running tasks each new task is slowed by running/C (0 = none)"},
			&cli.BoolFlag{Name: "capacity", Usage: "run the master's degradation-aware capacity rule (growth stops where tasks slow down beyond --capacity-factor)"},
			&cli.Float64Flag{Name: "capacity-factor", Usage: "with --capacity: a pool size is degraded when tasks take more than this x their fastest", Value: capacity.DefaultConfig().Factor},
			&cli.IntFlag{Name: "capacity-hold", Usage: "with --capacity: polls the size found is held before a larger one is tried again", Value: capacity.DefaultConfig().HoldRounds},
			&cli.IntFlag{Name: "capacity-initial", Usage: "with --capacity: pilots allowed before any size is judged", Value: capacity.DefaultConfig().InitialSize},
			&cli.BoolFlag{Name: "no-recommend", Usage: "ignore the master's MiniNode recommendation (keep no floor of pilots)"},
			&cli.BoolFlag{Name: "keep-recommended", Usage: "let the recommendation keep pilots a waiting job could use, as the admin's floor does (the original system's rule)"},
			&cli.BoolFlag{Name: "no-time-aware", Usage: "pilots take tasks even if they cannot finish before the pilot's limit"},
			&cli.IntFlag{Name: "procs-per-node", Usage: "processors per node, whole nodes: a job of P processors (SWF) takes ceil(P / `N`) nodes of its own", Value: 1},
			&cli.IntFlag{Name: "cores-per-node", Usage: "cores per node, shared nodes: a job of P processors (SWF) takes P cores, nodes shared as SLURM's select/cons_tres shares them, pilots on whole idle nodes (default for SWF: the header's MaxProcs / MaxNodes; 1 = whole nodes)"},
			&cli.IntFlag{Name: "generate", Usage: "replace the workload by `N` jobs drawn from it for a machine of --nodes x --procs-per-node (sizes, run times, limits, users and arrival gaps of the trace, sizes scaled to keep its offered load; see docs/sim.md)"},
			&cli.IntFlag{Name: "generate-days", Usage: "with --generate: the days the jobs arrive over", Value: 30},
			&cli.Uint64Flag{Name: "seed", Usage: "with --generate: the draw's seed (same seed, same workload)", Value: 1},
			&cli.StringFlag{Name: "profile", Usage: "write CPU and allocation profiles of the run to `DIR` (sim.cpu.pprof, sim.allocs.pprof)"},
			&cli.BoolFlag{Name: "warm", Usage: "start with the jobs the trace shows running or queued at --from (SWF recorded waits)"},
			&cli.StringFlag{Name: "priority", Usage: "queue order: fifo, or multifactor (SLURM's age, job size and fair share)", Value: "fifo"},
			&cli.StringFlag{Name: "priority-weights", Usage: "multifactor weights and times, e.g. `age=1000,size=1000,fairshare=1000,max-age=7d,half-life=7d` (these are the defaults)"},
			&cli.BoolFlag{Name: "json", Usage: "print the result as JSON"},
			&cli.BoolFlag{Name: "quiet", Usage: "no progress on stderr"},
			&cli.StringFlag{Name: "jobs-csv", Usage: "write id,kind,nodes,submit_s,start_s,end_s,blocked_s of every job to `FILE`"},
			&cli.StringFlag{Name: "decisions", Usage: "write the agent's acting decisions (time, case, reason) to `FILE`"},
			&cli.StringFlag{Name: "plot", Usage: "write an SVG of node use over time to `FILE.svg`"},
		},
		Action: runSim,
	}
}

func runSim(c *cli.Context) error {
	errw := c.App.ErrWriter
	if errw == nil {
		errw = os.Stderr
	}
	quiet := c.Bool("quiet") || c.Bool("json")
	w, err := sim.ReadFile(c.String("workload"), c.String("format"))
	if err != nil {
		return cli.Exit(err.Error(), 2)
	}
	cfg := sim.DefaultConfig()
	cfg.Mode = sim.Mode(c.String("mode"))
	if cfg.Nodes, err = simNodes(c, w, errw, quiet); err != nil {
		return err
	}
	if cfg.CoresPerNode, err = simCores(c, w, errw, quiet); err != nil {
		return err
	}
	if n := c.Int("generate"); n > 0 {
		gc := sim.GenerateConfig{Nodes: cfg.Nodes, ProcsPerNode: max(c.Int("procs-per-node"), cfg.CoresPerNode), Jobs: n, Span: int64(c.Int("generate-days")) * 86400, Seed: c.Uint64("seed")}
		if w, err = sim.Generate(w, gc); err != nil {
			return cli.Exit(err.Error(), 2)
		}
		if !quiet {
			fmt.Fprintf(errw, "sim: %s\n", w.Header.Get("Note"))
		}
	}
	defer reportResources(errw, quiet)
	if os.Getenv("GOGC") == "" && os.Getenv("GOMEMLIMIT") == "" {
		// A replay allocates per round what it drops at the next: the
		// collector's default (100) spends a third of a large run's CPU.
		// 400 halves that, and the soft limit keeps the heap from
		// growing to four times the live one on large runs (GOGC or
		// GOMEMLIMIT override both).
		debug.SetGCPercent(400)
		debug.SetMemoryLimit(simMemoryLimit)
	}
	stopProfiles, err := startProfiles(c.String("profile"), "sim")
	if err != nil {
		return cli.Exit(err.Error(), 2)
	}
	defer func() {
		if err := stopProfiles(); err != nil {
			fmt.Fprintf(errw, "sim: %v\n", err)
		}
	}()
	cfg.FixedLimit = cluster.Seconds(int64(c.Duration("fixed-limit") / time.Second))
	cfg.From, cfg.To = c.Int64("from"), c.Int64("to")
	cfg.HarvestBacklog = c.Int64("harvest-backlog")
	cfg.HarvestLead = int64(c.Duration("harvest-lead") / time.Second)
	cfg.TaskSeconds = c.Int64("task-seconds")
	cfg.HarvestWhileIdle = c.Bool("harvest-while-idle")
	cfg.Poll = int64(c.Duration("poll") / time.Second)
	cfg.FastPoll = int64(c.Duration("fast-poll") / time.Second)
	cfg.EventCheck = int64(c.Duration("event-check") / time.Second)
	cfg.Cluster.Latency = int64(c.Duration("latency") / time.Second)
	cfg.Cluster.BackfillInterval = int64(c.Duration("bf-interval") / time.Second)
	cfg.Cluster.BackfillBusy = c.Bool("bf-busy")
	cfg.Cluster.Reservations = c.Int("reservations")
	cfg.Cluster.TimeAware = !c.Bool("no-time-aware")
	if d := c.Duration("max-time"); d > 0 {
		cfg.Cluster.MaxTime = cluster.Seconds(int64(d / time.Second))
	}
	cfg.ProcsPerNode = c.Int("procs-per-node")
	cfg.Warm = c.Bool("warm")
	switch c.String("priority") {
	case "fifo":
		if c.IsSet("priority-weights") {
			return cli.Exit("--priority-weights needs --priority multifactor", 2)
		}
	case "multifactor":
		m, err := parseMultifactor(c.String("priority-weights"))
		if err != nil {
			return cli.Exit(err.Error(), 2)
		}
		cfg.Cluster.Multifactor = &m
	default:
		return cli.Exit(fmt.Sprintf("--priority %q: want fifo or multifactor", c.String("priority")), 2)
	}
	cfg.Agent.Policy.MinNodes = c.Int("min-nodes")
	cfg.Agent.Policy.IdleMargin = c.Int("idle-margin")
	cfg.Agent.Policy.MaxNodes = c.Int("max-nodes")
	cfg.Cluster.Contention = c.Int("contention")
	if c.Bool("capacity") {
		cc := capacity.DefaultConfig()
		cc.Factor, cc.HoldRounds, cc.InitialSize = c.Float64("capacity-factor"), c.Int("capacity-hold"), c.Int("capacity-initial")
		if err := cc.Validate(); err != nil {
			return cli.Exit(err.Error(), 2)
		}
		cfg.Capacity = &cc
	}
	cfg.NoRecommend = c.Bool("no-recommend")
	cfg.Agent.Policy.KeepRecommended = c.Bool("keep-recommended")
	gbs, err := giveBacks(c.String("give-back"))
	if err != nil {
		return cli.Exit(err.Error(), 2)
	}
	cfg.GiveBack, cfg.GraceTime = gbs[0], int64(c.Duration("grace")/time.Second)
	if cfg.GraceTime > 0 && len(gbs) > 1 {
		cfg.GiveBack = sim.Preemption // validated as a preemption mode; each run sets its own
	}
	if err := cfg.Validate(); err != nil {
		return cli.Exit(err.Error(), 2)
	}
	if len(gbs) > 1 && (cfg.Mode != sim.Harvest || c.String("jobs-csv") != "" || c.String("plot") != "" || c.String("decisions") != "") {
		return cli.Exit("several give-back modes run in harvest mode only, without --jobs-csv, --plot or --decisions", 2)
	}
	if !quiet {
		fmt.Fprintf(errw, "sim: %s: %s\n", c.String("workload"), w.Summary())
		cfg.Progress = errw
	}
	if len(gbs) > 1 {
		return simModes(c, w, cfg, gbs)
	}
	if p := c.String("decisions"); p != "" {
		f, err := os.Create(p)
		if err != nil {
			return cli.Exit(err.Error(), 2)
		}
		defer f.Close()
		bw := bufio.NewWriter(f)
		defer bw.Flush()
		cfg.Decisions = bw
	}
	res, err := sim.Run(c.Context, w, cfg)
	if err != nil {
		return err
	}
	if p := c.String("jobs-csv"); p != "" {
		if err := writeFile(p, func(f io.Writer) error { return sim.WriteJobsCSV(f, res) }); err != nil {
			return err
		}
	}
	if p := c.String("plot"); p != "" {
		title := fmt.Sprintf("%s, %d nodes, %s mode", filepath.Base(c.String("workload")), cfg.Nodes, cfg.Mode)
		if cfg.Mode == sim.Fixed {
			title += " (" + c.Duration("fixed-limit").String() + " pilots)"
		}
		if err := writeFile(p, func(f io.Writer) error { return sim.WritePlot(f, res, title) }); err != nil {
			return err
		}
	}
	out := c.App.Writer
	if c.Bool("json") {
		enc := json.NewEncoder(out)
		return enc.Encode(res)
	}
	return sim.WriteSummary(out, res)
}

// simMemoryLimit is the heap size past which the collector runs more
// often than GOGC 400 says (runtime/debug.SetMemoryLimit): 400 MiB, below
// the 500 MB a month of a 5,000-node machine may take (docs/sim.md).
const simMemoryLimit = 400 << 20

// reportResources says on errw (unless quiet) the CPU time and the peak
// resident memory of the process so far: what a run cost, kept out of the
// output so that stays byte-identical.
func reportResources(errw io.Writer, quiet bool) {
	if quiet {
		return
	}
	if cpu, rss, ok := processUsage(); ok {
		fmt.Fprintf(errw, "sim: %.2f s of CPU (user + system), peak RSS %.0f MB\n", cpu.Seconds(), float64(rss)/1e6)
	}
}

// simNodes is --nodes, or for SWF the machine's size by its header (said
// on errw unless quiet); the header's unreadable lines are said too.
func simNodes(c *cli.Context, w sim.Workload, errw io.Writer, quiet bool) (int, error) {
	if !quiet {
		for _, p := range w.Header.Problems {
			fmt.Fprintf(errw, "sim: SWF header line not understood, ignored: %s\n", p)
		}
	}
	if c.IsSet("nodes") {
		return c.Int("nodes"), nil
	}
	if w.Format != "swf" {
		return 0, cli.Exit("--nodes is required for the thesis format (its files do not say the cluster's size)", 2)
	}
	n, from := w.Header.Nodes()
	if n == 0 {
		return 0, cli.Exit(fmt.Sprintf("--nodes not given and %s: give --nodes", from), 2)
	}
	if !quiet {
		fmt.Fprintf(errw, "sim: %d nodes, from %s\n", n, from)
	}
	return n, nil
}

// simCores is --cores-per-node, or for an SWF file without it (and
// without --procs-per-node) its header's MaxProcs / MaxNodes when that is
// a whole number above 1: the traced machine's SMP nodes.
func simCores(c *cli.Context, w sim.Workload, errw io.Writer, quiet bool) (int, error) {
	if c.IsSet("cores-per-node") {
		if k := c.Int("cores-per-node"); k < 1 || k > 1 && c.Int("procs-per-node") > 1 {
			return 0, cli.Exit(fmt.Sprintf("--cores-per-node %d: must be at least 1, and not with --procs-per-node (whole nodes)", k), 2)
		}
		return c.Int("cores-per-node"), nil
	}
	h := w.Header
	k := h.ProcsPerNode()
	if c.IsSet("procs-per-node") || w.Format != "swf" || k <= 1 {
		return 0, nil
	}
	if !quiet {
		fmt.Fprintf(errw, "sim: %d cores per node, shared, from the header's MaxProcs %d / MaxNodes %d (--procs-per-node %d for whole nodes)\n", k, h.MaxProcs, h.MaxNodes, k)
	}
	return k, nil
}

// giveBacks parses --give-back: one mode, a comma-separated list, or all.
func giveBacks(s string) ([]sim.GiveBack, error) {
	if s == "all" {
		return sim.GiveBacks, nil
	}
	var out []sim.GiveBack
	for _, f := range strings.Split(s, ",") {
		g := sim.GiveBack(strings.TrimSpace(f))
		if !slices.Contains(sim.GiveBacks, g) {
			return nil, fmt.Errorf("--give-back %q: want polling, preemption, preemption-sizing, a comma-separated list of them, or all", f)
		}
		if slices.Contains(out, g) {
			return nil, fmt.Errorf("--give-back lists %s twice", g)
		}
		out = append(out, g)
	}
	return out, nil
}

// simModes runs the baseline and each give-back mode on the same workload
// and prints them side by side. A preemption mode gets --grace; polling
// has none.
func simModes(c *cli.Context, w sim.Workload, cfg sim.Config, gbs []sim.GiveBack) error {
	grace := cfg.GraceTime
	progress := cfg.Progress
	run := func(mode sim.Mode, gb sim.GiveBack) (sim.Result, error) {
		rc := cfg
		rc.Mode, rc.GiveBack, rc.GraceTime = mode, gb, 0
		if mode == sim.Harvest && gb != sim.Polling {
			rc.GraceTime = grace
		}
		if progress != nil {
			fmt.Fprintf(progress, "sim: %s %s\n", mode, gb)
		}
		return sim.Run(c.Context, w, rc)
	}
	base, err := run(sim.Baseline, sim.Polling)
	if err != nil {
		return err
	}
	// The control: the same baseline with the scheduler 1 s slower, the
	// harm any small perturbation does (a delay shifts the jobs behind it),
	// so that late job-hours read against it, not against zero.
	ccfg := cfg
	ccfg.Mode, ccfg.GiveBack, ccfg.GraceTime = sim.Baseline, sim.Polling, 0
	ccfg.Cluster.Latency++
	if progress != nil {
		fmt.Fprintln(progress, "sim: control (baseline, latency +1 s)")
	}
	ctl, err := sim.Run(c.Context, w, ccfg)
	if err != nil {
		return err
	}
	control := sim.ModeResult{GiveBack: "control", Result: ctl, Delays: sim.CompareStarts(base, ctl)}
	var modes []sim.ModeResult
	for _, gb := range gbs {
		res, err := run(sim.Harvest, gb)
		if err != nil {
			return err
		}
		modes = append(modes, sim.ModeResult{GiveBack: gb, Result: res, Delays: sim.CompareStarts(base, res)})
	}
	if c.Bool("json") {
		return json.NewEncoder(c.App.Writer).Encode(struct {
			Baseline sim.Result       `json:"baseline"`
			Control  sim.ModeResult   `json:"control"`
			Modes    []sim.ModeResult `json:"modes"`
		}{base, control, modes})
	}
	return sim.WriteModes(c.App.Writer, base, control, modes)
}

// writeFile writes through a temporary file so a failed run leaves no
// half-written output behind.
//
// The temporary file is made anew, never through a link in its place:
// the commands that write these run as root (harvest replay), and a link
// planted at PATH.tmp in a shared directory would have made root
// overwrite the file it names.
func writeFile(path string, write func(io.Writer) error) error {
	tmp := path + ".tmp"
	if err := os.Remove(tmp); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW, 0o644)
	if err != nil {
		return err
	}
	if err := write(f); err != nil {
		f.Close()
		os.Remove(tmp)
		return err
	}
	if err := f.Close(); err != nil {
		os.Remove(tmp)
		return err
	}
	return os.Rename(tmp, path)
}

// parseMultifactor reads --priority-weights over the defaults.
func parseMultifactor(s string) (simcluster.Multifactor, error) {
	m := simcluster.DefaultMultifactor()
	if s == "" {
		return m, nil
	}
	for _, kv := range strings.Split(s, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(kv), "=")
		if !ok {
			return m, fmt.Errorf("--priority-weights: %q is not key=value", kv)
		}
		var err error
		switch k {
		case "age", "size", "fairshare":
			var w float64
			if w, err = strconv.ParseFloat(v, 64); err == nil && (w < 0 || math.IsNaN(w) || math.IsInf(w, 0)) {
				err = errors.New("must be a non-negative number")
			}
			switch k {
			case "age":
				m.WeightAge = w
			case "size":
				m.WeightSize = w
			default:
				m.WeightFairshare = w
			}
		case "max-age", "half-life":
			var d time.Duration
			if strings.HasSuffix(v, "d") {
				var n float64
				n, err = strconv.ParseFloat(strings.TrimSuffix(v, "d"), 64)
				d = time.Duration(n * 24 * float64(time.Hour))
			} else {
				d, err = time.ParseDuration(v)
			}
			if err == nil && d < time.Second {
				err = errors.New("must be at least a second")
			}
			if k == "max-age" {
				m.MaxAge = int64(d / time.Second)
			} else {
				m.HalfLife = int64(d / time.Second)
			}
		default:
			return m, fmt.Errorf("--priority-weights: unknown key %q (age, size, fairshare, max-age, half-life)", k)
		}
		if err != nil {
			return m, fmt.Errorf("--priority-weights %s=%s: %v", k, v, err)
		}
	}
	return m, nil
}
