package replay

import (
	"strings"
	"testing"

	"github.com/harvest-hpc/harvest/cluster"
	"github.com/harvest-hpc/harvest/sim"
)

func TestMapScalesNodesTimesAndLimits(t *testing.T) {
	w := sim.Workload{Format: "swf", MaxNodes: 100, Jobs: []sim.Job{
		{ID: "early", Nodes: 1, TimeLimit: 3600, RunTime: 60, Submit: 900, User: "u1"},
		{ID: "a", Nodes: 1, TimeLimit: 3600, RunTime: 1800, Submit: 1000, User: "u1"},
		{ID: "b", Nodes: 64, TimeLimit: 600, RunTime: 900, Submit: 1060, User: "u2"},
		{ID: "c", Nodes: 100, TimeLimit: cluster.Unlimited, RunTime: 20, Submit: 4599, User: "u3"},
		{ID: "d", Nodes: 128, TimeLimit: 600, RunTime: 60, Submit: 2000, User: "u1"},
		{ID: "late", Nodes: 1, TimeLimit: 600, RunTime: 60, Submit: 4600, User: "u1"},
	}}
	p, err := Map(w, MapConfig{From: 1000, To: 4600, Nodes: 16, Scale: 60, Users: []string{"alice", "bob"}})
	if err != nil {
		t.Fatal(err)
	}
	want := []Job{
		// 1 processor of 100 -> 1 of 16 nodes; 30 min -> 30 s; 1 h -> 1 min.
		{ID: "a", TraceUser: "u1", User: "alice", Nodes: 1, SubmitS: 0, RunS: 30, LimitMin: 1},
		// 64 of 100 -> ceil(10.24) = 11; ran past its 10-minute limit:
		// runs until it (10 s), whose whole minute is 1.
		{ID: "b", TraceUser: "u2", User: "bob", Nodes: 11, SubmitS: 1, RunS: 10, LimitMin: 1},
		// The whole machine; unlimited; 20 s -> at least 1 s.
		{ID: "c", TraceUser: "u3", User: "alice", Nodes: 16, SubmitS: 60, RunS: 1, LimitMin: 0},
	}
	if len(p.Jobs) != len(want) {
		t.Fatalf("jobs %+v", p.Jobs)
	}
	for i := range want {
		if p.Jobs[i] != want[i] {
			t.Errorf("job %d = %+v, want %+v", i, p.Jobs[i], want[i])
		}
	}
	if p.Skipped["jobs wider than the traced machine"] != 1 || p.SpanS != 60 {
		t.Errorf("skipped %v span %d", p.Skipped, p.SpanS)
	}
	if j := p.Scaled.Jobs[1]; j.Nodes != 11 || j.TimeLimit != 60 || j.RunTime != 10 || j.Submit != 1 || !p.Scaled.Jobs[2].TimeLimit.IsUnlimited() {
		t.Errorf("scaled workload %+v", p.Scaled.Jobs)
	}
	// 1x30 + 11x10 + 16x1 node-s over 16 nodes x 60 s.
	if got := p.OfferedLoad(16); got != 156.0/960 {
		t.Errorf("offered load %v", got)
	}
	for _, bad := range []MapConfig{
		{From: 10, To: 10, Nodes: 16, Scale: 60, Users: []string{"a"}},
		{From: 0, To: 10, Nodes: 0, Scale: 60, Users: []string{"a"}},
		{From: 0, To: 10, Nodes: 16, Scale: 0.5, Users: []string{"a"}},
		{From: 0, To: 10, Nodes: 16, Scale: 60},
	} {
		if _, err := Map(w, bad); err == nil {
			t.Errorf("%+v accepted", bad)
		}
	}
	// Without a header the widest job stands for the machine, and the
	// plan says so.
	widest := 0
	for _, j := range w.Jobs {
		widest = max(widest, j.Nodes)
	}
	p, err = Map(sim.Workload{Jobs: w.Jobs}, MapConfig{From: 1000, To: 4600, Nodes: 16, Scale: 60, Users: []string{"a"}})
	if err != nil || p.TraceNodes != widest || !strings.Contains(p.TraceNodesFrom, "neither MaxNodes nor MaxProcs") {
		t.Errorf("no header: trace nodes %d from %q, err %v; want the widest job's %d and a message", p.TraceNodes, p.TraceNodesFrom, err, widest)
	}
}

func TestTraceNodesPrefersProcessorsThenNodesOfTheHeader(t *testing.T) {
	for _, tc := range []struct {
		h     sim.Header
		given int
		want  int
	}{
		{sim.Header{MaxNodes: 128, MaxProcs: 1024}, 0, 1024},
		{sim.Header{MaxNodes: 338}, 0, 338},
		{sim.Header{MaxNodes: 338, MaxProcs: 338}, 16, 16},
	} {
		if n, from := TraceNodes(sim.Workload{Header: tc.h}, tc.given); n != tc.want {
			t.Errorf("%+v, --trace-nodes %d: %d (%s), want %d", tc.h, tc.given, n, from, tc.want)
		}
	}
}
