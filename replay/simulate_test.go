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
	base, err := simulate(context.Background(), p, Baseline, cfg, p.SpanS)
	if err != nil || len(base.Capacity) != 0 {
		t.Fatalf("baseline: %d capacity points, %v; want none", len(base.Capacity), err)
	}
	for _, k := range []Kind{Polling, Preemption} {
		res, err := simulate(context.Background(), p, k, cfg, p.SpanS)
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
