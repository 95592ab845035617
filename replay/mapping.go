// Package replay runs a window of a workload trace on a real SLURM
// cluster (the mini-cluster of scripts/minicluster.sh), with and without
// harvest, and reads back what the real scheduler did, so that harvest's
// effect on the other users' jobs and the simulator's fidelity are both
// measured on the real thing.
//
// The mapping from the trace to the cluster (Map) is pure; so are the
// readers of SLURM's job completion log and of the harvest tasks' ledger
// and the comparison with the simulator. Run is the driver: it submits
// with sbatch as the cluster's users, starts the agent, and waits.
package replay

import (
	"errors"
	"fmt"
	"math"
	"sort"

	"github.com/harvest-hpc/harvest/cluster"
	"github.com/harvest-hpc/harvest/sim"
)

// ErrInvalidConfig is wrapped by every Config.Validate error.
var ErrInvalidConfig = errors.New("invalid replay config")

// MapConfig says how a trace window becomes jobs on the cluster.
type MapConfig struct {
	// From and To bound the window in trace seconds: jobs submitted in
	// [From, To) are replayed.
	From, To int64
	// Nodes is the cluster's size; TraceNodes the traced machine's, in
	// processors (0 = from the SWF header, see TraceNodes).
	Nodes, TraceNodes int
	// Scale divides every time: 60 maps trace hours to minutes.
	Scale float64
	// Users are the cluster's users; the trace's users are mapped onto
	// them in the order they first submit, round robin.
	Users []string
}

// Validate reports the first setting that makes no sense.
func (c MapConfig) Validate() error {
	switch {
	case c.To <= c.From || c.From < 0:
		return fmt.Errorf("%w: --from %d --to %d is not a window", ErrInvalidConfig, c.From, c.To)
	case c.Nodes <= 0:
		return fmt.Errorf("%w: nodes must be positive, got %d", ErrInvalidConfig, c.Nodes)
	case c.TraceNodes < 0:
		return fmt.Errorf("%w: trace nodes must not be negative", ErrInvalidConfig)
	case !(c.Scale >= 1) || math.IsInf(c.Scale, 0):
		return fmt.Errorf("%w: scale must be at least 1, got %v", ErrInvalidConfig, c.Scale)
	case len(c.Users) == 0:
		return fmt.Errorf("%w: no cluster users to submit as", ErrInvalidConfig)
	}
	return nil
}

// Job is one trace job as it is submitted to the cluster.
type Job struct {
	// ID is the workload's id; TraceUser the trace's user, User the
	// cluster user it is submitted as.
	ID, TraceUser, User string
	Nodes               int
	// SubmitS is the submit time in seconds from the replay's start;
	// RunS how long it sleeps; LimitMin its limit in whole minutes.
	SubmitS, RunS, LimitMin int64
}

// Plan is a mapped window.
type Plan struct {
	Jobs []Job
	// Skipped counts the window's jobs that could not be mapped, by reason.
	Skipped map[string]int
	// Scaled is the same window as a workload in the cluster's units
	// (seconds from the replay's start, nodes, limits in whole minutes),
	// for `harvest sim` to run on.
	Scaled sim.Workload
	// SpanS is the window's length in replay seconds.
	SpanS int64
	// TraceNodes is the traced machine's size the mapping used, and
	// TraceNodesFrom where it comes from.
	TraceNodes     int
	TraceNodesFrom string
}

// TraceNodes is the traced machine's size in processors, the unit of the
// trace's job sizes: given (> 0) wins; else the SWF header's MaxProcs, or
// its MaxNodes (one processor a node); with neither, the widest job of
// the whole trace, said so. It returns where the figure comes from.
func TraceNodes(w sim.Workload, given int) (int, string) {
	h := w.Header
	switch {
	case given > 0:
		return given, "--trace-nodes"
	case h.MaxProcs > 0:
		return h.MaxProcs, "the SWF header's MaxProcs"
	case h.MaxNodes > 0:
		return h.MaxNodes, "the SWF header's MaxNodes"
	case w.MaxNodes > 0:
		return w.MaxNodes, "the workload's machine size"
	}
	widest := 0
	for _, j := range w.Jobs {
		widest = max(widest, j.Nodes)
	}
	return widest, "the widest job: the SWF header gives neither MaxNodes nor MaxProcs (set --trace-nodes to override)"
}

// Map maps the window of w onto the cluster:
//   - nodes = ceil(processors x Nodes / TraceNodes), so the widest job of
//     the trace fills the cluster and the narrowest takes one node (small
//     jobs grow: report the offered load);
//   - submit, run time and limit are divided by Scale; the run time is
//     rounded to the second (at least 1 s) and the limit up to whole
//     minutes, SLURM's unit (at least 1 min): at Scale 60 a trace hour is
//     exactly a minute, a 10-minute limit becomes a whole minute;
//   - a job that ran past its limit in the trace runs until its limit
//     (SLURM kills it there, as the traced machine did);
//   - jobs wider than the traced machine are skipped and counted.
func Map(w sim.Workload, c MapConfig) (Plan, error) {
	if err := c.Validate(); err != nil {
		return Plan{}, err
	}
	traceNodes, from := TraceNodes(w, c.TraceNodes)
	if traceNodes <= 0 {
		return Plan{}, fmt.Errorf("%w: the workload does not say how many nodes the traced machine had (MaxNodes); give --trace-nodes", ErrInvalidConfig)
	}
	p := Plan{Skipped: map[string]int{}, Scaled: sim.Workload{Format: "swf", MaxNodes: c.Nodes}, SpanS: scaled(c.To-c.From, c.Scale),
		TraceNodes: traceNodes, TraceNodesFrom: from}
	users := map[string]string{}
	for _, j := range w.Jobs {
		if j.Submit < c.From || j.Submit >= c.To {
			continue
		}
		switch {
		case j.Calibration:
			p.Skipped["harvest jobs of the trace (the replay brings its own)"]++
			continue
		case j.Nodes > traceNodes:
			p.Skipped["jobs wider than the traced machine"]++
			continue
		}
		u, ok := users[j.User]
		if !ok {
			u = c.Users[len(users)%len(c.Users)]
			users[j.User] = u
		}
		limit := int64(math.MaxInt64)
		if !j.TimeLimit.IsUnlimited() {
			limit = int64(j.TimeLimit)
		}
		run := max(1, scaled(min(j.RunTime, limit), c.Scale))
		limitMin := int64(math.MaxInt64)
		if !j.TimeLimit.IsUnlimited() {
			limitMin = max(1, int64(math.Ceil(float64(limit)/c.Scale/60)))
		}
		rj := Job{ID: j.ID, TraceUser: j.User, User: u, Nodes: (j.Nodes*c.Nodes + traceNodes - 1) / traceNodes,
			SubmitS: scaled(j.Submit-c.From, c.Scale), RunS: run, LimitMin: limitMin}
		if rj.LimitMin == math.MaxInt64 {
			rj.LimitMin = 0 // unlimited
		}
		p.Jobs = append(p.Jobs, rj)
		sj := sim.Job{ID: rj.ID, User: rj.User, Nodes: rj.Nodes, TimeLimit: cluster.Unlimited, RunTime: rj.RunS, Wait: -1, Submit: rj.SubmitS}
		if rj.LimitMin > 0 {
			sj.TimeLimit = cluster.Seconds(rj.LimitMin * 60)
		}
		p.Scaled.Jobs = append(p.Scaled.Jobs, sj)
	}
	sort.SliceStable(p.Jobs, func(a, b int) bool { return p.Jobs[a].SubmitS < p.Jobs[b].SubmitS })
	sort.SliceStable(p.Scaled.Jobs, func(a, b int) bool { return p.Scaled.Jobs[a].Submit < p.Scaled.Jobs[b].Submit })
	if len(p.Jobs) == 0 {
		return p, fmt.Errorf("%w: no job of the trace is submitted in [%d, %d)", ErrInvalidConfig, c.From, c.To)
	}
	return p, nil
}

// scaled divides trace seconds by the scale, rounded to the second.
func scaled(s int64, scale float64) int64 { return int64(math.Round(float64(s) / scale)) }

// OfferedLoad is the node-seconds the plan's jobs ask for over the
// cluster's node-seconds in the window: above 1 the queue can only grow.
func (p Plan) OfferedLoad(nodes int) float64 {
	var ns int64
	for _, j := range p.Jobs {
		ns += int64(j.Nodes) * j.RunS
	}
	return float64(ns) / float64(int64(nodes)*max(p.SpanS, 1))
}
