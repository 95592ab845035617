package sim

import (
	"context"
	"testing"

	"github.com/harvest-hpc/harvest/adapters"
	"github.com/harvest-hpc/harvest/cluster"
)

func coresCluster(t *testing.T, nodes, cores int) *Cluster {
	t.Helper()
	cfg := DefaultConfig()
	cfg.Nodes, cfg.CoresPerNode = nodes, cores
	c, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// where returns the nodes and cores a running job holds.
func where(t *testing.T, c *Cluster, id string) []share {
	t.Helper()
	j := c.lookup(id)
	if j == nil || j.state != stRunning {
		t.Fatalf("%s is not running", id)
	}
	return j.alloc
}

// Sub-node jobs share nodes as cons_tres places them: best fit on one node
// when one has the cores, else nodes in index order; pilots take only a
// wholly idle node, and wait while the free cores are spread over shared
// nodes; the snapshot's idle nodes are the wholly idle ones.
func TestCoresAreSharedAndPilotsTakeWholeIdleNodes(t *testing.T) {
	ctx := context.Background()
	c := coresCluster(t, 3, 4)
	a := mustAdd(t, c, JobSpec{Name: "A", Cores: 2, TimeLimit: 1000, RunTime: 1000})
	b := mustAdd(t, c, JobSpec{Name: "B", Cores: 3, TimeLimit: 5000, RunTime: 5000, Submit: 1})
	cc := mustAdd(t, c, JobSpec{Name: "C", Cores: 2, TimeLimit: 1000, RunTime: 1000, Submit: 2})
	if err := c.AdvanceTo(2); err != nil {
		t.Fatal(err)
	}
	// A on node 0 (2 left); B needs 3: node 0 has 2, so node 1 (1 left);
	// C needs 2: node 0 fits exactly (best fit), not the idle node 2.
	for id, want := range map[string]share{a: {0, 2}, b: {1, 3}, cc: {0, 2}} {
		if got := where(t, c, id); len(got) != 1 || got[0] != want {
			t.Errorf("%s on %v, want %v", id, got, want)
		}
	}
	s, err := c.Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if s.IdleNodes != 1 {
		t.Errorf("idle nodes %d, want 1 (node 2)", s.IdleNodes)
	}
	p1, err := c.Submit(ctx, adapters.PilotSpec{TimeLimit: cluster.Unlimited, Command: []string{"x"}})
	if err != nil {
		t.Fatal(err)
	}
	p2, err := c.Submit(ctx, adapters.PilotSpec{TimeLimit: cluster.Unlimited, Command: []string{"x"}})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.AdvanceTo(3); err != nil {
		t.Fatal(err)
	}
	if got := where(t, c, string(p1)); len(got) != 1 || got[0] != (share{2, 4}) {
		t.Errorf("pilot 1 on %v, want the whole node 2", got)
	}
	if j := c.lookup(string(p2)); j.state != stPending {
		t.Errorf("pilot 2 is %v with 1 core free on node 1 and no idle node, want pending", j.state)
	}
	// A wide job takes what is free in index order, across nodes.
	d := mustAdd(t, c, JobSpec{Name: "D", Cores: 1, TimeLimit: 10, RunTime: 10, Submit: 3})
	if err := c.AdvanceTo(4); err != nil {
		t.Fatal(err)
	}
	if got := where(t, c, d); len(got) != 1 || got[0] != (share{1, 1}) {
		t.Errorf("D on %v, want node 1's last core", got)
	}
	// When A and C end, node 0 is wholly idle: the pilot starts there.
	if err := c.AdvanceTo(1002); err != nil {
		t.Fatal(err)
	}
	if got := where(t, c, string(p2)); len(got) != 1 || got[0] != (share{0, 4}) {
		t.Errorf("pilot 2 on %v, want the whole node 0 once A and C ended", got)
	}
	e := mustAdd(t, c, JobSpec{Name: "E", Cores: 5, TimeLimit: 10, RunTime: 10, Submit: 1002})
	if err := c.Cancel(ctx, p1); err != nil {
		t.Fatal(err)
	}
	if err := c.AdvanceTo(1003); err != nil {
		t.Fatal(err)
	}
	if got := where(t, c, e); len(got) != 2 || got[0] != (share{1, 1}) || got[1] != (share{2, 4}) {
		t.Errorf("E (5 cores) on %v, want node 1's free core and node 2", got)
	}
	s, err = c.Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, j := range s.Jobs {
		if j.ID == e && j.Nodes != 2 {
			t.Errorf("E shows %d nodes, want 2", j.Nodes)
		}
	}
}

// With one core a node, cores are nodes: a job given as cores runs exactly
// as the same job given as whole nodes (the whole-node model).
func TestOneCoreANodeIsTheWholeNodeModel(t *testing.T) {
	jobs := []fj{
		{name: "J1", nodes: 2, limit: 100, run: 100, submit: 0},
		{name: "J2", nodes: 4, limit: 100, run: 100, submit: 1},
		{name: "J3", nodes: 2, limit: 50, run: 50, submit: 2},
		{name: "J4", nodes: 2, limit: 200, run: 10, submit: 3},
		{name: "J5", nodes: 1, limit: 400, run: 300, submit: 4},
	}
	run := func(cores bool) []Record {
		c := coresCluster(t, 4, 1)
		for _, j := range jobs {
			s := JobSpec{Name: j.name, TimeLimit: cluster.Limit(j.limit), RunTime: j.run, Submit: j.submit}
			if cores {
				s.Cores = j.nodes
			} else {
				s.Nodes = j.nodes
			}
			mustAdd(t, c, s)
		}
		if err := c.AdvanceTo(1000); err != nil {
			t.Fatal(err)
		}
		return c.Records()
	}
	nodes, cores := run(false), run(true)
	for i := range nodes {
		if nodes[i] != cores[i] {
			t.Errorf("job %d: as nodes %+v, as cores %+v", i, nodes[i], cores[i])
		}
	}
}
