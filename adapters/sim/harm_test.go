package sim

import (
	"context"
	"testing"

	"github.com/harvest-hpc/harvest/adapters"
	"github.com/harvest-hpc/harvest/cluster"
)

// blocked returns the pilot harm of every foreign job, by name.
func blocked(c *Cluster) map[string]int64 {
	out := map[string]int64{}
	for _, r := range c.Records() {
		if !r.Pilot {
			out[r.Name] = r.Blocked
		}
	}
	return out
}

func submitPilot(t *testing.T, c *Cluster, limit cluster.Limit) adapters.PilotID {
	t.Helper()
	id, err := c.Submit(context.Background(), adapters.PilotSpec{TimeLimit: limit, Command: []string{"harvest", "pilot"}})
	if err != nil {
		t.Fatal(err)
	}
	return id
}

func addJob(t *testing.T, c *Cluster, s JobSpec) {
	t.Helper()
	if _, err := c.AddJob(s); err != nil {
		t.Fatal(err)
	}
}

func advance(t *testing.T, c *Cluster, to int64) {
	t.Helper()
	if err := c.AdvanceTo(to); err != nil {
		t.Fatal(err)
	}
}

func TestPilotHarm(t *testing.T) {
	t.Run("a job waiting for a pilot's node is charged until the pilot is cancelled", func(t *testing.T) {
		c := newCluster(t, 4, 0)
		p := submitPilot(t, c, cluster.Unlimited)
		addJob(t, c, JobSpec{Name: "A", Nodes: 4, TimeLimit: 100, RunTime: 100, Submit: 10})
		advance(t, c, 30)
		if got := blocked(c)["A"]; got != 20 {
			t.Fatalf("A blocked %d s by 30, want 20 (an open charge counts up to now)", got)
		}
		advance(t, c, 50)
		if err := c.Cancel(context.Background(), p); err != nil {
			t.Fatal(err)
		}
		advance(t, c, 500)
		if got := blocked(c)["A"]; got != 40 {
			t.Fatalf("A blocked %d s, want 40 (10 to 50)", got)
		}
	})
	t.Run("a job waiting for a foreign job is not charged", func(t *testing.T) {
		c := newCluster(t, 4, 0)
		submitPilot(t, c, 60)
		addJob(t, c, JobSpec{Name: "F", Nodes: 3, TimeLimit: 100, RunTime: 100, Submit: 0})
		addJob(t, c, JobSpec{Name: "B", Nodes: 4, TimeLimit: 100, RunTime: 100, Submit: 5})
		advance(t, c, 500)
		if got := blocked(c)["B"]; got != 0 {
			t.Fatalf("B blocked %d s, want 0: F holds the nodes it needs until 100, the pilot ends at 60", got)
		}
	})
	t.Run("a charge ends when the job's backfill window closes", func(t *testing.T) {
		// F runs on 2 of 4 nodes until 100; T (4 nodes) is reserved at
		// 100. B (2 nodes, limit 50) arrives at 10: without the pilot two
		// nodes are free and B fits before T's reservation if it starts
		// by 50. The pilot (1 node, limit 60 s) leaves one free, so B
		// waits; at 60 it no longer fits before 100.
		c := newCluster(t, 4, 0)
		addJob(t, c, JobSpec{Name: "F", Nodes: 2, TimeLimit: 100, RunTime: 100, Submit: 0})
		submitPilot(t, c, 60)
		addJob(t, c, JobSpec{Name: "T", Nodes: 4, TimeLimit: 100, RunTime: 100, Submit: 1})
		addJob(t, c, JobSpec{Name: "B", Nodes: 2, TimeLimit: 50, RunTime: 50, Submit: 10})
		advance(t, c, 1000)
		got := blocked(c)
		if got["B"] != 40 || got["T"] != 0 || got["F"] != 0 {
			t.Fatalf("blocked %v, want B 40 (10 to its last start at 50), T and F 0", got)
		}
	})
	t.Run("the scheduler's latency after a release counts", func(t *testing.T) {
		c := newCluster(t, 2, 7)
		p := submitPilot(t, c, cluster.Unlimited)
		addJob(t, c, JobSpec{Name: "A", Nodes: 2, TimeLimit: 100, RunTime: 100, Submit: 20})
		advance(t, c, 40)
		if err := c.Cancel(context.Background(), p); err != nil {
			t.Fatal(err)
		}
		advance(t, c, 500)
		// The pass after A's arrival runs at 27, the one after the
		// cancel at 47: A was blocked from 27 to 47.
		if got := blocked(c)["A"]; got != 20 {
			t.Fatalf("A blocked %d s, want 20", got)
		}
		for _, r := range c.Records() {
			if r.Name == "A" && r.Start != 47 {
				t.Fatalf("A started at %d, want 47", r.Start)
			}
		}
	})
	t.Run("without pilots nothing is charged and no second pass runs", func(t *testing.T) {
		c := newCluster(t, 4, 0)
		addJob(t, c, JobSpec{Name: "F", Nodes: 3, TimeLimit: 100, RunTime: 100, Submit: 0})
		addJob(t, c, JobSpec{Name: "B", Nodes: 2, TimeLimit: 100, RunTime: 100, Submit: 5})
		advance(t, c, 500)
		if got := blocked(c)["B"]; got != 0 || len(c.cfProf.times) != 0 {
			t.Fatalf("B blocked %d s (want 0); the pilotless pass ran: %v", got, c.cfProf.times)
		}
	})
}
