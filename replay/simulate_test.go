package replay

import (
	"context"
	"testing"
	"time"

	"github.com/harvest-hpc/harvest/capacity"
	"github.com/harvest-hpc/harvest/cluster"
	"github.com/harvest-hpc/harvest/sim"
)

// The harvest runs' simulation runs the master's capacity rule as the
// real pilots do (capacity.DefaultConfig: 4 pilots first), the baseline's
// none.
func TestSimulateRunsTheCapacityRuleOfThePilots(t *testing.T) {
	p := Plan{SpanS: 120, Scaled: sim.Workload{Format: "swf", MaxNodes: 16, Jobs: []sim.Job{
		{ID: "1", User: "alice", Nodes: 2, TimeLimit: cluster.Seconds(60), RunTime: 30, Wait: -1, Submit: 50}}}}
	cfg := Config{Map: MapConfig{Nodes: 16}, SimLatency: 1, SimReservations: 1000,
		Run: RunConfig{Poll: 2 * time.Second, Margin: 30 * time.Second, MiniTime: 10 * time.Second, TaskSeconds: 5}}
	base, err := simulate(context.Background(), p, Baseline, cfg, p.SpanS, 0)
	if err != nil || len(base.Capacity) != 0 {
		t.Fatalf("baseline: %d capacity points, %v; want none", len(base.Capacity), err)
	}
	for _, k := range []Kind{Polling, Preemption} {
		res, err := simulate(context.Background(), p, k, cfg, p.SpanS, 0)
		if err != nil {
			t.Fatal(err)
		}
		if len(res.Capacity) == 0 || res.Capacity[0].Cap != capacity.DefaultConfig().InitialSize {
			t.Fatalf("%s: capacity points %v, want the rule's initial %d first", k, res.Capacity[:min(3, len(res.Capacity))], capacity.DefaultConfig().InitialSize)
		}
		if res.Harvest.Pilots < capacity.DefaultConfig().InitialSize {
			t.Errorf("%s: %d pilots", k, res.Harvest.Pilots)
		}
	}
}

// A harvest run's simulation cancels its pilots at the second the real
// run cancelled its own (its last foreign job ended before the span's
// end, which is the last end of every run): no simulated pilot holds a
// node after it, and the utilisation counts none.
func TestSimulateStopsTheHarvestWhenTheRealRunDid(t *testing.T) {
	w := lightTrace(1, 5)
	cfg := Config{Map: MapConfig{From: 0, To: w.Jobs[len(w.Jobs)-1].Submit + 1, Nodes: 8, Scale: 1, Users: []string{"alice", "bob"}},
		SimLatency: 1, SimReservations: 1000,
		Run: RunConfig{Poll: 2 * time.Second, Margin: 30 * time.Second, MiniTime: 10 * time.Second, TaskSeconds: 3}}
	p, err := Map(w, cfg.Map)
	if err != nil {
		t.Fatal(err)
	}
	const span, stop = 175, 166 // the last foreign job ends at 165
	for _, k := range []Kind{Polling, Preemption} {
		all, err := simulate(context.Background(), p, k, cfg, span, 0)
		if err != nil {
			t.Fatal(err)
		}
		cut, err := simulate(context.Background(), p, k, cfg, span, stop)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range cut.Records {
			if r.Pilot && r.Start >= 0 && (r.Start >= stop || r.End < 0 || r.End > stop) {
				t.Errorf("%s: pilot %s ran %d-%d, the run stopped at %d", k, r.ID, r.Start, r.End, stop)
			}
		}
		// 8 nodes x 8 s of pilots less over the span.
		if d := all.Utilization - cut.Utilization; d < 0.04 {
			t.Errorf("%s: utilisation %.4f with the stop, %.4f without", k, cut.Utilization, all.Utilization)
		}
	}
}
