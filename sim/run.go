package sim

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"time"

	"github.com/harvest-hpc/harvest/adapters"
	simcluster "github.com/harvest-hpc/harvest/adapters/sim"
	"github.com/harvest-hpc/harvest/agent"
	"github.com/harvest-hpc/harvest/agent/policy"
	"github.com/harvest-hpc/harvest/capacity"
	"github.com/harvest-hpc/harvest/cluster"
	"github.com/harvest-hpc/harvest/internal/quantile"
)

// Mode is how a workload is replayed.
type Mode string

const (
	// Baseline runs every job as an ordinary batch job, no agent.
	Baseline Mode = "baseline"
	// Harvest runs the agent's reconciler and policy against the cluster.
	Harvest Mode = "harvest"
	// Fixed submits pilots of a fixed limit whenever nodes are idle.
	Fixed Mode = "fixed"
)

// ErrInvalidConfig is wrapped by every Config.Validate error.
var ErrInvalidConfig = errors.New("invalid sim run config")

// GiveBack is how pilots make way for foreign jobs in harvest mode.
type GiveBack string

const (
	// Polling: the agent cancels pilots a waiting job could use, at its
	// next round.
	Polling GiveBack = "polling"
	// Preemption: pilots above the floor run in a preemptible tier that
	// the scheduler preempts the moment a foreign job needs their nodes
	// (simcluster.Config.Preemption, with Config.GraceTime).
	Preemption GiveBack = "preemption"
	// PreemptionSizing is Preemption plus the scheduler sizing pilots to
	// its plan (--time-min as SLURM 25.11 honours it) and the agent
	// pulling in the end of pilots the top job needs later.
	PreemptionSizing GiveBack = "preemption-sizing"
)

// GiveBacks are the give-back modes, in the order reports list them.
var GiveBacks = []GiveBack{Polling, Preemption, PreemptionSizing}

// Config describes one replay.
type Config struct {
	Mode  Mode
	Nodes int
	// FixedLimit is the pilots' limit in fixed mode.
	FixedLimit cluster.Limit
	// From and To bound the replay (trace seconds): jobs submitted in
	// [From, To) are replayed and measured over [From, To]. -1 = unset:
	// From is 0 for the thesis format and the first submit for SWF; To is
	// the last submit plus Tail.
	From, To int64
	Tail     int64
	// HarvestBacklog tasks of TaskSeconds each are queued at the start;
	// thesis Calibration jobs are split into tasks of TaskSeconds too.
	HarvestBacklog int64
	TaskSeconds    int64
	// HarvestWhileIdle keeps pilots on idle nodes with no backlog.
	HarvestWhileIdle bool
	// HarvestStop, if positive, stops the harvest at that time (harvest
	// mode): the agent makes no more rounds and every pilot is cancelled,
	// as `harvest replay` stops its agent and cancels the pilots once the
	// run's last foreign job ended. 0 = the harvest runs to To.
	HarvestStop int64
	// HarvestLead starts the harvest (its backlog, the agent's rounds,
	// the pilots) that many seconds before From (harvest and fixed
	// modes), as a pool already running when the window opens, as in
	// production: the pool's start-up and growth fall outside the
	// measured window (`harvest replay --lead` starts the real agent so
	// too). Figures are still measured over [From, To]. 0 = the harvest
	// starts at From; baseline mode, with no harvest, ignores it.
	HarvestLead int64
	// NoRecommend turns off the master's MiniNode recommendation (the
	// harvest then keeps no floor of pilots, so it never holds nodes a
	// foreign job could start on).
	NoRecommend bool
	// Capacity, when set, runs the master's degradation-aware capacity
	// rule (package capacity) at every poll on the tasks completed since
	// the previous one: its cap bounds the pilots and the recommendation.
	// Nil: no cap. Cluster.Contention makes tasks slow down.
	Capacity *capacity.Config
	// GiveBack is how pilots make way (harvest mode; default Polling).
	// GraceTime is the preemptible tier's grace, in seconds.
	GiveBack  GiveBack
	GraceTime int64
	// ProcsPerNode maps a job's processors (SWF) to whole nodes:
	// ceil(processors / ProcsPerNode). 1 = processors are nodes.
	ProcsPerNode int
	// CoresPerNode gives the nodes cores (SMP nodes, SWF's processors as
	// cores): a job of P processors takes P cores, on nodes it shares
	// with other jobs as SLURM's select/cons_tres allocates them, and
	// pilots take whole idle nodes (adapters/sim nodes.go). 0 or 1: one
	// core a node, the whole-node model. Not with ProcsPerNode > 1 (which
	// rounds jobs up to whole nodes instead).
	CoresPerNode int
	// Warm starts the replay with the jobs the trace shows running at
	// From (running since their recorded start) and queued at From
	// (pending since their submit), from the SWF's recorded waits. They
	// are labelled "warm" and are not counted among the foreign jobs.
	Warm bool
	// Poll is the agent's round interval (seconds of virtual time).
	Poll int64
	// FastPoll is the agent's round interval while a round's Watch is set
	// (agent.Config.FastPoll, in seconds; 0 = always Poll). Harvest mode.
	FastPoll int64
	// EventCheck is how often the agent asks the cluster's job-event
	// count between rounds (agent.Config.EventCheck, in seconds; 0 = off):
	// a count that moved since the last check brings the round one
	// second after the check (the check's answer, then the snapshot).
	// Harvest mode.
	EventCheck int64
	// Cluster configures the simulated batch system (nodes are set from Nodes).
	Cluster simcluster.Config
	// Agent configures the reconciler and policy in harvest mode.
	Agent agent.Config
	// Progress, if set, receives a line every 5% of virtual time.
	Progress io.Writer
	// Log receives the agent's logs (nil = discarded). Rounds skipped as
	// quiet (see quiet) log nothing.
	Log *slog.Logger

	// Decisions, if set, receives one line per agent round that acted:
	// the virtual time, the policy's case and its reason (jobs named by
	// their workload ids, pilots pilot-<n>).
	Decisions io.Writer

	// everyRound runs the agent at every poll, quiet or not (tests compare
	// it with the default).
	everyRound bool
}

// DefaultConfig returns a harvest-mode replay on 24 nodes with the agent's
// defaults, 60-second tasks and a 10-second poll.
func DefaultConfig() Config {
	return Config{
		Mode:         Harvest,
		GiveBack:     Polling,
		ProcsPerNode: 1,
		Nodes:        24,
		FixedLimit:   3600,
		From:         -1,
		To:           -1,
		Tail:         1800,
		TaskSeconds:  60,
		Poll:         int64(agent.DefaultConfig().PollInterval / time.Second),
		FastPoll:     int64(agent.DefaultConfig().FastPoll / time.Second),
		EventCheck:   int64(agent.DefaultConfig().EventCheck / time.Second),
		Cluster:      simcluster.DefaultConfig(),
		Agent:        agent.DefaultConfig(),
	}
}

// Validate reports the first setting that makes no sense.
func (c Config) Validate() error {
	bad := func(format string, a ...any) error {
		return fmt.Errorf("%w: %s", ErrInvalidConfig, fmt.Sprintf(format, a...))
	}
	switch {
	case c.Mode != Baseline && c.Mode != Harvest && c.Mode != Fixed:
		return bad("mode %q is not baseline, harvest or fixed", c.Mode)
	case c.HarvestStop < 0:
		return bad("harvest stop must not be negative (0 = none), got %d", c.HarvestStop)
	case c.HarvestLead < 0:
		return bad("harvest lead must not be negative (0 = none), got %d s", c.HarvestLead)
	case c.HarvestLead > 0 && c.Warm && c.Mode != Baseline:
		// The warm start loads the trace's own jobs of before From; a
		// pool started before it would meet a machine without them.
		return bad("harvest lead and warm start do not go together")
	case c.Nodes <= 0:
		return bad("nodes must be positive, got %d", c.Nodes)
	case c.Mode == Fixed && (c.FixedLimit <= 0 || c.FixedLimit%cluster.Limit(max(c.Cluster.Granularity, 1)) != 0):
		return bad("fixed limit must be a positive multiple of %d s, got %d", c.Cluster.Granularity, c.FixedLimit)
	case c.From < -1 || c.To < -1 || (c.From >= 0 && c.To >= 0 && c.To <= c.From):
		return bad("--from %d and --to %d do not make a window", c.From, c.To)
	case c.Tail < 0:
		return bad("tail must not be negative")
	case c.HarvestBacklog < 0:
		return bad("harvest backlog must not be negative")
	case c.TaskSeconds <= 0:
		return bad("task seconds must be positive, got %d", c.TaskSeconds)
	case c.Poll <= 0:
		return bad("poll must be positive, got %d s", c.Poll)
	case c.FastPoll < 0:
		return bad("fast poll must not be negative (0 = off), got %d s", c.FastPoll)
	case c.EventCheck < 0:
		return bad("event check must not be negative (0 = off), got %d s", c.EventCheck)
	case c.ProcsPerNode < 1:
		return bad("processors per node must be at least 1, got %d", c.ProcsPerNode)
	case c.CoresPerNode < 0 || c.CoresPerNode > 1 && c.ProcsPerNode > 1:
		return bad("cores per node %d: must not be negative, and not with processors per node (%d): one rounds jobs up to whole nodes, the other shares nodes", c.CoresPerNode, c.ProcsPerNode)
	case c.GiveBack != Polling && c.GiveBack != Preemption && c.GiveBack != PreemptionSizing:
		return bad("give-back %q is not polling, preemption or preemption-sizing", c.GiveBack)
	case c.GraceTime < 0 || c.GraceTime > 0 && c.GiveBack == Polling:
		return bad("grace time %d s: must not be negative, and needs a preemption mode", c.GraceTime)
	}
	cc := c.Cluster
	cc.Nodes, cc.CoresPerNode = c.Nodes, c.CoresPerNode
	if err := cc.Validate(); err != nil {
		return err
	}
	if c.Mode == Harvest {
		return c.Agent.Validate()
	}
	return nil
}

// Result is the `harvest sim --json` contract (DESIGN.md).
type Result struct {
	Mode Mode `json:"mode"`
	// GiveBack is how pilots made way (harvest mode).
	GiveBack GiveBack `json:"give_back,omitempty"`
	Nodes    int      `json:"nodes"`
	// CoresPerNode: nodes of that many cores, shared (Config.CoresPerNode;
	// absent = whole nodes). Node-seconds then count cores / CoresPerNode.
	CoresPerNode int `json:"cores_per_node,omitempty"`
	// SharedIdle is the share of the cores' time idle on nodes jobs
	// shared (not wholly idle): what pilots on idle cores of shared
	// nodes could have used at most (with CoresPerNode).
	SharedIdle        float64   `json:"idle_on_shared_nodes,omitempty"`
	From              int64     `json:"from_s"`
	SpanS             int64     `json:"span_s"`
	Utilization       float64   `json:"utilization"`
	UsefulUtilization float64   `json:"useful_utilization"`
	Foreign           Foreign   `json:"foreign"`
	Harvest           Harvested `json:"harvest"`
	// Usage is the node use over time, for the plot (not in the JSON).
	Usage []simcluster.Sample `json:"-"`
	// Records are every job's start and end, for the jobs CSV.
	Records []simcluster.Record `json:"-"`
	// Skipped counts workload lines and jobs that could not be replayed,
	// by reason (the reader's and the run's); Adjusted counts jobs kept
	// with a repaired field.
	Skipped  map[string]int `json:"skipped,omitempty"`
	Adjusted map[string]int `json:"adjusted,omitempty"`
	// Capacity is the capacity rule's cap at every poll (Config.Capacity;
	// not in the JSON, see CapacitySummary).
	Capacity []CapacityPoint `json:"-"`
	// rounds counts the agent rounds run (quiet ones are skipped).
	rounds int
}

// CapacityPoint is the capacity rule's decision at one poll.
type CapacityPoint struct {
	T     int64
	Cap   int
	Phase string
}

// Foreign summarises the other users' jobs (thesis Calibration jobs are
// not foreign: they are the harvest workload, replayed as batch jobs only
// in baseline mode).
type Foreign struct {
	Jobs        int     `json:"jobs"`
	Started     int     `json:"started"`
	MeanWaitS   float64 `json:"mean_wait_s"`
	P99WaitS    int64   `json:"p99_wait_s"`
	MaxWaitS    int64   `json:"max_wait_s"`
	NodeSeconds int64   `json:"node_seconds"`
	// Blocked is the pilots' harm, measured inside the run (see
	// adapters/sim harm.go): time the jobs spent pending while the
	// scheduler's own test, with the pilots removed, would have started
	// them. 0 in baseline by construction.
	Blocked Blocked `json:"blocked_by_pilots"`
	// Recorded compares the waits with those the trace recorded (SWF).
	Recorded *Recorded `json:"recorded,omitempty"`
	// BoundedSlowdown and Users: see metrics.go (jobs that started).
	BoundedSlowdown Slowdown `json:"bounded_slowdown"`
	Users           Users    `json:"users"`
}

// Blocked sums the pilots' harm over the foreign jobs of the window.
type Blocked struct {
	// Jobs counts the jobs blocked for any time.
	Jobs int   `json:"jobs"`
	SumS int64 `json:"sum_s"`
	// P99S and MaxS are over every foreign job of the window (most 0).
	P99S int64 `json:"p99_s"`
	MaxS int64 `json:"max_s"`
}

// Harvested summarises the harvest pool.
type Harvested struct {
	NodeSeconds       int64 `json:"node_seconds"`
	UsefulNodeSeconds int64 `json:"useful_node_seconds"`
	LostTaskSeconds   int64 `json:"lost_task_seconds"`
	// Pilots counts the pilots that started (a scheduler-load figure).
	Pilots int `json:"pilots"`
	// Polls counts the agent's rounds, the ones skipped as quiet
	// included (each is a snapshot: on SLURM one squeue, one sinfo and
	// one scontrol call); PollsPerHour is Polls over the window's hours.
	Polls        int     `json:"polls"`
	PollsPerHour float64 `json:"polls_per_hour"`
	// EventChecks counts the job-event checks between rounds (on SLURM
	// one sdiag each), EventChecksPerHour over the window's hours.
	EventChecks        int          `json:"event_checks,omitempty"`
	EventChecksPerHour float64      `json:"event_checks_per_hour,omitempty"`
	Jobs               []HarvestJob `json:"jobs"`
	// BoundedSlowdown and Users count every completed task as a one-node
	// job that waited from its harvest job's submit (in baseline, the
	// thesis Calibration batch jobs as they ran).
	BoundedSlowdown Slowdown `json:"bounded_slowdown"`
	Users           Users    `json:"users"`
}

// HarvestJob is one harvest job: FinishS is null if it did not finish
// within the span. In baseline mode these are the thesis Calibration jobs
// run as batch jobs.
type HarvestJob struct {
	ID      string `json:"id"`
	SubmitS int64  `json:"submit_s"`
	FinishS *int64 `json:"finish_s"`
}

// Run replays the workload. It is deterministic: the same workload and
// configuration give the same result.
func Run(ctx context.Context, w Workload, cfg Config) (Result, error) {
	if err := cfg.Validate(); err != nil {
		return Result{}, err
	}
	cc := cfg.Cluster
	cc.Nodes, cc.CoresPerNode = cfg.Nodes, cfg.CoresPerNode
	if cfg.Mode == Harvest && cfg.GiveBack != Polling {
		cc.Preemption, cc.GraceTime = true, cfg.GraceTime
		cc.TimeMinSizing = cfg.GiveBack == PreemptionSizing
	}
	c, err := simcluster.New(cc)
	if err != nil {
		return Result{}, err
	}
	from, to := window(w, cfg)
	// start is when the harvest starts: From, or HarvestLead before it.
	start := from
	if cfg.Mode != Baseline {
		start -= cfg.HarvestLead
	}
	if start < 0 {
		return Result{}, fmt.Errorf("%w: the harvest lead (%d s) starts before the trace's time 0 (the window from %d)", ErrInvalidConfig, cfg.HarvestLead, from)
	}
	res := Result{Mode: cfg.Mode, Nodes: cfg.Nodes, From: from, SpanS: to - from}
	if cfg.CoresPerNode > 1 {
		res.CoresPerNode = cfg.CoresPerNode
	}
	if cfg.Mode == Harvest {
		res.GiveBack = cfg.GiveBack
	}
	if err := c.AdvanceTo(start); err != nil {
		return Result{}, err
	}
	skip := func(reason string) {
		if res.Skipped == nil {
			res.Skipped = map[string]int{}
		}
		res.Skipped[reason]++
	}
	for k, n := range w.Skipped {
		skip(k)
		res.Skipped[k] += n - 1
	}
	if len(w.Adjusted) > 0 {
		res.Adjusted = maps.Clone(w.Adjusted)
	}
	recorded, err := load(c, w, cfg, from, to, skip)
	if err != nil {
		return Result{}, err
	}
	if cfg.HarvestBacklog > 0 && cfg.Mode != Baseline {
		if err := c.AddWork(simcluster.Work{ID: "backlog", User: harvestUser(""), Submit: start, NodeSeconds: cfg.HarvestBacklog * cfg.TaskSeconds, TaskSeconds: cfg.TaskSeconds}); err != nil {
			return Result{}, err
		}
	}

	var step func(context.Context, int64) error
	rounds, polls, checks := 0, 0, 0
	tick := cfg.Poll // the loop's step: the gcd of the polls in harvest mode
	// due is the agent's next round (harvest mode): the loop goes straight
	// there unless the capacity rule steps at every poll.
	due := start
	switch cfg.Mode {
	case Harvest:
		acfg := cfg.Agent
		acfg.Policy.HarvestWhileIdle = cfg.HarvestWhileIdle
		acfg.Policy.Granularity = cc.Granularity
		acfg.Policy.Preemption = cc.Preemption
		acfg.SubmitsVisible = true                 // the simulated cluster lists a pilot at its submit
		acfg.Policy.Reservations = cc.Reservations // the walk plans as the scheduler does
		if cfg.GiveBack == PreemptionSizing {
			// The smallest useful pilot runs one task.
			g := cc.Granularity
			acfg.Policy.Shrink = true
			acfg.Policy.MinPilotLimit = cluster.Limit(max(g, (cfg.TaskSeconds+g-1)/g*g))
		}
		acfg.PollInterval = time.Duration(cfg.Poll) * time.Second
		acfg.FastPoll = time.Duration(cfg.FastPoll) * time.Second
		acfg.EventCheck = time.Duration(cfg.EventCheck) * time.Second
		if acfg.MaxBackoff < acfg.PollInterval {
			acfg.MaxBackoff = acfg.PollInterval
		}
		if err := acfg.Validate(); err != nil {
			return Result{}, err
		}
		dem := demand{c: c, cfg: acfg.Policy, noRecommend: cfg.NoRecommend}
		if cfg.Capacity != nil {
			c.WatchTasks()
			dem.capa = &capRule{ctl: capacity.New(*cfg.Capacity), jobs: map[string]int64{}}
		}
		// The agent reads each snapshot within its round (the decision
		// keeps ids, not jobs): one job list serves every round.
		c.ReuseSnapshots()
		// The snapshots mark the busy pilots (Demand gives no map).
		c.ShowBusy()
		rec := agent.NewReconciler(c, dem, acfg, cfg.Log)
		q := quiet{until: start}
		// The agent's next round: a poll after the last, the fast one
		// while its Watch holds (a quiet round keeps the last one's).
		wait := cfg.Poll
		if f := min(cfg.FastPoll, cfg.Poll); f > 0 {
			tick = gcd(cfg.Poll, f)
		}
		if cfg.EventCheck > 0 {
			tick = 1 // a check's round comes a second after it
		}
		stopped := false
		step = func(ctx context.Context, t int64) error {
			if stopped {
				return nil
			}
			if cfg.HarvestStop > 0 && t >= cfg.HarvestStop {
				stopped = true
				return stopHarvest(ctx, c)
			}
			if dem.capa != nil && (t-start)%cfg.Poll == 0 {
				dem.capa.step(c.TaskRuns())
				res.Capacity = append(res.Capacity, CapacityPoint{T: t, Cap: dem.capa.d.Cap, Phase: string(dem.capa.d.Phase)})
			}
			if t < due && cfg.EventCheck > 0 && (t-start)%cfg.EventCheck == 0 {
				if t >= from { // the window's load on the scheduler
					checks++
				}
				moved, _, err := rec.EventsMoved(ctx)
				if err != nil {
					return err
				}
				if moved {
					due = min(due, t+1)
				}
			}
			if t < due {
				return nil
			}
			if t >= from {
				polls++
			}
			if !cfg.everyRound && q.holds(t, c, dem) {
				due = cfg.until(t + wait)
				return nil
			}
			res, err := rec.Round(ctx)
			if err != nil {
				return err
			}
			rounds++
			wait = int64(rec.NextWait(res) / time.Second)
			due = cfg.until(t + wait)
			if cfg.Decisions != nil && res.Decision.Acts() {
				fmt.Fprintf(cfg.Decisions, "%d\t%s\t%s\n", t, res.Decision.Case, res.Decision.Reason)
			}
			q.after(t, res, c, dem)
			return nil
		}
	case Fixed:
		step = func(ctx context.Context, _ int64) error { return fixedRound(ctx, c, cfg) }
	}
	if step != nil {
		next := 5
		for t := start; t < to; t = nextTime(t, tick, due, cfg.Capacity == nil && cfg.EventCheck == 0) {
			if err := ctx.Err(); err != nil {
				return Result{}, err
			}
			if err := c.AdvanceTo(t); err != nil {
				return Result{}, err
			}
			if err := step(ctx, t); err != nil {
				return Result{}, fmt.Errorf("round at %d: %w", t, err)
			}
			if cfg.Progress != nil && (t-from)*100 >= int64(next)*(to-from) {
				fmt.Fprintf(cfg.Progress, "sim: %3d%% of virtual time (%s of %s)\n", next, human(t-from), human(to-from))
				next += 5
			}
		}
	}
	if err := c.AdvanceTo(to); err != nil {
		return Result{}, err
	}
	res.rounds = rounds
	res.Harvest.Polls = polls
	if polls > 0 {
		res.Harvest.PollsPerHour = float64(polls) * 3600 / float64(to-from)
	}
	res.Harvest.EventChecks = checks
	if checks > 0 {
		res.Harvest.EventChecksPerHour = float64(checks) * 3600 / float64(to-from)
	}
	res.Usage = c.Samples()
	res.Records = c.Records()
	Measure(&res, c.LostTaskSeconds(), c.WorkRecords(), from, to)
	res.Foreign.Recorded = compareRecorded(res.Records, recorded, to)
	return res, nil
}

// until is the agent's next round due, brought forward to the harvest's
// stop so that the loop stops there.
func (c Config) until(due int64) int64 {
	if c.HarvestStop > 0 {
		return min(due, c.HarvestStop)
	}
	return due
}

// stopHarvest cancels every pilot, running or queued.
func stopHarvest(ctx context.Context, c *simcluster.Cluster) error {
	s, err := c.Snapshot(ctx)
	if err != nil {
		return err
	}
	var ids []string // (the snapshot may be the cluster's reused one)
	for _, j := range s.Jobs {
		if j.Pilot {
			ids = append(ids, j.ID)
		}
	}
	for _, id := range ids {
		if err := c.Cancel(ctx, adapters.PilotID(id)); err != nil {
			return err
		}
	}
	return nil
}

// nextTime is the loop's time after t: the agent's next round when nothing
// else steps in between (skip), else the next tick.
func nextTime(t, tick, due int64, skip bool) int64 {
	if skip && due > t+tick {
		return due
	}
	return t + tick
}

func gcd(a, b int64) int64 {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}

func human(s int64) string {
	d := time.Duration(s) * time.Second
	if d >= 48*time.Hour {
		return fmt.Sprintf("%.1f days", d.Hours()/24)
	}
	return d.String()
}

// window returns the replay's span.
func window(w Workload, cfg Config) (int64, int64) {
	from, to := cfg.From, cfg.To
	if from < 0 {
		from = 0
		if w.Format != "thesis" && len(w.Jobs) > 0 {
			from = w.Jobs[0].Submit
		}
	}
	if to < 0 {
		last := from
		for _, j := range w.Jobs {
			last = max(last, j.Submit)
		}
		to = last + cfg.Tail
		if to <= from {
			to = from + 1
		}
	}
	return from, to
}

// demand is the DemandSource of harvest mode: the simulated harvest pool.
type demand struct {
	c           *simcluster.Cluster
	cfg         policy.Config
	noRecommend bool
	capa        *capRule // nil: no capacity rule
}

func (d demand) Demand(context.Context, agent.Seen) (agent.DemandInfo, error) {
	dm := d.c.DemandCounts()
	info := agent.DemandInfo{Demand: &dm} // the snapshots mark the busy pilots (ShowBusy)
	if !d.noRecommend {
		info.Recommended = policy.Recommend(dm.PendingTasks+dm.RunningTasks, d.cfg.Recommendation)
	}
	if d.capa != nil && d.capa.d.Cap > 0 {
		limit := d.capa.d.Cap
		info.MaxNodes = &limit
		info.Recommended = d.capa.d.Limit(info.Recommended)
	}
	return info, nil
}

// capRule is the master's capacity rule in the simulator: one step per
// poll (the master's heartbeat), on the tasks completed since.
type capRule struct {
	ctl  *capacity.Controller
	d    capacity.Decision
	jobs map[string]int64 // harvest job ids as the rule's numbers
}

func (r *capRule) step(runs []simcluster.TaskRun) {
	samples := make([]capacity.Sample, 0, len(runs))
	for _, x := range runs {
		id, ok := r.jobs[x.Job]
		if !ok {
			id = int64(len(r.jobs) + 1)
			r.jobs[x.Job] = id
		}
		samples = append(samples, capacity.Sample{Job: id, Size: x.Size, Duration: time.Duration(x.Seconds) * time.Second})
	}
	r.d = r.ctl.Step(samples)
}

// quiet tells which rounds of harvest mode need not run: a round that
// acted on nothing, saw no pilots on their way and is followed only by
// time passing decides the same for policy.Steady seconds. A later round
// is skipped if it falls within that time, the cluster shows no change
// (Cluster.Changes) and the backlog reads the same to the policy. Skipped
// rounds would have decided nothing; skipping them makes a harvest month
// several times faster and changes no result (TestQuietRoundsChangeNothing).
type quiet struct {
	until   int64 // rounds before this time may be skipped
	changes int64
	backlog backlogKey
}

// backlogKey is the backlog as the policy reads it: the number of pilots
// it can use (pending + running tasks, one slot per node) and the master's
// recommendation. The pilots it can use matter only up to the nodes the
// cluster has (pilots never hold more), so all larger backlogs read alike:
// tasks finishing one after another in a large backlog change nothing.
type backlogKey struct{ usable, recommended, capacity int }

func (d demand) key() backlogKey {
	p, r := d.c.Backlog()
	limit := int64(2*d.c.Config().Nodes + 1)
	k := backlogKey{usable: int(min(p+r, limit))}
	if !d.noRecommend {
		k.recommended = policy.Recommend(int(min(p, 1<<31-1)+r), d.cfg.Recommendation)
	}
	if d.capa != nil {
		k.capacity = d.capa.d.Cap
		k.recommended = d.capa.d.Limit(k.recommended)
	}
	return k
}

func (q *quiet) holds(t int64, c *simcluster.Cluster, d demand) bool {
	return t < q.until && c.Changes() == q.changes && d.key() == q.backlog
}

func (q *quiet) after(t int64, res agent.RoundResult, c *simcluster.Cluster, d demand) {
	q.until = t
	if res.Decision.Acts() || len(res.Errors) > 0 {
		return
	}
	// Steady on the round's input (the simulated demand has no drain),
	// from the round's own walks.
	st := res.Steady()
	if st == policy.Forever || t > policy.Forever-st {
		q.until = policy.Forever
	} else {
		q.until = t + st
	}
	q.changes, q.backlog = c.Changes(), d.key()
}

// fixedRound is what autoscalers of pilot-job tools do (HyperQueue's
// autoalloc, Parsl's and dask-jobqueue's scaling): keep a pilot of a fixed
// limit queued for every idle node while there is work, and let idle
// pilots go when the work runs out.
func fixedRound(ctx context.Context, c *simcluster.Cluster, cfg Config) error {
	s, err := c.Snapshot(ctx)
	if err != nil {
		return err
	}
	dm, busy := c.Demand()
	queued, idlePilots := 0, 0
	var idleIDs []string
	for _, j := range s.Jobs {
		if !j.Pilot {
			continue
		}
		switch {
		case j.State == cluster.Pending:
			queued++
		case !busy[j.ID]:
			idlePilots++
			idleIDs = append(idleIDs, j.ID)
		}
	}
	if dm.PendingTasks == 0 && !cfg.HarvestWhileIdle {
		for _, id := range idleIDs {
			if err := c.Cancel(ctx, adapters.PilotID(id)); err != nil {
				return err
			}
		}
		return nil
	}
	want := s.IdleNodes - queued
	if !cfg.HarvestWhileIdle {
		want = min(want, dm.PendingTasks-idlePilots-queued)
	}
	for range max(want, 0) {
		if _, err := c.Submit(ctx, adapters.PilotSpec{TimeLimit: cfg.FixedLimit, Command: []string{"harvest", "pilot"}}); err != nil {
			return err
		}
	}
	return nil
}

// measure fills in the figures over [from, to].
// Measure fills in the figures over [from, to] from res.Usage,
// res.Records (and res.Mode, res.Nodes), the task time lost and the
// harvest jobs' records: what a simulated run or a replay on a real
// cluster (package replay) produced.
func Measure(res *Result, lostTaskSeconds int64, work []simcluster.WorkRecord, from, to int64) {
	mode := res.Mode
	var foreign, busy, idle, shared int64
	u := res.Usage
	for i, s := range u {
		a := max(s.T, from)
		b := to
		if i+1 < len(u) {
			b = min(u[i+1].T, to)
		}
		if b <= a {
			continue
		}
		d := b - a
		foreign += d * int64(s.Foreign)
		busy += d * int64(s.PilotBusy)
		idle += d * int64(s.PilotIdle)
		shared += d * int64(s.SharedIdle)
	}
	// Samples count cores (nodes when one core a node); a pilot holds a
	// whole node's.
	k := int64(max(res.CoresPerNode, 1))
	total := float64(res.Nodes) * float64(k) * float64(to-from)
	res.Utilization = float64(foreign+busy+idle) / total
	res.UsefulUtilization = float64(foreign+busy) / total
	if k > 1 {
		res.SharedIdle = float64(shared) / total
	}
	res.Harvest.NodeSeconds = (busy + idle) / k
	res.Harvest.UsefulNodeSeconds = busy / k
	var foreignCoreSeconds int64
	res.Harvest.LostTaskSeconds = lostTaskSeconds
	res.Harvest.Jobs = []HarvestJob{}

	var waitSum int64
	var waits, blocked []int64
	var ft, ht tally
	for _, r := range res.Records {
		switch {
		case r.Pilot:
			if r.Start >= 0 {
				res.Harvest.Pilots++
			}
		case r.Label == "warm":
			// Context from before the window, not its jobs.
		case r.Label == "calibration":
			hj := HarvestJob{ID: r.Name, SubmitS: r.Submit}
			if r.End >= 0 && r.End <= to {
				hj.FinishS = &r.End
			}
			if r.Start >= 0 && r.Start <= to {
				ht.add(harvestUser(r.User), r.Start-r.Submit, r.Run, cores(r), k)
			}
			res.Harvest.Jobs = append(res.Harvest.Jobs, hj)
		default:
			res.Foreign.Jobs++
			blocked = append(blocked, r.Blocked)
			if r.Blocked > 0 {
				res.Foreign.Blocked.Jobs++
				res.Foreign.Blocked.SumS += r.Blocked
			}
			if r.Start >= 0 && r.Start <= to {
				res.Foreign.Started++
				wait := r.Start - r.Submit
				waitSum += wait
				waits = append(waits, wait)
				user := r.User
				if user == "" {
					user = "user"
				}
				ft.add(user, wait, r.Run, cores(r), k)
				res.Foreign.MaxWaitS = max(res.Foreign.MaxWaitS, wait)
				end := to
				if r.End >= 0 {
					end = min(r.End, to)
				}
				foreignCoreSeconds += int64(cores(r)) * (end - r.Start)
			}
		}
	}
	res.Foreign.NodeSeconds = foreignCoreSeconds / k
	if res.Foreign.Started > 0 {
		res.Foreign.MeanWaitS = float64(waitSum) / float64(res.Foreign.Started)
	}
	res.Foreign.P99WaitS = quantile.Of(waits, 0.99)
	res.Foreign.Blocked.P99S = quantile.Of(blocked, 0.99)
	res.Foreign.Blocked.MaxS = quantile.Of(blocked, 1)
	if mode != Baseline {
		for _, w := range work {
			ht.addMany(w.User, w.Tasks, w.TaskWaitSum, w.DoneSeconds, w.BSLDSum, w.BSLDMax)
			hj := HarvestJob{ID: w.ID, SubmitS: w.Submit}
			if w.Finish >= 0 {
				f := w.Finish
				hj.FinishS = &f
			}
			res.Harvest.Jobs = append(res.Harvest.Jobs, hj)
		}
	}
	res.Foreign.BoundedSlowdown, res.Foreign.Users = ft.slowdown(), ft.users()
	res.Harvest.BoundedSlowdown, res.Harvest.Users = ht.slowdown(), ht.users()
}

// cores is what a job took: its cores, or (records without them, from a
// real cluster) its nodes.
func cores(r simcluster.Record) int {
	if r.Cores > 0 {
		return r.Cores
	}
	return r.Nodes
}

// harvestUser names the owner of harvest work: the workload's user, or
// "harvest" where it has none (thesis Calibration jobs, the backlog).
func harvestUser(u string) string {
	if u == "" {
		return "harvest"
	}
	return u
}
