package replay

import (
	"math"
	"slices"
	"time"

	simcluster "github.com/harvest-hpc/harvest/adapters/sim"
	"github.com/harvest-hpc/harvest/cluster"
	"github.com/harvest-hpc/harvest/sim"
)

// Result turns a run into the figures of `harvest sim` over [0, span]
// seconds from its start: the same job records (foreign jobs by their
// workload ids, pilots as pilot-<SLURM job id>), node use over time,
// harvest work done and lost.
func (o Outcome) Result(p Plan, nodes int, span int64, harvestUser string) sim.Result {
	res := sim.Result{Mode: sim.Baseline, Nodes: nodes, SpanS: span}
	switch o.Kind {
	case Polling:
		res.Mode, res.GiveBack = sim.Harvest, sim.Polling
	case Preemption:
		res.Mode, res.GiveBack = sim.Harvest, sim.Preemption
	}
	sec := func(t time.Time) int64 { return int64(math.Floor(t.Sub(o.T0).Seconds())) }
	// A pilot of the run's lead (Outcome.LeadS) was submitted, started
	// or even ended before the window: its record says 0 for those times
	// (-1 is "never"), its node use is measured from 0 all the same.
	sec0 := func(t time.Time) int64 { return max(sec(t), 0) }
	type ev struct {
		t                   int64
		foreign, busy, idle int
	}
	var evs []ev
	for _, j := range p.Jobs {
		r := simcluster.Record{ID: j.ID, Name: j.ID, User: j.User, Label: "foreign", Nodes: j.Nodes, Submit: j.SubmitS, Run: j.RunS,
			Limit: cluster.Unlimited, Start: -1, End: -1}
		if j.LimitMin > 0 {
			r.Limit = cluster.Seconds(j.LimitMin * 60)
		}
		if c, ok := o.Foreign[j.ID]; ok {
			r.Submit = sec(c.Submit)
			r.Killed = c.State == "TIMEOUT"
			r.Cancelled = c.State == "CANCELLED"
			if c.Started() {
				r.Start, r.End = sec(c.Start), sec(c.End)
				evs = append(evs, ev{t: r.Start, foreign: j.Nodes}, ev{t: r.End, foreign: -j.Nodes})
			}
		}
		res.Records = append(res.Records, r)
	}
	pilotEnd := map[string]int64{}
	for _, c := range o.Pilots {
		r := simcluster.Record{ID: "pilot-" + c.JobID, Name: "pilot-" + c.JobID, User: "harvest", Label: "pilot", Pilot: true, Nodes: max(c.Nodes, 1),
			Submit: sec0(c.Submit), Start: -1, End: -1, Limit: cluster.Unlimited,
			Killed: c.State == "TIMEOUT", Cancelled: c.State == "CANCELLED", Preempted: c.State == "PREEMPTED"}
		if c.TimeLimitMin > 0 {
			r.Limit = cluster.Seconds(c.TimeLimitMin * 60)
		}
		if c.Started() {
			r.Start, r.End = sec0(c.Start), sec0(c.End)
			pilotEnd[c.JobID] = sec(c.End)
			evs = append(evs, ev{t: sec(c.Start), idle: r.Nodes}, ev{t: sec(c.End), idle: -r.Nodes})
		}
		res.Records = append(res.Records, r)
	}
	var lost int64
	work := simcluster.WorkRecord{ID: "harvest", User: harvestUser, Finish: -1}
	tsec := func(u float64) int64 { return int64(math.Floor(u - float64(o.T0.Unix()))) }
	for _, t := range o.Tasks {
		start := tsec(t.Start)
		var end int64
		if t.Done() {
			end = tsec(t.End)
			work.Tasks++
			work.DoneSeconds += end - start
			work.TaskWaitSum += max(start, 0)
			b := simcluster.BoundedSlowdown(max(start, 0), end-start)
			work.BSLDSum += b
			work.BSLDMax = max(work.BSLDMax, b)
		} else {
			pe, ok := pilotEnd[t.Pilot]
			if !ok {
				continue // its pilot never ended in the log: nothing to count
			}
			end = max(pe, start)
			lost += end - start
		}
		evs = append(evs, ev{t: start, busy: 1, idle: -1}, ev{t: end, busy: -1, idle: 1})
	}
	slices.SortStableFunc(evs, func(a, b ev) int { return int(min(max(a.t-b.t, -1), 1)) })
	if len(evs) == 0 || evs[0].t > 0 {
		res.Usage = []simcluster.Sample{{}}
	}
	var cur simcluster.Sample
	for i, e := range evs {
		cur.Foreign += e.foreign
		cur.PilotBusy += e.busy
		cur.PilotIdle += e.idle
		if i+1 < len(evs) && evs[i+1].t == e.t {
			continue
		}
		cur.T = e.t
		res.Usage = append(res.Usage, cur)
	}
	var works []simcluster.WorkRecord
	if o.Kind.Harvested() {
		works = append(works, work)
	}
	sim.Measure(&res, lost, works, 0, span)
	return res
}
