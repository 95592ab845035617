package policy

import (
	"slices"

	"github.com/harvest-hpc/harvest/cluster"
)

// freeing is a group of nodes that becomes free after some time.
type freeing struct {
	after cluster.Limit // finite: unlimited holders never free their nodes
	nodes int
}

// topPending returns the index of the top pending foreign job (the first
// pending non-pilot job; pending jobs are in priority order), or -1. Our
// own queued pilots are not foreign jobs: they never wait for anybody.
func topPending(s *cluster.Snapshot) int {
	for i := range s.Jobs {
		if !s.Jobs[i].Pilot && s.Jobs[i].State == cluster.Pending {
			return i
		}
	}
	return -1
}

// holding is how the maxTime walk sees our pilots: as the batch system
// would judge a pending job's start with the pilots above the floor gone.
// Those are released (polling) or preempted (preemption mode) the moment a
// waiting job could use their nodes, so they never hold nodes until their
// own limits; only the floor pilots, which nobody releases, do.
type holding struct {
	// freeNow counts the nodes of running pilots above the floor.
	freeNow int
	// floor holds the floor pilots (visible, running or queued), floorIdx
	// their indices in the snapshot's jobs.
	floor    []cluster.Job
	floorIdx []int
	// floorLedger is how many floor pilots are still on the ledger.
	floorLedger int
}

// newHolding splits the pilots into those above the floor and the keep
// floor pilots: the last in release order among those only we may release
// (all pilots when polling; the pilots outside the preemptible tier in
// preemption mode: the batch system preempts the others by itself).
func newHolding(jobs []cluster.Job, upcoming []Upcoming, keep int, preemption bool) holding {
	var h holding
	var own []int
	for i := range jobs {
		p := &jobs[i]
		if !p.Pilot {
			continue
		}
		if keep == 0 || preemption && p.Preemptible {
			if p.State == cluster.Running {
				h.freeNow += p.Nodes
			}
			continue
		}
		own = append(own, i)
	}
	if keep == 0 {
		return h // no floor: no need to sort
	}
	slices.SortFunc(own, func(a, b int) int { return compareReleaseRef(&jobs[a], &jobs[b]) }) // ReleaseOrder
	nfloor := 0
	for k := len(own) - 1; k >= 0; k-- {
		p := &jobs[own[k]]
		if nfloor >= keep {
			if p.State == cluster.Running {
				h.freeNow += p.Nodes
			}
			continue
		}
		h.floor = append(h.floor, *p)
		h.floorIdx = append(h.floorIdx, own[k])
		nfloor += p.Nodes
	}
	if nfloor < keep {
		for _, u := range upcoming {
			if !(preemption && u.Preemptible) {
				h.floorLedger += u.Count
			}
		}
		h.floorLedger = min(h.floorLedger, keep-nfloor)
	}
	return h
}

// claims lets the floor pilots on their way, queued ones first (the batch
// system already has them), then the ledger's, take the idle nodes they
// will run on. It returns when those nodes free up again and how many idle
// nodes they take. Pilots beyond the idle nodes take nothing: they wait
// for a node like any pending job. Pilots above the floor take nothing:
// they would be released or preempted for a waiting job.
//
// A queued pilot frees its node its whole limit from now (it has not
// started); a ledger pilot is assumed to have started when it was
// submitted, the earliest it could, so that maxTime errs short (shorter
// pilots) rather than long (a delayed foreign job).
func (h holding) claims(s *cluster.Snapshot, upcoming []Upcoming, preemption bool, out []freeing) ([]freeing, int) {
	free := s.IdleNodes
	taken := 0
	take := func(n int, after cluster.Limit) {
		n = min(n, free)
		if n <= 0 {
			return
		}
		free -= n
		taken += n
		if !after.IsUnlimited() {
			out = append(out, freeing{after: after, nodes: n})
		}
	}
	for _, p := range h.floor {
		if p.State == cluster.Pending {
			take(p.Nodes, p.TimeLimit)
		}
	}
	left := h.floorLedger
	for _, u := range upcoming {
		if left <= 0 {
			break
		}
		if preemption && u.Preemptible {
			continue
		}
		after := u.TimeLimit
		if !after.IsUnlimited() {
			elapsed := max(0, s.Now-u.SubmittedAt)
			after = cluster.Limit(max(0, int64(after)-elapsed))
		}
		n := min(u.Count, left)
		left -= n
		take(n, after)
	}
	return out, taken
}

// MaxTime returns the time until the top pending foreign job J_top can
// start, as the policy computes it for in and cfg (Decision.MaxTime), or
// Unlimited if no foreign job is pending (or J_top can never start because
// unlimited jobs hold the nodes it needs).
//
// The walk: the nodes of running pilots above the floor count as idle (see
// holding); need = N_top - I (the published pseudocode's I - N_top has the
// wrong sign); running foreign jobs and floor pilots are taken in order of
// remaining limit TL - RT, each subtracting its nodes from need; the
// remaining limit of the job at which need reaches zero is maxTime. If
// need <= 0 at the start, J_top can start now (0). Jobs with an unlimited
// limit never free their nodes, so if need is not met by the limited ones,
// maxTime is Unlimited. Queued and ledger floor pilots count as taking
// idle nodes (see claims). With cfg.UseExpectedStart, the batch system's
// own expected start of J_top (Unix seconds, turned into a duration from
// the snapshot's Now) wins when it is earlier; one in the past or 0 is
// ignored as stale or unknown.
func MaxTime(in Input, cfg Config) cluster.Limit {
	if err := validateInput(&in, cfg); err != nil || topPending(&in.Snapshot) < 0 {
		return cluster.Unlimited
	}
	v := newView(&in, cfg)
	return v.maxTime(&v.s.Jobs[v.top])
}

// maxTime is J_top's maxTime (top is J_top), computed once a round.
func (v *view) maxTime(top *cluster.Job) cluster.Limit {
	if v.maxTime0 != nil {
		return *v.maxTime0
	}
	mt := v.walk(top.Nodes)
	if v.cfg.UseExpectedStart && top.ExpectedStart > 0 && top.ExpectedStart >= v.s.Now {
		mt = mt.Min(cluster.Limit(top.ExpectedStart - v.s.Now))
	}
	v.maxTime0 = &mt
	return mt
}

func (v *view) walk(nodes int) cluster.Limit {
	s := v.s
	entries, taken := v.hold.claims(s, v.in.Upcoming, v.cfg.Preemption, nil)
	need := nodes - (s.IdleNodes - taken + v.hold.freeNow)
	if need <= 0 {
		return 0
	}
	// The running holders (runningHolders: foreign jobs and floor pilots)
	// come sorted from the round's walkBase; the few claims are merged in.
	// An unlimited holder is last and never frees its nodes: reaching it
	// is Unlimited either way.
	slices.SortFunc(entries, func(a, b freeing) int { return compareLimit(a.after, b.after) })
	b := v.walkBase()
	held := b.held
	i, k := 0, 0
	for {
		for i < len(held) && held[i].job >= 0 && !b.floor[held[i].job] {
			i++
		}
		var e freeing
		switch {
		case i < len(held) && (k == len(entries) || compareLimit(held[i].rem, entries[k].after) <= 0):
			e = freeing{after: held[i].rem, nodes: held[i].nodes}
			i++
		case k < len(entries):
			e = entries[k]
			k++
		default:
			return cluster.Unlimited
		}
		need -= e.nodes
		if need <= 0 {
			return e.after
		}
	}
}

// runningHolders appends the running jobs that hold their nodes until
// their limits: foreign jobs and floor pilots.
func (v *view) runningHolders(out []freeing) []freeing {
	for i := range v.s.Jobs {
		if j := &v.s.Jobs[i]; j.State == cluster.Running && !j.Pilot {
			if r := j.Remaining(); !r.IsUnlimited() {
				out = append(out, freeing{after: r, nodes: j.Nodes})
			}
		}
	}
	for _, p := range v.hold.floor {
		if p.State == cluster.Running {
			if r := p.Remaining(); !r.IsUnlimited() {
				out = append(out, freeing{after: r, nodes: p.Nodes})
			}
		}
	}
	return out
}
