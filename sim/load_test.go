package sim

import (
	"context"
	"math"
	"testing"
)

func TestWarmStartRunsWhatTheTraceShowsRunningAndQueued(t *testing.T) {
	// 4 nodes, window from 1000. Before it: r runs 3 nodes 900..1500
	// (recorded wait 0), q (2 nodes) was submitted at 950 and started at
	// 1500 in the trace, d ended at 990. In the window: w (1 node) at
	// 1000 fits beside r at once; v (2 nodes) at 1010 queues behind q.
	w := Workload{Format: "swf", Jobs: []Job{
		{ID: "d", Nodes: 4, TimeLimit: 100, RunTime: 90, Submit: 800, Wait: 100},
		{ID: "r", Nodes: 3, TimeLimit: 600, RunTime: 600, Submit: 900, Wait: 0},
		{ID: "q", Nodes: 2, TimeLimit: 300, RunTime: 300, Submit: 950, Wait: 550},
		{ID: "w", Nodes: 1, TimeLimit: 100, RunTime: 100, Submit: 1000, Wait: 0},
		{ID: "v", Nodes: 2, TimeLimit: 100, RunTime: 100, Submit: 1010, Wait: 790},
	}}
	run := func(warm bool) (map[string]int64, Result) {
		cfg := DefaultConfig()
		cfg.Mode, cfg.Nodes, cfg.From, cfg.To, cfg.Warm = Baseline, 4, 1000, 3000, warm
		res, err := Run(context.Background(), w, cfg)
		if err != nil {
			t.Fatal(err)
		}
		s := map[string]int64{}
		for _, r := range res.Records {
			s[r.Name] = r.Start
		}
		return s, res
	}
	s, res := run(true)
	// r holds 3 nodes until 1500: q (2) and v (2) wait for it and then
	// start together, q first in the queue; d is not replayed.
	if _, replayed := s["d"]; replayed || s["r"] != 900 || s["w"] != 1000 || s["q"] != 1500 || s["v"] != 1500 {
		t.Fatalf("warm starts %v", s)
	}
	if res.Foreign.Jobs != 2 || res.Foreign.MaxWaitS != 490 {
		t.Fatalf("foreign %+v: only w and v are the window's jobs", res.Foreign)
	}
	if rc := res.Foreign.Recorded; rc == nil || rc.Jobs != 2 || rc.MeanWaitS != 395 || rc.SimMeanWaitS != 245 {
		t.Fatalf("recorded %+v", res.Foreign.Recorded)
	}
	cold, _ := run(false)
	if cold["w"] != 1000 || cold["v"] != 1010 {
		t.Fatalf("cold starts %v: the cluster is empty at from", cold)
	}
}

func TestProcsPerNodeRoundsUp(t *testing.T) {
	w := Workload{Format: "swf", Jobs: []Job{{ID: "a", Nodes: 10, TimeLimit: 100, RunTime: 100, Submit: 0, Wait: -1}}}
	cfg := DefaultConfig()
	cfg.Mode, cfg.Nodes, cfg.ProcsPerNode, cfg.To = Baseline, 4, 4, 1000
	res, err := Run(context.Background(), w, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if r := res.Records[0]; r.Nodes != 3 || r.Start != 0 {
		t.Fatalf("10 processors at 4 a node: %+v, want 3 nodes", r)
	}
}

func TestCorrelations(t *testing.T) {
	xs := []float64{1, 2, 3, 4, 100}
	ys := []float64{2, 4, 6, 8, 10}
	if p := pearson(xs, xs); math.Abs(p-1) > 1e-12 {
		t.Errorf("pearson(x, x) = %v", p)
	}
	if s := pearson(ranks(xs), ranks(ys)); math.Abs(s-1) > 1e-12 {
		t.Errorf("spearman of a monotone pair = %v, want 1", s)
	}
	if p := pearson(xs, ys); p > 0.8 {
		t.Errorf("pearson %v: one outlier should pull it well below the rank correlation", p)
	}
	if r := ranks([]float64{5, 1, 5, 3}); r[0] != 3.5 || r[1] != 1 || r[2] != 3.5 || r[3] != 2 {
		t.Errorf("ranks with a tie %v", r)
	}
	if p := pearson([]float64{1, 1}, []float64{2, 3}); p != 0 {
		t.Errorf("no spread: %v", p)
	}
}
