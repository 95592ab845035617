package policy

import (
	"encoding/json"
	"math/rand/v2"
	"reflect"
	"testing"

	"github.com/harvest-hpc/harvest/cluster"
)

// later returns in as it looks dt seconds later if nothing but time
// changed: the clock and every running job's run time move on.
func later(in Input, dt int64) Input {
	out := in
	out.Snapshot.Jobs = append([]cluster.Job(nil), in.Snapshot.Jobs...)
	out.Snapshot.Now += dt
	for i := range out.Snapshot.Jobs {
		if out.Snapshot.Jobs[i].State == cluster.Running {
			out.Snapshot.Jobs[i].RunTime += dt
		}
	}
	return out
}

// same reports whether two decisions do the same thing (the submitted
// limit may differ: it follows the shrinking hole).
func same(a, b Decision) bool {
	if a.Case != b.Case || !reflect.DeepEqual(a.Release, b.Release) || (a.Submit == nil) != (b.Submit == nil) {
		return false
	}
	return a.Submit == nil || a.Submit.Count == b.Submit.Count
}

func TestDecisionsStayTheSameForAsLongAsSteadySays(t *testing.T) {
	r := rand.New(rand.NewPCG(20261123, 7))
	steadyInputs, changedAfter := 0, 0
	for i := range 20_000 {
		in, cfg := randomInput(r)
		if r.IntN(2) == 0 {
			in.Upcoming = nil // the ledger is empty in most rounds
		}
		in.Paused = r.IntN(4) == 0
		st := Steady(in, cfg)
		if st < 0 {
			t.Fatalf("round %d: Steady is negative: %d", i, st)
		}
		d := Decide(in, cfg)
		if st == 0 {
			continue
		}
		steadyInputs++
		dts := []int64{1, min(st, 1<<40) - 1, r.Int64N(min(st, 1<<40))}
		for _, dt := range dts {
			if dt <= 0 || dt >= st { // Steady promises 0 <= dt < st only
				continue
			}
			if d2 := Decide(later(in, dt), cfg); !same(d, d2) {
				b, _ := json.Marshal(in)
				c, _ := json.Marshal(cfg)
				t.Fatalf("round %d: Steady says %d s but %d s later the decision changed\nbefore: %s: %s\nafter:  %s: %s\ninput: %s\nconfig: %s",
					i, st, dt, d.Case, d.Reason, d2.Case, d2.Reason, b, c)
			}
		}
		if st < 1<<40 && !same(d, Decide(later(in, st+120), cfg)) {
			changedAfter++
		}
	}
	// The test must be able to fail: most random rounds are steady for a
	// while, and past the bound many of them do change.
	if steadyInputs < 5_000 {
		t.Fatalf("only %d of 20000 inputs were steady for any time: the property is barely tested", steadyInputs)
	}
	if changedAfter < 500 {
		t.Fatalf("only %d decisions changed past their bound: the bounds may be far too short to matter", changedAfter)
	}
	t.Logf("%d steady inputs, %d changed past their bound", steadyInputs, changedAfter)
}

func TestSteadyIsZeroWithPilotsOnTheirWay(t *testing.T) {
	cfg := DefaultConfig()
	base := snap(10, 0, running("1", 6, 3600, 60), pilot("2", 3600, 60), pending("3", 8, 600))
	if st := Steady(Input{Snapshot: base}, cfg); st == 0 {
		t.Fatal("a round with nothing on its way should be steady for a while")
	}
	queued := base
	queued.Jobs = append(append([]cluster.Job(nil), base.Jobs...), queuedPilot("4", 600))
	if st := Steady(Input{Snapshot: queued}, cfg); st != 0 {
		t.Fatalf("a queued pilot frees its node at a fixed limit: Steady = %d, want 0", st)
	}
	ledger := Input{Snapshot: base, Upcoming: []Upcoming{{Count: 1, TimeLimit: 600, SubmittedAt: base.Now}}}
	if st := Steady(ledger, cfg); st != 0 {
		t.Fatalf("a ledger entry: Steady = %d, want 0", st)
	}
}

// TestSteadyAfterDecideIsSteady checks Decided.Steady, which reuses the
// walks Decide made (and their caches and trees), against Steady on a
// fresh copy of the input, and DecideShared's decision against Decide's.
func TestSteadyAfterDecideIsSteady(t *testing.T) {
	r := rand.New(rand.NewPCG(34, 20261126))
	nonzero := 0
	for i := range 20_000 {
		in, cfg := randomInput(r)
		if r.IntN(2) == 0 {
			in.Upcoming = nil
		}
		in.Paused = r.IntN(4) == 0
		fresh := in
		fresh.Snapshot.Jobs = append([]cluster.Job(nil), in.Snapshot.Jobs...)
		want, wantSt := Decide(fresh, cfg), Steady(fresh, cfg)
		d, x := DecideShared(in, cfg)
		if !reflect.DeepEqual(d, want) {
			t.Fatalf("round %d: DecideShared decided %+v, Decide %+v", i, d, want)
		}
		if st := x.Steady(); st != wantSt {
			b, _ := json.Marshal(in)
			t.Fatalf("round %d: Steady after Decide is %d, on its own %d\ninput: %s", i, st, wantSt, b)
		}
		if wantSt > 0 {
			nonzero++
		}
	}
	if nonzero < 5_000 {
		t.Fatalf("only %d of 20000 inputs were steady for any time", nonzero)
	}
}

// A running job past its limit is read as ending in a second (overdue),
// so another job's end meets it at 1 s, a second before that job reaches
// its limit: the decision changed there, and Steady, which bounded by the
// limit itself, said one second too many (TestDecisionsStayTheSame...
// found "steady says 359 s, the decision changes at 358 s" once). Job 7
// is past its limit; job 1 reaches its limit in 55 s, so its end meets
// job 7's at 54 s, when job 9 can start on job 7's and job 1's nodes and
// the batch system backfills job 10 instead of waiting.
func TestSteadyEndsWhereAnEndMeetsAnOverdueJob(t *testing.T) {
	const inJSON = `{"Snapshot":{"now":1700000000,"total_nodes":39,"idle_nodes":19,"jobs":[{"id":"3","user":"u3","state":"running","nodes":1,"time_limit_s":6811,"run_time_s":6224},{"id":"5","user":"u5","state":"running","nodes":4,"time_limit_s":6265,"run_time_s":5250},{"id":"6","user":"u6","state":"running","nodes":2,"time_limit_s":13973,"run_time_s":8342},{"id":"8","user":"harvest","state":"running","nodes":1,"time_limit_s":7383,"run_time_s":6215,"pilot":true,"busy":true},{"id":"2","user":"u2","state":"running","nodes":3,"time_limit_s":4880,"run_time_s":1207},{"id":"7","user":"u7","state":"running","nodes":3,"time_limit_s":1108,"run_time_s":1116},{"id":"4","user":"u4","state":"running","nodes":1,"time_limit_s":1104,"run_time_s":73},{"id":"1","user":"u1","state":"running","nodes":5,"time_limit_s":6361,"run_time_s":6306},{"id":"9","user":"u9","state":"pending","nodes":21,"time_limit_s":null},{"id":"10","user":"u10","state":"pending","nodes":6,"time_limit_s":11735},{"id":"11","user":"u11","state":"pending","nodes":7,"time_limit_s":11546,"expected_start":1699999797}]},"Paused":true}`
	var in Input
	if err := json.Unmarshal([]byte(inJSON), &in); err != nil {
		t.Fatal(err)
	}
	cfg := DefaultConfig()
	cfg.MiniTime, cfg.Margin, cfg.Granularity, cfg.HarvestWhileIdle = 59, 244, 300, true
	d := Decide(in, cfg)
	if d.Case != CaseJobEndingSoon {
		t.Fatalf("now: %s (%s), want %s", d.Case, d.Reason, CaseJobEndingSoon)
	}
	// The decision holds up to 53 s and changes at 54 s: Steady is 54.
	if d2 := Decide(later(in, 53), cfg); !same(d, d2) {
		t.Fatalf("53 s later: %s (%s)", d2.Case, d2.Reason)
	}
	if d2 := Decide(later(in, 54), cfg); same(d, d2) {
		t.Fatalf("54 s later the decision is still %s: the fixture no longer shows the boundary", d2.Case)
	}
	if st := Steady(in, cfg); st != 54 {
		t.Errorf("Steady = %d s, want 54 (the decision changes 54 s later)", st)
	}
}

// The same second in the walk ahead to an overdue job's end (ahead.go):
// it sees the free nodes over time from 1 s on, so a pending job's fit
// there flips a second before it does in the walk from now. Job 1 is past
// its limit; at 64 s the walk from its end at 1 s fits job 8 (510 s)
// before the step at 575 - 64 - 1 = 510 s, and the pilots in the way are
// released before the end.
func TestSteadyEndsWhereTheWalkAheadFitsAJob(t *testing.T) {
	const inJSON = `{"Snapshot":{"now":1700000000,"total_nodes":32,"idle_nodes":22,"max_time_s":129600,"demand":{"pending_tasks":32,"running_tasks":9,"slots_per_node":1},"jobs":[{"id":"5","user":"harvest","state":"running","nodes":1,"time_limit_s":6305,"run_time_s":3716,"pilot":true,"preemptible":true},{"id":"3","user":"harvest","state":"running","nodes":1,"time_limit_s":12006,"run_time_s":3306,"pilot":true},{"id":"2","user":"u2","state":"running","nodes":5,"time_limit_s":3305,"run_time_s":2730},{"id":"1","user":"u1","state":"running","nodes":1,"time_limit_s":5761,"run_time_s":5867},{"id":"4","user":"harvest","state":"running","nodes":1,"time_limit_s":5547,"run_time_s":1100,"pilot":true},{"id":"6","user":"harvest","state":"running","nodes":1,"time_limit_s":null,"run_time_s":28424,"pilot":true,"busy":true},{"id":"7","user":"u7","state":"pending","nodes":34,"time_limit_s":10545},{"id":"8","user":"u8","state":"pending","nodes":5,"time_limit_s":510,"expected_start":1700001217},{"id":"9","user":"u9","state":"pending","nodes":26,"time_limit_s":10341,"expected_start":1700006208},{"id":"10","user":"u10","state":"pending","nodes":6,"time_limit_s":10051,"expected_start":1699999682},{"id":"11","user":"u11","state":"pending","nodes":20,"time_limit_s":10460,"expected_start":1700010933},{"id":"12","user":"u12","state":"pending","nodes":15,"time_limit_s":5027,"expected_start":1699999642}]},"Recommended":6}`
	const cfgJSON = `{"min_nodes":0,"max_nodes":0,"mini_time_s":168,"margin_s":266,"granularity_s":300,"max_pilot_limit_s":20130,"harvest_while_idle":false,"use_expected_start":true,"recommendation":{"few_tasks":5,"few_nodes":2,"some_tasks":20,"some_nodes":4,"many_tasks":100,"tasks_per_node":20,"base":3,"many_nodes":10},"preemption":true,"shrink":true,"shrink_margin_s":11,"idle_margin":2}`
	var in Input
	var cfg Config
	if err := json.Unmarshal([]byte(inJSON), &in); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal([]byte(cfgJSON), &cfg); err != nil {
		t.Fatal(err)
	}
	d := Decide(in, cfg)
	if d2 := Decide(later(in, 63), cfg); !same(d, d2) {
		t.Fatalf("63 s later: %s (%s), was %s", d2.Case, d2.Reason, d.Case)
	}
	if d2 := Decide(later(in, 64), cfg); same(d, d2) || d2.Case != CaseReleaseBeforeEnd {
		t.Fatalf("64 s later: %s (%s), want %s: the fixture no longer shows the boundary", d2.Case, d2.Reason, CaseReleaseBeforeEnd)
	}
	if st := Steady(in, cfg); st != 64 {
		t.Errorf("Steady = %d s, want 64 (the decision changes 64 s later)", st)
	}
}
