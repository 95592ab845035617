package policy

import (
	"encoding/json"
	"math/rand/v2"
	"reflect"
	"strconv"
	"testing"

	"github.com/harvest-hpc/harvest/cluster"
)

// randomInput draws a consistent random round: a cluster of up to 40
// nodes with running foreign jobs, running and queued pilots, pending
// foreign jobs (some with an expected start), caps, demand, a ledger and a
// random config.
func randomInput(r *rand.Rand) (Input, Config) {
	const now = 1_700_000_000
	total := 1 + r.IntN(40)
	used, id := 0, 0
	nextID := func() string { id++; return strconv.Itoa(id) }
	limit := func() int64 {
		if r.IntN(8) == 0 {
			return unlimited
		}
		return int64(1+r.IntN(240))*minute + r.Int64N(60)
	}
	runTime := func(tl int64) int64 {
		if tl < 0 {
			return r.Int64N(100_000)
		}
		return r.Int64N(tl + 120) // a few overrun their limit
	}
	var jobs []cluster.Job
	for used < total && r.IntN(4) != 0 {
		n := 1 + r.IntN(min(6, total-used))
		tl := limit()
		jobs = append(jobs, running(nextID(), n, tl, runTime(tl)))
		used += n
	}
	for used < total && r.IntN(3) != 0 {
		tl := limit()
		p := pilot(nextID(), tl, runTime(tl))
		p.Busy = r.IntN(2) == 0
		p.Preemptible = r.IntN(2) == 0
		jobs = append(jobs, p)
		used++
	}
	// Shuffle so that pilots and foreign jobs interleave in any order.
	r.Shuffle(len(jobs), func(i, j int) { jobs[i], jobs[j] = jobs[j], jobs[i] })
	for range r.IntN(7) {
		if r.IntN(5) == 0 {
			q := queuedPilot(nextID(), limit())
			q.Preemptible = r.IntN(2) == 0
			jobs = append(jobs, q)
			continue
		}
		p := pending(nextID(), 1+r.IntN(total+2), limit())
		switch r.IntN(4) {
		case 0:
			p.ExpectedStart = now + r.Int64N(4*3600)
		case 1:
			p.ExpectedStart = now - 1 - r.Int64N(600)
		}
		jobs = append(jobs, p)
	}
	s := snap(total, total-used, jobs...)
	if r.IntN(3) == 0 {
		s.MinNodes = r.IntN(total + 1)
	}
	if r.IntN(3) == 0 {
		s.MaxNodes = s.MinNodes + r.IntN(total+1)
	}
	if r.IntN(3) == 0 {
		s.MaxTime = limitPtr(int64(1+r.IntN(48)) * 3600)
	}
	if r.IntN(3) == 0 {
		s.Demand = &cluster.Demand{PendingTasks: r.IntN(50), RunningTasks: r.IntN(20), SlotsPerNode: r.IntN(9)}
		if r.IntN(4) == 0 {
			s.Demand.PendingTasks, s.Demand.RunningTasks = 0, 0 // an empty backlog
		}
	}
	in := Input{Snapshot: s}
	for range r.IntN(3) {
		in.Upcoming = append(in.Upcoming, Upcoming{Count: r.IntN(5), TimeLimit: cluster.Limit(limit()), SubmittedAt: now - r.Int64N(600), Preemptible: r.IntN(2) == 0})
	}
	if r.IntN(3) == 0 {
		in.Recommended = r.IntN(12)
	}
	cfg := DefaultConfig()
	cfg.MiniTime = r.Int64N(181)
	cfg.Margin = r.Int64N(301)
	cfg.Granularity = []int64{1, 60, 300}[r.IntN(3)]
	cfg.HarvestWhileIdle = r.IntN(4) == 0
	cfg.UseExpectedStart = r.IntN(2) == 0
	if r.IntN(3) == 0 {
		cfg.MaxPilotLimit = cluster.Limit(1 + r.Int64N(12*3600))
	}
	if r.IntN(4) == 0 {
		cfg.MinNodes = r.IntN(total + 1)
		cfg.MaxNodes = cfg.MinNodes + r.IntN(total+1)
	}
	cfg.Preemption = r.IntN(2) == 0
	cfg.Shrink = r.IntN(2) == 0
	cfg.ShrinkMargin = r.Int64N(120)
	if r.IntN(3) == 0 {
		cfg.MinPilotLimit = cluster.Limit(1 + r.Int64N(30*minute))
	}
	// From a draw already made: a new draw would change every input after
	// it, and the steady test's fixed stream with them.
	cfg.IdleMargin = int(cfg.ShrinkMargin % 3)
	return in, cfg
}

// refMaxTime is an independent statement of maxTime: the earliest instant
// t (0 or a job's end) at which the idle nodes plus the nodes freed by t
// reach N_top, with the pilots above the floor gone. The floor is the keep
// pilots released last, among those only the agent releases (in
// preemption mode, the pilots outside the preemptible tier); the others
// free their nodes at once if running and take none if on their way.
// Floor pilots on their way take idle nodes first (queued ones, then the
// ledger) and free them at their limit.
func refMaxTime(in Input, useExpected bool, keep int, preemption bool) (cluster.Limit, bool) {
	mt, _, waiting := refMaxTimeExtra(in, useExpected, keep, preemption)
	return mt, waiting
}

// refMaxTimeExtra is refMaxTime, and how many nodes are free beside the
// top job when it starts (pilots above the floor gone).
func refMaxTimeExtra(in Input, useExpected bool, keep int, preemption bool) (cluster.Limit, int, bool) {
	s := in.Snapshot
	var top *cluster.Job
	for i := range s.Jobs {
		if !s.Jobs[i].Pilot && s.Jobs[i].State == cluster.Pending {
			top = &s.Jobs[i]
			break
		}
	}
	if top == nil {
		return cluster.Unlimited, 0, false
	}
	type ev struct {
		t int64
		n int
	}
	var evs []ev
	free := s.IdleNodes
	take := func(n int, t int64) {
		n = min(n, free)
		free -= n
		if t >= 0 && n > 0 {
			evs = append(evs, ev{t, n})
		}
	}
	var own []cluster.Job
	for _, j := range s.Jobs {
		if j.Pilot && !(preemption && j.Preemptible) {
			own = append(own, j)
		}
	}
	own = ReleaseOrder(own)
	floor := map[string]bool{}
	kept := 0
	for i := len(own) - 1; i >= 0 && kept < keep; i-- {
		floor[own[i].ID] = true
		kept += own[i].Nodes
	}
	freeNow := 0
	for _, j := range s.Jobs {
		if j.Pilot && !floor[j.ID] && j.State == cluster.Running {
			freeNow += j.Nodes
		}
	}
	for i := len(own) - 1; i >= 0; i-- {
		if j := own[i]; floor[j.ID] && j.State == cluster.Pending {
			take(j.Nodes, int64(j.TimeLimit))
		}
	}
	ledger := keep - kept
	for _, u := range in.Upcoming {
		if ledger <= 0 {
			break
		}
		if preemption && u.Preemptible {
			continue
		}
		t := int64(u.TimeLimit)
		if t >= 0 {
			t = max(0, t-max(0, s.Now-u.SubmittedAt))
		}
		n := min(u.Count, ledger)
		ledger -= n
		take(n, t)
	}
	free += freeNow
	for _, j := range s.Jobs {
		if j.State == cluster.Running && j.TimeLimit >= 0 && (!j.Pilot || floor[j.ID]) {
			evs = append(evs, ev{max(0, int64(j.TimeLimit)-j.RunTime), j.Nodes})
		}
	}
	best := cluster.Unlimited
	for _, c := range append([]ev{{0, 0}}, evs...) {
		freed := free
		for _, e := range evs {
			if e.t <= c.t {
				freed += e.n
			}
		}
		if freed >= top.Nodes && (best.IsUnlimited() || c.t < int64(best)) {
			best = cluster.Limit(c.t)
		}
	}
	if useExpected && top.ExpectedStart > 0 && top.ExpectedStart >= s.Now {
		best = best.Min(cluster.Limit(top.ExpectedStart - s.Now))
	}
	extra := free - top.Nodes
	for _, e := range evs {
		if !best.IsUnlimited() && e.t <= int64(best) {
			extra += e.n
		}
	}
	return best, extra, true
}

var knownCases = map[Case]bool{
	CaseInvalidInput: true, CaseAboveMaxNodes: true, CaseNoDemand: true, CaseAboveDemand: true,
	CaseNoPendingJob: true, CaseBelowMinNodes: true, CaseTopJobFits: true, CaseReleaseForTopJob: true,
	CaseJobEndingSoon: true, CaseBackfillWillStart: true, CaseReleaseForBackfill: true, CaseFillHole: true,
	CaseHoleTooShort: true, CaseNoIdleNodes: true, CaseAtMaxNodes: true, CaseDemandMet: true,
	CaseSchedulerPreempts: true, CasePaused: true, CaseDrain: true, CaseReleaseForPlan: true, CaseReleaseBeforeEnd: true,
	CaseReleaseForMargin: true,
}

func TestDecideProperties(t *testing.T) {
	r := rand.New(rand.NewPCG(20261121, 3))
	seen := map[Case]int{}
	for i := range 20_000 {
		in, cfg := randomInput(r)
		switch r.IntN(16) {
		case 0, 1:
			in.Paused = true
		case 2:
			in.Drain = &Drain{Now: r.IntN(2) == 0}
		}
		d := Decide(in, cfg)
		seen[d.Case]++
		fail := func(format string, a ...any) {
			t.Helper()
			b, _ := json.Marshal(in)
			c, _ := json.Marshal(cfg)
			e, _ := json.Marshal(d)
			t.Fatalf("round %d: "+format+"\ninput: %s\nconfig: %s\ndecision: %s", append(append([]any{i}, a...), b, c, e)...)
		}
		s := in.Snapshot

		if !knownCases[d.Case] || d.Reason == "" {
			fail("unknown case %q or empty reason", d.Case)
		}
		if d.Case == CaseInvalidInput {
			fail("a consistent snapshot was rejected")
		}
		if d.Release == nil {
			fail("release is nil")
		}
		if d.Submit != nil && len(d.Release) > 0 {
			fail("both submits and releases")
		}
		// The admin's switches: a pause takes the submission away and
		// nothing else; a drain releases every pilot it may.
		if in.Paused && in.Drain == nil {
			free := in
			free.Paused = false
			want := Decide(free, cfg)
			if want.Submit != nil {
				want.Submit, want.Case = nil, CasePaused
				want.Reason = "paused by the admin; would have: " + want.Reason
			}
			if !reflect.DeepEqual(d, want) {
				e, _ := json.Marshal(want)
				fail("paused round differs from the unpaused one beyond its submission: want %s", e)
			}
		}
		if in.Drain != nil {
			var want []string
			for _, p := range ReleaseOrder(s.Pilots()) {
				if in.Drain.Now || p.State != cluster.Running || !p.Busy {
					want = append(want, p.ID)
				}
			}
			if d.Case != CaseDrain || d.Submit != nil || len(d.Shrink) > 0 || len(d.Release) != len(want) || len(want) > 0 && !reflect.DeepEqual(d.Release, want) {
				fail("drain (now %v): want case drain releasing %v and nothing else", in.Drain.Now, want)
			}
		}

		// Releases: visible pilots only, no duplicates, never more than held.
		pilots := map[string]cluster.Job{}
		for _, j := range s.Pilots() {
			pilots[j.ID] = j
		}
		dup := map[string]bool{}
		for _, id := range d.Release {
			if _, ok := pilots[id]; !ok {
				fail("released %q, not a pilot", id)
			}
			if dup[id] {
				fail("released %q twice", id)
			}
			dup[id] = true
		}
		if len(d.Release) > len(pilots) {
			fail("released %d of %d pilots", len(d.Release), len(pilots))
		}
		// In preemption mode a waiting job gets the preemptible pilots from
		// the batch system: only the caps release them.
		if cfg.Preemption && d.Case != CaseAboveMaxNodes && d.Case != CaseNoDemand && d.Case != CaseAboveDemand && d.Case != CaseDrain {
			for _, id := range d.Release {
				if pilots[id].Preemptible {
					fail("released preemptible pilot %q for a waiting job", id)
				}
			}
		}
		if d.Case == CaseSchedulerPreempts && !cfg.Preemption {
			fail("the scheduler preempts, but preemption mode is off")
		}
		// Shrinks: running pilots above the floor, each only pulled in,
		// to no later than J_top's start minus the margin, and never in a
		// round that releases.
		if len(d.Shrink) > 0 {
			if !cfg.Shrink || len(d.Release) > 0 {
				fail("shrinks with Shrink %v and %d releases", cfg.Shrink, len(d.Release))
			}
			seenShrink := map[string]bool{}
			for _, sh := range d.Shrink {
				p, ok := pilots[sh.ID]
				if !ok || p.State != cluster.Running || seenShrink[sh.ID] {
					fail("shrinks %q: not a running pilot, or twice", sh.ID)
				}
				seenShrink[sh.ID] = true
				if sh.End <= s.Now || sh.End > s.Now+int64(d.MaxTime)-cfg.ShrinkMargin {
					fail("shrinks %q to %d: not after now %d and by the top job's start %v minus %ds", sh.ID, sh.End, s.Now, d.MaxTime, cfg.ShrinkMargin)
				}
				if r := p.Remaining(); !r.IsUnlimited() && s.Now+int64(r) <= sh.End {
					fail("shrinks %q to %d, not before its end %d", sh.ID, sh.End, s.Now+int64(r))
				}
			}
		}
		if (d.Case == CaseNoDemand || d.Case == CaseAboveDemand) && len(d.Release) > 0 {
			for _, id := range d.Release {
				if pilots[id].Busy && pilots[id].State == cluster.Running {
					fail("released busy pilot %q for lack of demand", id)
				}
			}
		}

		if mt, waiting := refMaxTime(in, cfg.UseExpectedStart, d.KeepNodes, cfg.Preemption); waiting && d.TopJob != "" && mt != d.MaxTime {
			fail("maxTime %v, reference %v", d.MaxTime, mt)
		}

		// The idle margin, polling only: released while a foreign job
		// waits, no more pilots than it lacks (the last may overshoot).
		if d.Case == CaseReleaseForMargin {
			nodes, last := 0, 0
			for _, id := range d.Release {
				nodes, last = nodes+pilots[id].Nodes, pilots[id].Nodes
			}
			if cfg.Preemption || d.TopJob == "" || nodes-last >= cfg.IdleMargin {
				fail("releases %d nodes for a margin of %d (preemption %v, top job %q)", nodes, cfg.IdleMargin, cfg.Preemption, d.TopJob)
			}
		}
		if d.Submit == nil {
			continue
		}
		// Submissions: within the idle nodes and the caps.
		n, l := d.Submit.Count, d.Submit.TimeLimit
		if p := d.Submit.Preemptible; p < 0 || p > n || p > 0 && !cfg.Preemption {
			fail("%d of %d pilots preemptible with Preemption %v", p, n, cfg.Preemption)
		}
		if m := d.Submit.MinTimeLimit; m != 0 && (m != cfg.MinPilotLimit || compareLimit(m, l) >= 0) {
			fail("min time limit %v: want 0 or the configured %v below the limit %v", m, cfg.MinPilotLimit, l)
		}
		if n < 1 || n > s.IdleNodes || n > d.Idle {
			fail("submits %d pilots with %d idle (%d free of pilots on their way)", n, s.IdleNodes, d.Idle)
		}
		// While a foreign job waits (polling) the margin stays idle, but
		// for the pilots the admin's floor lacks.
		if !cfg.Preemption && d.TopJob != "" && n > max(d.Idle-cfg.IdleMargin, d.KeepNodes-d.Held) {
			fail("submits %d pilots on %d idle nodes, leaving less than the margin of %d (floor %d, held %d)", n, d.Idle, cfg.IdleMargin, d.KeepNodes, d.Held)
		}
		maxNodes := cfg.MaxNodes
		if s.MaxNodes > 0 {
			maxNodes = s.MaxNodes
		}
		if maxNodes > 0 && d.Held+n > maxNodes {
			fail("holds %d + %d pilots, above max nodes %d", d.Held, n, maxNodes)
		}
		if s.Demand != nil && !cfg.HarvestWhileIdle {
			slots := max(1, s.Demand.SlotsPerNode)
			useful := (s.Demand.PendingTasks + s.Demand.RunningTasks + slots - 1) / slots
			if d.Held+n > useful {
				fail("holds %d + %d pilots, the backlog can use %d", d.Held, n, useful)
			}
		}
		if !l.IsUnlimited() && (l <= 0 || int64(l)%cfg.Granularity != 0) {
			fail("limit %v is not a positive multiple of %ds", l, cfg.Granularity)
		}
		if cap := cfg.MaxPilotLimit.Min(s.PartitionMaxTime()); !cap.IsUnlimited() && (l.IsUnlimited() || l > cap) {
			fail("limit %v exceeds the cap %v", l, cap)
		}

		// The invariant: while a foreign job waits, no pilot outlives its
		// start minus the margin, unless the new pilots fit beside it in
		// the nodes it does not need (the batch system's extra nodes).
		if mt, extra, waiting := refMaxTimeExtra(in, cfg.UseExpectedStart, d.KeepNodes, cfg.Preemption); waiting && !mt.IsUnlimited() {
			if (l.IsUnlimited() || int64(l) > int64(mt)-cfg.Margin) && n > extra {
				fail("pilot limit %v reaches past the top job's start %v minus the margin %ds, and %d pilots do not fit in the %d nodes beside it", l, mt, cfg.Margin, n, extra)
			}
		}
	}
	// The generator must reach every branch, or the properties prove little.
	for c := range knownCases {
		if c != CaseInvalidInput && seen[c] == 0 {
			t.Errorf("no random round ended in case %q", c)
		}
	}
	t.Logf("cases: %v", seen)
}

// TestDecideIsDeterministic: the same round decides the same, and the
// order of running jobs (which carries no meaning) does not matter.
func TestDecideIsDeterministic(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 7))
	for i := range 3000 {
		in, cfg := randomInput(r)
		want := Decide(in, cfg)
		if again := Decide(in, cfg); !reflect.DeepEqual(again, want) {
			t.Fatalf("round %d: two calls differ:\n%+v\n%+v", i, want, again)
		}
		// Move the running jobs into another order, pending ones stay.
		jobs := append([]cluster.Job(nil), in.Snapshot.Jobs...)
		var runIdx []int
		for k, j := range jobs {
			if j.State == cluster.Running {
				runIdx = append(runIdx, k)
			}
		}
		perm := r.Perm(len(runIdx))
		shuffled := append([]cluster.Job(nil), jobs...)
		for k, p := range perm {
			shuffled[runIdx[k]] = jobs[runIdx[p]]
		}
		in.Snapshot.Jobs = shuffled
		if got := Decide(in, cfg); !reflect.DeepEqual(got, want) {
			t.Fatalf("round %d: running job order changed the decision:\n%+v\n%+v", i, want, got)
		}
	}
}

// FuzzDecide: no snapshot file, however wrong, makes Decide panic, and an
// invalid one decides nothing.
func FuzzDecide(f *testing.F) {
	for _, s := range []cluster.Snapshot{thesis(10 * minute), thesis(25 * minute), snap(3, 3)} {
		b, _ := json.Marshal(s)
		f.Add(b)
	}
	f.Add([]byte(`{"total_nodes":2,"idle_nodes":1,"jobs":[{"id":"x","state":"running","nodes":-1,"time_limit_s":5}]}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		var s cluster.Snapshot
		if json.Unmarshal(b, &s) != nil {
			return
		}
		d := Decide(Input{Snapshot: s}, DefaultConfig())
		if s.Validate() != nil && (d.Case != CaseInvalidInput || d.Acts()) {
			t.Fatalf("invalid snapshot acted: %+v", d)
		}
		if d.Release == nil {
			t.Fatal("nil release")
		}
	})
}
