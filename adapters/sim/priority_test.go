package sim

import (
	"math"
	"testing"
)

func newMultifactor(t *testing.T, nodes int, m Multifactor) *Cluster {
	t.Helper()
	cfg := DefaultConfig()
	cfg.Nodes, cfg.Multifactor = nodes, &m
	c, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func starts(c *Cluster) map[string]int64 {
	out := map[string]int64{}
	for _, r := range c.Records() {
		out[r.Name] = r.Start
	}
	return out
}

func TestMultifactorPriority(t *testing.T) {
	// alice runs on both nodes 0..1000; her second job (2 nodes) arrives
	// at 10, bob's (1 node) at 20: at 1000 one of them starts first.
	workload := func(t *testing.T, c *Cluster) {
		addJob(t, c, JobSpec{Name: "a1", User: "alice", Nodes: 2, TimeLimit: 1000, RunTime: 1000, Submit: 0})
		addJob(t, c, JobSpec{Name: "a2", User: "alice", Nodes: 2, TimeLimit: 500, RunTime: 500, Submit: 10})
		addJob(t, c, JobSpec{Name: "b1", User: "bob", Nodes: 1, TimeLimit: 500, RunTime: 500, Submit: 20})
		advance(t, c, 5000)
	}
	t.Run("FIFO runs alice's older job first", func(t *testing.T) {
		c := newCluster(t, 2, 0)
		workload(t, c)
		if s := starts(c); s["a2"] != 1000 || s["b1"] != 1500 {
			t.Fatalf("starts %v", s)
		}
	})
	t.Run("fair share runs bob first: alice has used the machine", func(t *testing.T) {
		c := newMultifactor(t, 2, Multifactor{WeightFairshare: 1000, MaxAge: 86400, HalfLife: 86400})
		workload(t, c)
		if s := starts(c); s["b1"] != 1000 || s["a2"] != 1500 {
			t.Fatalf("starts %v", s)
		}
	})
	t.Run("job size runs the wider job first", func(t *testing.T) {
		for _, m := range []*Multifactor{nil, {WeightSize: 1000, MaxAge: 86400, HalfLife: 86400}} {
			cfg := DefaultConfig()
			cfg.Nodes, cfg.Multifactor = 2, m
			c, err := New(cfg)
			if err != nil {
				t.Fatal(err)
			}
			addJob(t, c, JobSpec{Name: "a1", User: "alice", Nodes: 2, TimeLimit: 1000, RunTime: 1000, Submit: 0})
			addJob(t, c, JobSpec{Name: "x", User: "alice", Nodes: 1, TimeLimit: 500, RunTime: 500, Submit: 10})
			addJob(t, c, JobSpec{Name: "y", User: "alice", Nodes: 2, TimeLimit: 500, RunTime: 500, Submit: 20})
			advance(t, c, 5000)
			s := starts(c)
			if m == nil && (s["x"] != 1000 || s["y"] != 1500) || m != nil && (s["y"] != 1000 || s["x"] != 1500) {
				t.Fatalf("multifactor %v: starts %v", m != nil, s)
			}
		}
	})
	t.Run("age alone is FIFO", func(t *testing.T) {
		c := newMultifactor(t, 2, Multifactor{WeightAge: 1000, MaxAge: 86400, HalfLife: 86400})
		workload(t, c)
		if s := starts(c); s["a2"] != 1000 || s["b1"] != 1500 {
			t.Fatalf("starts %v", s)
		}
	})
	t.Run("usage decays with the half-life", func(t *testing.T) {
		u := usage{holding: 2}
		u.charge(3600, 3600)
		// 2 nodes for one half-life: 2 x 3600 / ln 2 x (1 - 1/2).
		if want := 2 * 3600 / math.Ln2 * 0.5; math.Abs(u.used-want) > 1e-6 {
			t.Fatalf("used %.3f, want %.3f", u.used, want)
		}
		u.holding = 0
		u.charge(7200, 3600)
		if want := 3600 / math.Ln2 * 0.5; math.Abs(u.used-want) > 1e-6 {
			t.Fatalf("after another half-life idle: used %.3f, want %.3f", u.used, want)
		}
	})
}
