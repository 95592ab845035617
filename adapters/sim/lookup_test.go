package sim

import (
	"context"
	"testing"

	"github.com/harvest-hpc/harvest/adapters"
	"github.com/harvest-hpc/harvest/cluster"
)

// Pilots are found by the seq their id names, other jobs by byID: a
// foreign job named like a pilot keeps ids unique both ways, and cancels
// reach the right job.
func TestPilotIDsStayUniqueAndFound(t *testing.T) {
	ctx := context.Background()
	c := newCluster(t, 4, 0)
	// Job 1 is named "pilot-2", the id the next pilot (seq 2) would get.
	named := mustAdd(t, c, JobSpec{Name: "pilot-2", Nodes: 1, TimeLimit: 1000, RunTime: 1000, Submit: 5})
	p, err := c.Submit(ctx, adapters.PilotSpec{TimeLimit: 600, Command: []string{"x"}})
	if err != nil {
		t.Fatal(err)
	}
	if named != "pilot-2" || p == "pilot-2" {
		t.Fatalf("foreign %q, pilot %q: want the pilot's id made unique", named, p)
	}
	q, err := c.Submit(ctx, adapters.PilotSpec{TimeLimit: 600, Command: []string{"x"}})
	if err != nil {
		t.Fatal(err)
	}
	if q != "pilot-3" {
		t.Fatalf("third job's id %q, want pilot-3", q)
	}
	// A foreign job named like the running pilot 3 gets a suffix.
	if id := mustAdd(t, c, JobSpec{Name: "pilot-3", Nodes: 1, TimeLimit: 10, RunTime: 10, Submit: 5}); id == "pilot-3" {
		t.Fatalf("foreign job took the live pilot's id %q", id)
	}
	if err := c.Cancel(ctx, "pilot-2"); err == nil {
		t.Fatal("cancelling the foreign job pilot-2 succeeded, want ErrNotPilot")
	}
	if err := c.AdvanceTo(1); err != nil {
		t.Fatal(err)
	}
	for _, id := range []adapters.PilotID{p, q} {
		if j := c.lookup(string(id)); j == nil || j.state != stRunning {
			t.Fatalf("pilot %s not found running", id)
		}
		if err := c.Cancel(ctx, id); err != nil {
			t.Fatal(err)
		}
		if j := c.lookup(string(id)); j != nil && j.state != stDone {
			t.Fatalf("pilot %s still %v after cancel", id, j.state)
		}
	}
	for _, id := range []string{"pilot-0", "pilot-03", "pilot-99", "pilot-x"} {
		if c.lookup(id) != nil {
			t.Errorf("lookup(%q) found a job", id)
		}
	}
}

// Demand's map, built at its first call mid-run and kept from then on,
// names exactly the pilots the snapshots mark busy.
func TestDemandBusyMapBuiltLate(t *testing.T) {
	ctx := context.Background()
	c := newCluster(t, 6, 0)
	c.ShowBusy()
	if err := c.AddWork(Work{ID: "w", NodeSeconds: 300, TaskSeconds: 100}); err != nil {
		t.Fatal(err)
	}
	for range 5 {
		if _, err := c.Submit(ctx, adapters.PilotSpec{TimeLimit: cluster.Unlimited, Command: []string{"x"}}); err != nil {
			t.Fatal(err)
		}
	}
	check := func(at int64, want int) {
		t.Helper()
		if err := c.AdvanceTo(at); err != nil {
			t.Fatal(err)
		}
		_, busy := c.Demand()
		s, err := c.Snapshot(ctx)
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, j := range s.Jobs {
			if j.Busy != busy[j.ID] {
				t.Errorf("t=%d: %s busy %v in the snapshot, %v in Demand", at, j.ID, j.Busy, busy[j.ID])
			}
			if j.Busy {
				n++
			}
		}
		if n != want {
			t.Errorf("t=%d: %d pilots busy, want %d", at, n, want)
		}
		if n != len(busy) {
			t.Errorf("t=%d: %d busy in the snapshot, %d in Demand's map", at, n, len(busy))
		}
	}
	check(50, 3)  // three pilots busy when the map is first built
	check(150, 0) // their tasks done: kept up to date since
	check(1000, 0)
}
