package sim

import "testing"

// LatencyAt replaces the fixed latency change by change: a replay feeds
// the real scheduler's reaction at each event (package replay).
func TestLatencyAtSetsEachPassesLatency(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Nodes, cfg.Latency = 2, 5 // LatencyAt wins over Latency
	cfg.LatencyAt = func(t int64) int64 {
		if t >= 10 {
			return 2
		}
		return -1 // read as 0
	}
	c, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	a := mustAdd(t, c, JobSpec{Name: "a", Nodes: 2, TimeLimit: 60, RunTime: 4, Submit: 3})
	b := mustAdd(t, c, JobSpec{Name: "b", Nodes: 2, TimeLimit: 60, RunTime: 4, Submit: 12})
	if err := c.AdvanceTo(100); err != nil {
		t.Fatal(err)
	}
	want := map[string]int64{a: 3, b: 14}
	for _, r := range c.Records() {
		if r.Start != want[r.ID] {
			t.Errorf("%s started at %d, want %d", r.Name, r.Start, want[r.ID])
		}
	}
}
