package policy

import (
	"maps"
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"

	"github.com/harvest-hpc/harvest/cluster"
)

// refPlan is the plan of a view built the plain way, from the snapshot
// alone (every walk once did this: a pass over the jobs with the floor and
// the released pilots as sets of ids, then a sort): the walks' shared
// state (walkBase, batchPlan's merge of the sorted holders, idealPlan's)
// must give exactly this.
func refPlan(v *view, ideal bool, gone map[string]bool) plan {
	s := v.s
	free := s.IdleNodes
	var ends []freeing
	take := func(n int, after cluster.Limit) {
		n = min(n, free)
		if n > 0 {
			free -= n
			ends = append(ends, freeing{after: after, nodes: n})
		}
	}
	floor := map[string]bool{}
	for _, p := range v.hold.floor {
		floor[p.ID] = true
	}
	for i := range s.Jobs {
		j := &s.Jobs[i]
		if !j.Pilot {
			if j.State == cluster.Running {
				ends = append(ends, freeing{after: overdue(j.Remaining()), nodes: j.Nodes})
			}
			continue
		}
		tier := v.cfg.Preemption && j.Preemptible
		present := !gone[j.ID] && !tier && (!ideal || floor[j.ID])
		switch {
		case j.State == cluster.Running && present:
			ends = append(ends, freeing{after: overdue(j.Remaining()), nodes: j.Nodes})
		case j.State == cluster.Running:
			free += j.Nodes
		case present && ideal:
			take(j.Nodes, j.TimeLimit)
		}
	}
	ledger := v.hold.floorLedger
	if !ideal {
		ledger = int(^uint(0) >> 1)
	}
	for _, u := range v.in.Upcoming {
		if ledger <= 0 {
			break
		}
		if v.cfg.Preemption && u.Preemptible {
			continue
		}
		after := u.TimeLimit
		if !after.IsUnlimited() {
			after = cluster.Limit(max(0, int64(after)-max(0, s.Now-u.SubmittedAt)))
		}
		n := min(u.Count, ledger)
		ledger -= n
		take(n, after)
	}
	return newPlan(free, ends)
}

func sameWalk(a, b walked) bool {
	return slices.Equal(a.starts, b.starts) && a.nodes == b.nodes && a.topAt == b.topAt && samePlan(a.plan, b.plan) && maps.Equal(a.at, b.at)
}

func samePlan(a, b plan) bool {
	return slices.Equal(a.times, b.times) && slices.Equal(a.free, b.free)
}

// The plans the walks start from, built from the round's shared state,
// equal the plans built from scratch: the ideal one, the batch system's
// without releases, with releasable prefixes released (releaseFor's
// searches) and with random sets of pilots released; and the walk without
// releases, cached for the round, equals a fresh one. Every other view
// works in one Buffers, left by the views before it.
func TestWalkPlansEqualAFullRebuild(t *testing.T) {
	r := rand.New(rand.NewPCG(20261126, 34))
	checked := 0
	var buf Buffers
	for i := range 20_000 {
		in, cfg := randomInput(r)
		if validateInput(&in, cfg) != nil {
			continue
		}
		v := newView(&in, cfg)
		if i%2 == 1 {
			v.buf = &buf
		}
		if v.top < 0 {
			continue
		}
		checked++
		if got, want := v.idealPlan(), refPlan(v, true, nil); !samePlan(got, want) {
			t.Fatalf("round %d: ideal plan %v/%v, rebuilt %v/%v", i, got.times, got.free, want.times, want.free)
		}
		if got, want := v.batchPlan(nil), refPlan(v, false, nil); !samePlan(got, want) {
			t.Fatalf("round %d: batch plan %v/%v, rebuilt %v/%v", i, got.times, got.free, want.times, want.free)
		}
		cands := v.releasable()
		sets := [][]int{cands}
		for k := range cands {
			sets = append(sets, cands[:k])
		}
		var random []int
		for j := range v.s.Jobs {
			if v.s.Jobs[j].Pilot && r.IntN(2) == 0 {
				random = append(random, j)
			}
		}
		sets = append(sets, random)
		for _, set := range sets {
			ids := map[string]bool{}
			for _, j := range set {
				ids[v.s.Jobs[j].ID] = true
			}
			gone := v.with(nil, set)
			if got, want := v.batchPlan(gone), refPlan(v, false, ids); !samePlan(got, want) {
				t.Fatalf("round %d: batch plan without %v: %v/%v, rebuilt %v/%v", i, ids, got.times, got.free, want.times, want.free)
			}
			// The probe walk reuses one walk's arrays and maps from set
			// to set (releaseFor's searches): it must equal a fresh one.
			probe, fresh := v.batch(gone), v.walkQueue(refPlan(v, false, ids), true, gone)
			if !sameWalk(probe, fresh) {
				t.Fatalf("round %d: the probe walk without %v: starts %v top %d plan %v/%v at %v; fresh: %v %d %v/%v %v", i, ids,
					probe.starts, probe.topAt, probe.plan.times, probe.plan.free, probe.at, fresh.starts, fresh.topAt, fresh.plan.times, fresh.plan.free, fresh.at)
			}
		}
		fresh := v.walkQueue(refPlan(v, false, nil), true, nil)
		if cached := v.batch(nil); !slices.Equal(cached.starts, fresh.starts) || cached.topAt != fresh.topAt || !samePlan(cached.plan, fresh.plan) {
			t.Fatalf("round %d: the round's batch walk differs from a fresh one", i)
		}
	}
	if checked < 5_000 {
		t.Fatalf("only %d inputs with a pending job checked", checked)
	}
}

// JobsChecked skips the checks of the jobs only: the figures are still
// checked, and without it a duplicate id is refused.
func TestJobsCheckedSkipsOnlyTheJobChecks(t *testing.T) {
	s := snap(4, 2, running("1", 1, 600, 10), running("1", 1, 600, 10))
	if d := Decide(Input{Snapshot: s}, DefaultConfig()); d.Case != CaseInvalidInput {
		t.Fatalf("duplicate ids: got case %s, want %s", d.Case, CaseInvalidInput)
	}
	if d := Decide(Input{Snapshot: s, JobsChecked: true}, DefaultConfig()); d.Case == CaseInvalidInput {
		t.Fatalf("jobs checked by the caller: refused anyway: %s", d.Reason)
	}
	s.IdleNodes = 5
	if d := Decide(Input{Snapshot: s, JobsChecked: true}, DefaultConfig()); d.Case != CaseInvalidInput {
		t.Fatalf("idle above total with JobsChecked: got case %s, want %s", d.Case, CaseInvalidInput)
	}
}

// releasable sorts numeric ids by keys: the order must be compareRelease's,
// for numeric ids, and for ids that are not plain numbers (the fallback).
func TestReleasableKeepsTheReleaseOrder(t *testing.T) {
	r := rand.New(rand.NewPCG(34, 2))
	keyed := 0
	for i := range 20_000 {
		in, cfg := randomInput(r)
		switch r.IntN(4) {
		case 0: // some ids that are not plain numbers: the fallback
			for k := range in.Snapshot.Jobs {
				if r.IntN(10) == 0 {
					in.Snapshot.Jobs[k].ID = []string{"0", "00", "p", "pilot-", "7.", "pilot-0"}[r.IntN(6)] + in.Snapshot.Jobs[k].ID
				}
			}
		case 1: // the simulator's "pilot-N"
			for k := range in.Snapshot.Jobs {
				in.Snapshot.Jobs[k].ID = "pilot-" + in.Snapshot.Jobs[k].ID
			}
		}
		if validateInput(&in, cfg) != nil {
			continue
		}
		v := newView(&in, cfg)
		got := v.releasable()
		want := slices.Clone(got)
		slices.SortFunc(want, func(a, b int) int { return compareReleaseRef(&v.s.Jobs[a], &v.s.Jobs[b]) })
		if !slices.Equal(got, want) {
			t.Fatalf("input %d: releasable %v, compareRelease orders %v", i, got, want)
		}
		if _, ok := releaseKeys(v.s.Jobs, got, nil); ok && len(got) > 1 {
			keyed++
		}
	}
	if keyed < 3_000 {
		t.Fatalf("only %d inputs sorted by keys", keyed)
	}
}

// One Buffers through thousands of random rounds of every size (the arrays
// grow and shrink from one round to the next): every decision and its
// Steady equal those of a decision with fresh arrays.
func TestBuffersDecideAsFreshOnes(t *testing.T) {
	r := rand.New(rand.NewPCG(20261127, 34))
	var buf Buffers
	acted := 0
	for i := range 20_000 {
		in, cfg := randomInput(r)
		got, gx := DecideWith(in, cfg, &buf)
		gs := gx.Steady()
		want, wx := DecideShared(in, cfg)
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("round %d: with buffers %+v, fresh %+v", i, got, want)
		}
		if ws := wx.Steady(); gs != ws {
			t.Fatalf("round %d: Steady with buffers %d, fresh %d", i, gs, ws)
		}
		if len(got.Release) > 0 {
			acted++
		}
	}
	if acted < 1_000 {
		t.Fatalf("only %d rounds released pilots", acted)
	}
}
