package replay

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"time"
)

// Start is one job start of a real run, set against the moments SLURM
// could have made it: on each of its nodes, the job's submit or the end
// (completion, cancellation, preemption) that freed the node, whichever
// came later. Times are whole seconds from the run's T0, as the job
// completion log gives them.
type Start struct {
	Job   string `json:"job"` // plan job id, or pilot-<SLURM job id>
	Pilot bool   `json:"pilot,omitempty"`
	Nodes int    `json:"nodes"`
	// Submit and At are the job's submit and start; Ready is when the
	// last of its nodes was free to it (its submit, or a later end).
	Submit int64 `json:"submit_s"`
	Ready  int64 `json:"ready_s"`
	At     int64 `json:"start_s"`
	// IdleNodeS sums, over its nodes, the seconds each sat free for it
	// before it started: what SLURM's reaction cost the utilisation.
	IdleNodeS int64 `json:"idle_node_s"`
}

// Delay is the seconds an average node of the job sat free for it.
func (s Start) Delay() float64 { return float64(s.IdleNodeS) / float64(max(s.Nodes, 1)) }

// Starts lists the job starts of a real run from its first second on
// (foreign jobs and pilots; the lead's pilots that started before it are
// the pool's start-up, outside the window), in start order. Every started
// job's node list must read: a node it does not know would hide the job
// that freed it.
func (o Outcome) Starts() ([]Start, error) {
	type run struct {
		job        string
		pilot      bool
		nodes      []string
		submit     int64
		start, end int64
	}
	sec := func(t time.Time) int64 { return int64(math.Floor(t.Sub(o.T0).Seconds())) }
	var runs []run
	add := func(job string, pilot bool, c Completion) error {
		if !c.Started() {
			return nil
		}
		nodes, err := expandHostlist(c.nodeList)
		if err != nil {
			return fmt.Errorf("job %s: NodeList: %w", c.JobID, err)
		}
		runs = append(runs, run{job: job, pilot: pilot, nodes: nodes, submit: sec(c.Submit), start: sec(c.Start), end: sec(c.End)})
		return nil
	}
	for id, c := range o.Foreign {
		if err := add(id, false, c); err != nil {
			return nil, err
		}
	}
	for _, c := range o.Pilots {
		if err := add("pilot-"+c.JobID, true, c); err != nil {
			return nil, err
		}
	}
	// Per node, the runs on it in start order: the run before a job on a
	// node is the one whose end freed the node for it.
	byNode := map[string][]int{}
	for i, r := range runs {
		for _, n := range r.nodes {
			byNode[n] = append(byNode[n], i)
		}
	}
	for _, is := range byNode {
		slices.SortFunc(is, func(a, b int) int {
			return cmpRun(runs[a].start, runs[a].end, runs[a].job, runs[b].start, runs[b].end, runs[b].job)
		})
	}
	var out []Start
	for i, r := range runs {
		if r.start < 0 {
			continue
		}
		s := Start{Job: r.job, Pilot: r.pilot, Nodes: len(r.nodes), Submit: r.submit, Ready: r.submit, At: r.start}
		for _, n := range r.nodes {
			ready := r.submit
			if is := byNode[n]; is[0] != i {
				ready = max(ready, runs[is[slices.Index(is, i)-1]].end)
			}
			s.Ready = max(s.Ready, ready)
			s.IdleNodeS += max(r.start-ready, 0)
		}
		out = append(out, s)
	}
	slices.SortFunc(out, func(a, b Start) int { return cmpRun(a.At, a.Submit, a.Job, b.At, b.Submit, b.Job) })
	return out, nil
}

// cmpRun orders by a time, then another, then a name.
func cmpRun(t1, u1 int64, n1 string, t2, u2 int64, n2 string) int {
	switch {
	case t1 != t2:
		return int(min(max(t1-t2, -1), 1))
	case u1 != u2:
		return int(min(max(u1-u2, -1), 1))
	case n1 < n2:
		return -1
	case n1 > n2:
		return 1
	}
	return 0
}

// Reaction is a real run's scheduler reaction, event by event, measured
// from its own job completion log (Outcome.Starts): the latency its
// simulation is given at each event.
type Reaction struct {
	// Events are the run's starts grouped by the second they were ready
	// in, each with the latency it gives the simulation.
	Events []ReactionEvent `json:"events"`
	// MeanS is the node-weighted mean delay of every start: the seconds
	// a node freed for a job sat idle before it started, on average.
	MeanS float64 `json:"mean_s"`
	// Latencies counts the events by the latency they give (index =
	// seconds).
	Latencies []int `json:"latencies"`
	// SimLatencyS is the latency the run's simulation was given: -1, the
	// events' own (Config.SimLatency < 0), else a fixed one.
	SimLatencyS int64 `json:"sim_latency_s"`
}

// ReactionEvent is the starts ready in one second.
type ReactionEvent struct {
	ReadyS    int64 `json:"ready_s"`
	Starts    int   `json:"starts"`
	Nodes     int   `json:"nodes"`
	IdleNodeS int64 `json:"idle_node_s"`
	// LatencyS is the event's node-weighted mean delay to the nearest
	// second: the simulated scheduler's latency at it.
	LatencyS int64 `json:"latency_s"`
}

// MeasureReaction groups a run's starts into events.
func MeasureReaction(starts []Start) Reaction {
	var r Reaction
	byReady := slices.Clone(starts)
	slices.SortStableFunc(byReady, func(a, b Start) int { return int(min(max(a.Ready-b.Ready, -1), 1)) })
	var nodes, idle int64
	for _, s := range byReady {
		nodes += int64(s.Nodes)
		idle += s.IdleNodeS
		if n := len(r.Events); n == 0 || r.Events[n-1].ReadyS != s.Ready {
			r.Events = append(r.Events, ReactionEvent{ReadyS: s.Ready})
		}
		e := &r.Events[len(r.Events)-1]
		e.Starts++
		e.Nodes += s.Nodes
		e.IdleNodeS += s.IdleNodeS
	}
	if nodes > 0 {
		r.MeanS = float64(idle) / float64(nodes)
	}
	for i := range r.Events {
		e := &r.Events[i]
		e.LatencyS = int64(math.Round(float64(e.IdleNodeS) / float64(max(e.Nodes, 1))))
		for int64(len(r.Latencies)) <= e.LatencyS {
			r.Latencies = append(r.Latencies, 0)
		}
		r.Latencies[e.LatencyS]++
	}
	return r
}

// LatencyAt is the simulation's scheduler latency for a change at window
// second t: that of the real event nearest t (the earlier of two as
// near), or, with none within near seconds, the most common one.
func (r Reaction) LatencyAt(t, near int64) int64 {
	best, lat := near+1, int64(-1)
	for _, e := range r.Events {
		if d := max(e.ReadyS-t, t-e.ReadyS); d < best {
			best, lat = d, e.LatencyS
		}
	}
	if lat >= 0 {
		return lat
	}
	most := 0
	for l, n := range r.Latencies {
		if n > r.Latencies[most] {
			most = l
		}
	}
	return int64(most)
}

// String says what was measured and what the simulation was given.
func (r Reaction) String() string {
	var b strings.Builder
	nodes := 0
	for _, e := range r.Events {
		nodes += e.Nodes
	}
	fmt.Fprintf(&b, "%d nodes started in %d seconds, mean %.2f s after they could", nodes, len(r.Events), r.MeanS)
	if r.SimLatencyS >= 0 {
		fmt.Fprintf(&b, "; simulated with a fixed latency of %d s", r.SimLatencyS)
		return b.String()
	}
	b.WriteString("; simulated with each one's latency:")
	sep := " "
	for l, n := range r.Latencies {
		if n > 0 {
			fmt.Fprintf(&b, "%s%d s at %d", sep, l, n)
			sep = ", "
		}
	}
	return b.String()
}
