package policy

import (
	"github.com/harvest-hpc/harvest/cluster"
)

// Watch reports whether the round after this one should come soon (the
// agent's fast poll): the pilots it may release hold nodes that a pending
// foreign job could start on as soon as one running job ends, or at once.
//
// A job that ends before its limit is the one thing the policy cannot plan
// for: its nodes and the pilots' together may let a waiting job start,
// and until the agent's next round only the batch system can act, with
// the pilots still there (SLURM's backfill may start a smaller job in
// their place). Polling fast while that can happen, and slowly otherwise,
// buys most of a short poll's reaction for a fraction of its squeue calls.
//
// With s the round's snapshot and d its decision (Idle and KeepNodes are
// read from it): R is the running pilots outside the preemptible tier
// above Keep (the only ones the agent releases), I the idle nodes. Watch
// is true when R > 0 and some pending foreign job j needs more than I +
// n_k nodes but at most I + R + n_k, for n_k = 0 or the nodes of some
// running foreign job k: one end (or none) and the pilots let it start,
// the end alone does not. SLURM preempts preemptible pilots by itself, so
// in preemption mode Watch is false unless floor pilots are above Keep.
// Pure: it reads its arguments only.
func Watch(s cluster.Snapshot, d Decision) bool {
	if d.Case == CaseInvalidInput {
		return false
	}
	pilots := 0
	for i := range s.Jobs {
		if j := &s.Jobs[i]; j.State == cluster.Running && j.Pilot && !j.Preemptible {
			pilots += j.Nodes
		}
	}
	r := pilots - d.KeepNodes
	if r <= 0 {
		return false
	}
	idle := max(d.Idle, 0)
	// Some n_k in [lo, hi] with n_k = 0 allowed: lo = N - I - R,
	// hi = N - I - 1. A job with lo <= 0 answers at once; the others
	// need a running job's size in their range, looked up in a count of
	// the sizes up to the largest hi (a sort of every running job's size
	// was a sixteenth of a warm simulated month).
	top := 0
	for i := range s.Jobs {
		j := &s.Jobs[i]
		if j.Pilot || j.State != cluster.Pending {
			continue
		}
		lo, hi := j.Nodes-idle-r, j.Nodes-idle-1
		if hi < 0 {
			continue // fits in the idle nodes: the batch system starts it
		}
		if lo <= 0 {
			return true
		}
		top = max(top, hi)
	}
	if top == 0 {
		return false
	}
	// below[x] is the number of running foreign jobs of fewer than x nodes.
	below := make([]int32, top+2)
	for i := range s.Jobs {
		if j := &s.Jobs[i]; j.State == cluster.Running && !j.Pilot && j.Nodes <= top {
			below[max(j.Nodes, 0)+1]++
		}
	}
	for x := 1; x < len(below); x++ {
		below[x] += below[x-1]
	}
	for i := range s.Jobs {
		j := &s.Jobs[i]
		if j.Pilot || j.State != cluster.Pending {
			continue
		}
		lo, hi := j.Nodes-idle-r, j.Nodes-idle-1
		if hi >= 0 && below[hi+1] > below[lo] {
			return true
		}
	}
	return false
}
