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

// claims lets the pilots on their way, queued pilots first (the batch
// system already has them), then the ledger's, take the idle nodes they
// will run on. It returns when those nodes free up again and how many idle
// nodes they take. Pilots beyond the idle nodes take nothing: they wait
// for a node like any pending job.
//
// A queued pilot frees its node its whole limit from now (it has not
// started); a ledger pilot is assumed to have started when it was
// submitted, the earliest it could, so that maxTime errs short (shorter
// pilots) rather than long (a delayed foreign job).
func claims(s *cluster.Snapshot, upcoming []Upcoming, out []freeing) ([]freeing, int) {
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
	for i := range s.Jobs {
		if j := &s.Jobs[i]; j.Pilot && j.State == cluster.Pending {
			take(j.Nodes, j.TimeLimit)
		}
	}
	for _, u := range upcoming {
		after := u.TimeLimit
		if !after.IsUnlimited() {
			elapsed := max(0, s.Now-u.SubmittedAt)
			after = cluster.Limit(max(0, int64(after)-elapsed))
		}
		take(u.Count, after)
	}
	return out, taken
}

// MaxTime returns the time until the top pending foreign job J_top can
// start, or Unlimited if no foreign job is pending (or J_top can never
// start because unlimited jobs hold the nodes it needs).
//
// The walk: need = N_top - I (the published pseudocode's I - N_top has the
// wrong sign); running jobs, foreign and pilots alike, are taken in order
// of remaining limit TL - RT, each subtracting its nodes from need; the
// remaining limit of the job at which need reaches zero is maxTime. If
// need <= 0 at the start, J_top can start now (0). Jobs with an unlimited
// limit never free their nodes, so if need is not met by the limited ones,
// maxTime is Unlimited. Queued pilots count as taking idle nodes (see
// Decide). With useExpected, the batch system's own expected start of
// J_top (Unix seconds, turned into a duration from s.Now) wins when it is
// earlier; one in the past or 0 is ignored as stale or unknown.
func MaxTime(s cluster.Snapshot, useExpected bool) cluster.Limit {
	top := topPending(&s)
	if top < 0 {
		return cluster.Unlimited
	}
	return maxTime(&s, nil, &s.Jobs[top], useExpected)
}

func maxTime(s *cluster.Snapshot, upcoming []Upcoming, top *cluster.Job, useExpected bool) cluster.Limit {
	mt := walk(s, upcoming, top.Nodes)
	if useExpected && top.ExpectedStart > 0 && top.ExpectedStart >= s.Now {
		mt = mt.Min(cluster.Limit(top.ExpectedStart - s.Now))
	}
	return mt
}

func walk(s *cluster.Snapshot, upcoming []Upcoming, nodes int) cluster.Limit {
	// Count first so that a 10,000-job snapshot costs one allocation.
	n := len(upcoming)
	for i := range s.Jobs {
		if s.Jobs[i].State == cluster.Running || s.Jobs[i].Pilot {
			n++
		}
	}
	entries, taken := claims(s, upcoming, make([]freeing, 0, n))
	need := nodes - (s.IdleNodes - taken)
	if need <= 0 {
		return 0
	}
	for i := range s.Jobs {
		if j := &s.Jobs[i]; j.State == cluster.Running {
			if r := j.Remaining(); !r.IsUnlimited() {
				entries = append(entries, freeing{after: r, nodes: j.Nodes})
			}
		}
	}
	slices.SortFunc(entries, func(a, b freeing) int { return compareLimit(a.after, b.after) })
	for _, e := range entries {
		need -= e.nodes
		if need <= 0 {
			return e.after
		}
	}
	return cluster.Unlimited
}

// extraAt is EASY backfill's "extra nodes": how many nodes are free at
// time mt (the top job's start) beyond the nodes the top job needs. A job
// longer than mt that fits in them delays nobody, so the batch system
// backfills it and pilots should not stand in its way. Unlimited mt: every
// node is extra (the top job never starts).
func extraAt(s *cluster.Snapshot, upcoming []Upcoming, mt cluster.Limit, topNodes int) int {
	if mt.IsUnlimited() {
		return s.TotalNodes
	}
	entries, taken := claims(s, upcoming, nil)
	free := s.IdleNodes - taken
	for _, e := range entries {
		if compareLimit(e.after, mt) <= 0 {
			free += e.nodes
		}
	}
	for i := range s.Jobs {
		if j := &s.Jobs[i]; j.State == cluster.Running {
			if r := j.Remaining(); !r.IsUnlimited() && compareLimit(r, mt) <= 0 {
				free += j.Nodes
			}
		}
	}
	return max(0, free-topNodes)
}
