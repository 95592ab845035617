package policy

import (
	"fmt"
	"slices"

	"github.com/harvest-hpc/harvest/cluster"
)

// Looking ahead to the next ends (issue 33). A running job that reaches
// its limit frees its nodes at a second everybody can foresee, and the
// batch system's pass of that second starts the jobs that then fit, with
// our pilots still there: the agent's round that could release them comes
// a second later at best. SLURM's backfill runs on a fixed cadence and a
// job it starts gets a limit of whole minutes, so such an end often falls
// on a backfill pass (SDSC-SP2 days 60-90: job 8179 started by a pass
// ended at its 15 min limit on a pass; the 15-node job 8189 that the
// baseline started then found three of its nodes under pilots, the pass
// backfilled an 8-node 14.6 h job instead, and 8189 started 12 h late).
// So each round walks the queue as it will stand at each such end within
// miniTime, and releases now the pilots that would keep the batch system
// from starting there what it starts without them; new pilots are not
// put on those nodes either.

// endsSoon returns the distinct times, in (0, MiniTime] seconds from now
// and ascending, at which running jobs that stay in both views (foreign
// jobs and floor pilots) reach their limits.
func (v *view) endsSoon() []int64 {
	b := v.walkBase()
	var out []int64
	for _, h := range b.held {
		if h.after.IsUnlimited() || int64(h.after) > v.cfg.MiniTime {
			break // sorted by when they free their nodes
		}
		if h.job >= 0 && !b.floor[h.job] {
			continue // released in the ideal view: its end changes nothing there
		}
		if t := int64(h.after); len(out) == 0 || out[len(out)-1] != t {
			out = append(out, t)
		}
	}
	return out
}

// from returns the free nodes over time as they will stand d seconds from
// now: the steps before d dropped and the times shifted, for a walk run at
// that instant. p must be a plan no walk has reserved in.
func (p *plan) from(d int64) plan {
	i, found := slices.BinarySearch(p.times, d)
	if !found {
		i-- // the step d falls in
	}
	q := plan{times: make([]int64, 0, len(p.times)-i), free: make([]int, 0, len(p.times)-i)}
	for k := i; k < len(p.times); k++ {
		q.times = append(q.times, max(p.times[k]-d, 0))
		q.free = append(q.free, p.free[k])
	}
	return q
}

// ahead is what the walk at a coming end asks of the pilots.
type ahead struct {
	at     int64 // seconds from now
	starts []int // the jobs the ideal walk starts then (indices in s.Jobs)
	nodes  int   // their nodes
	// ids are the pilots to release now so that the batch system starts
	// them all then (in release order); enough is false when even all the
	// releasable ones do not.
	ids    []string
	enough bool
}

// releaseAhead returns, for the first end within miniTime at which the
// batch system with the pilots would not start every job the ideal walk
// starts then, the fewest pilots in release order whose release now lets
// it; at is never when no end needs a release.
func (v *view) releaseAhead() ahead {
	cands := v.releasable()
	if len(cands) == 0 {
		return ahead{at: never}
	}
	for _, d := range v.endsSoon() {
		p := v.idealPlan()
		ideal := v.walkQueue(p.from(d), false, nil)
		if len(ideal.starts) == 0 {
			continue
		}
		batchAt := func(gone []bool) walked {
			q := v.batchPlan(gone)
			return v.walkQueue(q.from(d), true, gone)
		}
		if startsAll(batchAt(nil), ideal.starts) {
			continue
		}
		k, ok := shortest(len(cands), func(k int) bool {
			return startsAll(batchAt(v.with(nil, cands[:k])), ideal.starts)
		})
		a := ahead{at: d, starts: ideal.starts, nodes: ideal.nodes, enough: ok}
		for _, i := range cands[:k] {
			a.ids = append(a.ids, v.s.Jobs[i].ID)
		}
		return a
	}
	return ahead{at: never}
}

// aheadNeed is the first end within miniTime at which n new pilots on the
// idle nodes (held past it) would keep the batch system from starting a
// job the ideal walk starts then; never if none. New pilots end by then.
func (v *view) aheadNeed(n int) int64 {
	for _, d := range v.endsSoon() {
		p := v.idealPlan()
		ideal := v.walkQueue(p.from(d), false, nil)
		if len(ideal.starts) == 0 {
			continue
		}
		q := v.batchPlan(nil)
		q = q.from(d)
		for k := range q.free {
			q.free[k] -= n
		}
		if !startsAll(v.walkQueue(q, true, nil), ideal.starts) {
			return d
		}
	}
	return never
}

// endingAt returns the running job, not a pilot above the floor, with the
// lowest id that reaches its limit d seconds from now (nil if none), to
// name it in reasons.
func (v *view) endingAt(d int64) *cluster.Job {
	floor := v.walkBase().floor
	var best *cluster.Job
	for i := range v.s.Jobs {
		j := &v.s.Jobs[i]
		if j.State != cluster.Running || j.Pilot && !floor[i] || j.TimeLimit.IsUnlimited() || int64(overdue(j.Remaining())) != d {
			continue
		}
		if best == nil || compareIDs(j.ID, best.ID) < 0 {
			best = j
		}
	}
	return best
}

// endingPhrase names what ends d seconds from now: "job 7 reaches".
func (v *view) endingPhrase(d int64) string {
	if j := v.endingAt(d); j != nil {
		return "job " + j.ID + " reaches"
	}
	return "a running job reaches"
}

// endClause says, when the hole's limit hl is an end within miniTime
// (holeLimit's endCap), why: ", and pilots there would keep the batch
// system from starting a job when job 7 reaches its limit in 40s".
func (v *view) endClause(hl cluster.Limit) string {
	if hl.IsUnlimited() || v.endCap != int64(hl) {
		return ""
	}
	return fmt.Sprintf(", and pilots on the idle nodes would keep the batch system from starting a waiting job when %s its limit in %s",
		v.endingPhrase(v.endCap), fmtLimit(hl))
}

// marginRelease returns the pilots to release so that Config.IdleMargin
// nodes stay idle once the jobs the batch system starts now have started
// (in release order, above the floor), and how many idle nodes are
// missing. Polling only: in preemption mode the batch system takes the
// tier's nodes itself.
func (v *view) marginRelease(ideal walked, batchStarts bool) ([]string, int) {
	m := v.cfg.IdleMargin
	if m <= 0 || v.cfg.Preemption {
		return nil, 0
	}
	free := v.idleF
	if batchStarts {
		free = max(0, free-ideal.nodes) // queued pilots may come after them
	}
	need := m - free
	if need <= 0 {
		return nil, 0
	}
	var ids []string
	left := need
	for _, i := range v.releasable() {
		if left <= 0 {
			break
		}
		ids = append(ids, v.s.Jobs[i].ID)
		left -= v.s.Jobs[i].Nodes
	}
	return ids, need
}
