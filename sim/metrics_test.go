package sim

import (
	"math"
	"testing"
)

func TestSlowdownNUWTAndFairnessOnHandComputedJobs(t *testing.T) {
	var f tally
	// alice: waits 100 s for a 2-node 100 s job (BSLD 2) and 0 s for a
	// 5 s job (BSLD max(1, 5/10) = 1). NUWT = 100 / (200 + 5) .
	f.add("alice", 100, 100, 2, 1)
	f.add("alice", 0, 5, 1, 1)
	// bob: waits 45 s for a 5 s one-node job: BSLD (45+5)/10 = 5.
	// NUWT = 45 / 5 = 9.
	f.add("bob", 45, 5, 1, 1)
	sd := f.slowdown()
	if sd.Jobs != 3 || sd.Mean != (2+1+5)/3.0 || sd.Max != 5 {
		t.Errorf("slowdown %+v, want 3 jobs, mean 8/3, max 5", sd)
	}
	u := f.users()
	a, b := 100.0/205, 9.0
	mean := (a + b) / 2
	if u.Count != 2 || u.NUWT["alice"] != a || u.NUWT["bob"] != b || math.Abs(u.MeanNUWT-mean) > 1e-12 ||
		math.Abs(u.Fairness-((mean-a)*(mean-a)+(mean-b)*(mean-b))) > 1e-9 {
		t.Errorf("users %+v, want NUWT alice %.4f bob %.1f, F %.4f", u, a, b, (mean-a)*(mean-a)+(mean-b)*(mean-b))
	}
}

func TestEqualWaitsForEqualWorkAreFair(t *testing.T) {
	var f tally
	for _, user := range []string{"a", "b", "c"} {
		f.add(user, 60, 600, 4, 1)
	}
	// Many tasks summed at once count like single jobs.
	f.addMany("d", 10, 10*60, 10*2400, 10*1.1, 1.1)
	if u := f.users(); u.Count != 4 || u.Fairness != 0 || u.MeanNUWT != 60.0/2400 {
		t.Errorf("users %+v, want F = 0 and NUWT 0.025 each", u)
	}
	var none tally
	if u, s := none.users(), none.slowdown(); u.Count != 0 || u.Fairness != 0 || s.Jobs != 0 || s.Mean != 0 {
		t.Errorf("no jobs: %+v %+v", u, s)
	}
}
