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
