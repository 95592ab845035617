package policy

import (
	"math"
	"slices"

	"github.com/harvest-hpc/harvest/cluster"
)

// Forever is what Steady returns when nothing in the input depends on time.
const Forever int64 = math.MaxInt64

// Steady returns for how many seconds Decide keeps deciding the same thing
// on in if nothing but time changes: the clock moves, running jobs run on
// (their run times grow by as much), and nothing starts, ends, arrives, is
// submitted or cancelled, and the demand stays as it is. "The same" is the
// same case, the same releases and the same submit count; a submitted
// limit may shrink with the hole. Decide(in advanced by dt) agrees for
// every 0 <= dt < Steady(in, cfg). The simulator uses it to skip rounds
// that could not change anything; the figure errs short, never long.
//
// Why time alone changes little: every remaining limit of a running job
// shrinks at the same pace, so their order, which job's end lets the top
// job start and which jobs end before it, stay the same; maxTime shrinks
// with them. What can flip is a remaining limit or maxTime crossing a
// constant: a job's remaining limit reaching zero (Remaining stops there)
// or miniTime (case 4), maxTime falling to a pending job's limit (case 5
// no longer sees it ending in time), to the margin plus one granularity
// step (no pilot time is left), or the batch system's expected start
// passing. Queued pilots and ledger entries count with fixed or separately
// ageing limits, so an input with any of them is steady for 0 seconds, as
// is a drain (it is not worth the analysis). A pause changes a round only
// when it would submit, which the same analysis covers.
func Steady(in Input, cfg Config) int64 {
	if validateInput(&in, cfg) != nil {
		return 0
	}
	return newView(&in, cfg).steady()
}

// steady is Steady on v's input, which is valid.
func (v *view) steady() int64 {
	in, cfg := v.in, v.cfg
	if len(in.Upcoming) > 0 || in.Drain != nil {
		return 0
	}
	s := &in.Snapshot
	steady := Forever
	bound := func(dt int64) { steady = max(0, min(steady, dt)) }
	// Every running job's remaining limit r > 0 bounds it, and r - MiniTime
	// when above MiniTime: the least of each does (newView's pass).
	if v.ends.queuedPilot {
		return 0
	}
	if r := v.ends.first; !r.IsUnlimited() {
		// Beside an overdue job (read as ending at 1 s), an end meets it
		// at 1 s, a second before its own limit.
		if v.ends.overdue && r > 1 {
			r--
		}
		bound(int64(r))
	}
	if r := v.ends.pastMini; !r.IsUnlimited() {
		bound(int64(r) - cfg.MiniTime)
	}
	top := v.top // topPending(s)
	if top < 0 {
		return steady
	}
	tj := &s.Jobs[top]
	if cfg.UseExpectedStart && tj.ExpectedStart > 0 && tj.ExpectedStart >= s.Now {
		bound(tj.ExpectedStart - s.Now)
	}
	// The queue walk (walk.go): a pending job's fit flips when a step of
	// the free nodes over time crosses its end (the step minus its limit),
	// a step reaching now, and a hole's limit when a step crosses the
	// margin plus one granularity step.
	var limits []int64
	for i := top; i < len(s.Jobs); i++ {
		if j := &s.Jobs[i]; !j.Pilot && j.State == cluster.Pending && !j.TimeLimit.IsUnlimited() {
			limits = append(limits, int64(j.TimeLimit))
		}
	}
	g := max(cfg.Granularity, 1)
	if hl := v.holeLimit(v.ideal(), v.maxTime(tj)); !hl.IsUnlimited() && int64(hl)-cfg.Margin >= g {
		bound(int64(hl) - cfg.Margin - g)
	}
	// For each step t, the nearest flip is t minus the longest limit
	// under t (a sorted search, not a walk of every limit: a warm start
	// queues thousands of jobs and its plans have thousands of steps).
	slices.Sort(limits)
	for _, w := range []walked{v.ideal(), v.batch(nil)} {
		for _, t := range w.plan.times {
			if t <= 0 || t == never {
				continue
			}
			if k, _ := slices.BinarySearch(limits, t); k > 0 {
				bound(t - limits[k-1])
			}
			// The walk ahead to an overdue job's end (ahead.go) sees
			// the steps a second nearer.
			if k, _ := slices.BinarySearch(limits, t-1); v.ends.overdue && k > 0 {
				bound(t - 1 - limits[k-1])
			}
		}
	}
	mt := v.maxTime(tj)
	if mt.IsUnlimited() {
		return steady
	}
	m := int64(mt)
	if m-cfg.Margin >= max(cfg.Granularity, 1) {
		bound(m - cfg.Margin - max(cfg.Granularity, 1))
	}
	for i := top; i < len(s.Jobs); i++ {
		j := &s.Jobs[i]
		if j.Pilot || j.State != cluster.Pending || j.TimeLimit.IsUnlimited() {
			continue
		}
		if tl := int64(j.TimeLimit); tl < m {
			bound(m - tl)
		}
	}
	return steady
}
