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
	base, err := simulate(context.Background(), p, Baseline, cfg, p.SpanS, 0, 0, nil)
	if err != nil || len(base.Capacity) != 0 {
		t.Fatalf("baseline: %d capacity points, %v; want none", len(base.Capacity), err)
	}
	for _, k := range []Kind{Polling, Preemption} {
		res, err := simulate(context.Background(), p, k, cfg, p.SpanS, 0, 0, nil)
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
		all, err := simulate(context.Background(), p, k, cfg, span, 0, 0, nil)
		if err != nil {
			t.Fatal(err)
		}
		cut, err := simulate(context.Background(), p, k, cfg, span, stop, 0, nil)
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

// A harvest run with a lead (RunConfig.Lead) is simulated with the
// harvest started as long before the window: the window opens on the
// whole pool, and the result is in the window's times as the real run's
// (foreign jobs at their plan submits, the lead's pilot times at 0).
func TestSimulateStartsTheHarvestTheLeadBeforeTheWindow(t *testing.T) {
	w := lightTrace(1, 5)
	cfg := Config{Map: MapConfig{From: 0, To: w.Jobs[len(w.Jobs)-1].Submit + 1, Nodes: 8, Scale: 1, Users: []string{"alice", "bob"}},
		SimLatency: 1, SimReservations: 1000,
		Run: RunConfig{Poll: 2 * time.Second, Margin: 30 * time.Second, MiniTime: 10 * time.Second, TaskSeconds: 3}}
	p, err := Map(w, cfg.Map)
	if err != nil {
		t.Fatal(err)
	}
	const span, stop, lead = 175, 166, 30
	base, err := simulate(context.Background(), p, Baseline, cfg, span, 0, lead, nil)
	if err != nil {
		t.Fatal(err)
	}
	if base0, _ := simulate(context.Background(), p, Baseline, cfg, span, 0, 0, nil); base0.Utilization != base.Utilization {
		t.Errorf("baseline: utilisation %.4f with a lead, %.4f without: it has no harvest to start", base.Utilization, base0.Utilization)
	}
	for _, k := range []Kind{Polling, Preemption} {
		cold, err := simulate(context.Background(), p, k, cfg, span, stop, 0, nil)
		if err != nil {
			t.Fatal(err)
		}
		warm, err := simulate(context.Background(), p, k, cfg, span, stop, lead, nil)
		if err != nil {
			t.Fatal(err)
		}
		if warm.From != 0 || warm.SpanS != span {
			t.Errorf("%s: from %d span %d, want 0 and %d", k, warm.From, warm.SpanS, span)
		}
		if n := pilotsAt(warm, 0); n != 8 {
			t.Errorf("%s: %d pilots when the window opened after the lead, want 8", k, n)
		}
		submits := map[string]int64{}
		for _, j := range p.Jobs {
			submits[j.ID] = j.SubmitS
		}
		for _, r := range warm.Records {
			if !r.Pilot && r.Submit != submits[r.Name] {
				t.Errorf("%s: job %s submitted at %d, the plan's %d", k, r.Name, r.Submit, submits[r.Name])
			}
			if r.Submit < 0 || r.Start < -1 || r.End < -1 || r.Start >= 0 && r.Start > stop {
				t.Errorf("%s: record %s at %d-%d-%d", k, r.Name, r.Submit, r.Start, r.End)
			}
		}
		// The pool's growth (4 pilots, 8 some seconds later) is in the
		// lead: about 4 pilots x 9 s more of the window used.
		if d := warm.Utilization - cold.Utilization; d < 0.01 {
			t.Errorf("%s: utilisation %.4f with the lead, %.4f without", k, warm.Utilization, cold.Utilization)
		}
	}
}

// A run's simulation given the run's own reaction (Config.SimLatency < 0)
// takes SLURM's latency event by event: in the captured polling run SLURM
// started job 100 in the second its pilots were cancelled and job 102 a
// second after, and so does the simulation.
func TestSimulateTakesTheRealRunsReaction(t *testing.T) {
	o := loadCaptured(t)[0]
	starts, err := o.Starts()
	if err != nil || o.Kind != Polling {
		t.Fatal(o.Kind, err)
	}
	react := MeasureReaction(starts)
	w := lightTrace(1, 5)
	cfg := Config{Map: MapConfig{From: 0, To: w.Jobs[len(w.Jobs)-1].Submit + 1, Nodes: 8, Scale: 1, Users: []string{"alice", "bob"}},
		SimLatency: -1, SimReservations: 1000,
		Run: RunConfig{Poll: 2 * time.Second, Margin: 30 * time.Second, MiniTime: 10 * time.Second, TaskSeconds: 3}}
	p, err := Map(w, cfg.Map)
	if err != nil {
		t.Fatal(err)
	}
	res, err := simulate(context.Background(), p, Polling, cfg, 166, 166, 30, &react)
	if err != nil {
		t.Fatal(err)
	}
	// The pilots' last end before each foreign start, on the 5 nodes it
	// took (the 8 nodes are all pilots' otherwise).
	gap := func(job string) int64 {
		var start, freed int64 = -1, -1
		for _, r := range res.Records {
			if r.Name == job {
				start = r.Start
			}
		}
		for _, r := range res.Records {
			if r.Pilot && r.End >= 0 && r.End <= start {
				freed = max(freed, r.End)
			}
		}
		return start - freed
	}
	if g := gap("100"); g != 0 {
		t.Errorf("job 100 started %d s after its nodes were freed, SLURM in the same second", g)
	}
	if g := gap("102"); g != 1 {
		t.Errorf("job 102 started %d s after its nodes were freed, SLURM a second after", g)
	}
}
