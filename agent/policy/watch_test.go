package policy

import (
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/harvest-hpc/harvest/cluster"
)

// TestWatch: the agent polls fast exactly while one running job's end (or
// none) and the releasable pilots together let a waiting job start and
// the end alone does not.
func TestWatch(t *testing.T) {
	floor := func(s cluster.Snapshot) cluster.Snapshot { s.MinNodes = 2; return s }
	tests := []struct {
		name string
		snap cluster.Snapshot
		want bool
	}{
		{"nobody waits: the long poll", snap(10, 0, jobs(
			[]cluster.Job{running("1", 6, hour, minute)},
			pilots("p", 4, hour, minute))...), false},
		{"a 5-node job waits on a 6-node job's end: that end alone starts it, the pilots do not matter", snap(10, 0, jobs(
			[]cluster.Job{running("1", 6, hour, minute), pending("2", 5, hour)},
			pilots("p", 4, hour, minute))...), false},
		{"an 8-node job needs the 6-node job's end and two pilots", snap(10, 0, jobs(
			[]cluster.Job{running("1", 6, hour, minute), pending("2", 8, hour)},
			pilots("p", 4, hour, minute))...), true},
		{"a 3-node job starts on pilots alone (this round releases them; the next should come soon)", snap(10, 0, jobs(
			[]cluster.Job{running("1", 6, hour, minute), pending("2", 3, hour)},
			pilots("p", 4, hour, minute))...), true},
		{"an 11-node job needs more than any one end and every pilot", snap(12, 0, jobs(
			[]cluster.Job{running("1", 4, hour, minute), running("2", 4, hour, minute), pending("3", 11, hour)},
			pilots("p", 4, hour, minute))...), false},
		{"one of several running jobs is the right size", snap(16, 0, jobs(
			[]cluster.Job{running("1", 2, hour, minute), running("2", 9, hour, minute), running("3", 1, hour, minute), pending("4", 12, hour)},
			pilots("p", 4, hour, minute))...), true},
		{"the floor keeps two of the pilots: the other two are too few", floor(snap(10, 0, jobs(
			[]cluster.Job{running("1", 6, hour, minute), pending("2", 9, hour)},
			pilots("p", 4, hour, minute))...)), false},
		{"the floor keeps two: the other two are enough", floor(snap(10, 0, jobs(
			[]cluster.Job{running("1", 6, hour, minute), pending("2", 8, hour)},
			pilots("p", 4, hour, minute))...)), true},
		{"preemptible pilots: the scheduler frees them itself", snap(10, 0, jobs(
			[]cluster.Job{running("1", 6, hour, minute), pending("2", 8, hour)},
			pilots("p", 4, hour, minute, preemptible))...), false},
		{"idle nodes count: 1 idle + 3 pilots + a 4-node end start an 8-node job", snap(10, 1, jobs(
			[]cluster.Job{running("1", 4, hour, minute), running("2", 2, hour, minute), pending("3", 8, hour)},
			pilots("p", 3, hour, minute))...), true},
		{"a queued pilot holds no node", snap(10, 0, jobs(
			[]cluster.Job{running("1", 6, hour, minute), running("2", 4, hour, minute), pending("3", 7, hour), queuedPilot("q", hour)})...), false},
	}
	cfg := DefaultConfig()
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := tt.snap.Validate(); err != nil {
				t.Fatal(err)
			}
			d := Decide(Input{Snapshot: tt.snap}, cfg)
			if got := Watch(tt.snap, d); got != tt.want {
				t.Errorf("Watch = %v, want %v (decision %s: %s)", got, tt.want, d.Case, d.Reason)
			}
		})
	}
	bad := snap(10, 0, pending("1", 3, hour), pending("1", 3, hour), pilot("p", hour, minute))
	if d := Decide(Input{Snapshot: bad}, cfg); d.Case != CaseInvalidInput || Watch(bad, d) {
		t.Errorf("invalid input: case %s, Watch %v; want invalid-input and false", d.Case, Watch(bad, d))
	}
}

// refWatch is Watch as first written: the running jobs' sizes sorted, a
// binary search per pending job.
func refWatch(s cluster.Snapshot, d Decision) bool {
	if d.Case == CaseInvalidInput {
		return false
	}
	pilots := 0
	var sizes []int
	for _, j := range s.Jobs {
		switch {
		case j.State != cluster.Running:
		case j.Pilot && !j.Preemptible:
			pilots += j.Nodes
		case !j.Pilot:
			sizes = append(sizes, j.Nodes)
		}
	}
	r := pilots - d.KeepNodes
	if r <= 0 {
		return false
	}
	slices.Sort(sizes)
	idle := max(d.Idle, 0)
	for _, j := range s.Jobs {
		if j.Pilot || j.State != cluster.Pending {
			continue
		}
		lo, hi := j.Nodes-idle-r, j.Nodes-idle-1
		if hi < 0 {
			continue
		}
		if lo <= 0 {
			return true
		}
		if k, _ := slices.BinarySearch(sizes, lo); k < len(sizes) && sizes[k] <= hi {
			return true
		}
	}
	return false
}

func TestWatchAgreesWithASortedSearch(t *testing.T) {
	r := rand.New(rand.NewPCG(34, 1))
	yes := 0
	for i := range 20_000 {
		in, cfg := randomInput(r)
		d := Decide(in, cfg)
		if r.IntN(3) == 0 {
			d.Idle = r.IntN(4) // other idle counts than Decide's
		}
		got, want := Watch(in.Snapshot, d), refWatch(in.Snapshot, d)
		if got != want {
			t.Fatalf("input %d: Watch = %v, the sorted search says %v", i, got, want)
		}
		if got {
			yes++
		}
	}
	if yes < 1000 || yes > 19_000 {
		t.Fatalf("Watch was true for %d of 20000 inputs: the comparison is barely tested", yes)
	}
	t.Logf("true for %d of 20000", yes)
}
