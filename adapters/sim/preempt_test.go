package sim

import (
	"context"
	"testing"

	"github.com/harvest-hpc/harvest/adapters"
	"github.com/harvest-hpc/harvest/cluster"
)

// A job that preempts pilots starts, as in SLURM, at the pass after the
// one that preempted them (select_nodes answers ESLURM_NODES_BUSY while
// the preemptees go): the pilots end at the preempting pass, the job one
// reaction latency later, and no pilot of the preemptible tier takes the
// nodes back in between. With no latency both happen in the same second.
func TestAJobThatPreemptsStartsAtTheNextPass(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		latency                                int64
		wantPilotEnd, wantStart, wantLateStart int64
	}{
		{latency: 2, wantPilotEnd: 12, wantStart: 14, wantLateStart: 36},
		{latency: 0, wantPilotEnd: 10, wantStart: 10, wantLateStart: 30},
	} {
		cfg := DefaultConfig()
		cfg.Nodes, cfg.Latency, cfg.Preemption = 4, tc.latency, true
		c, err := New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		submit := func() string {
			id, err := c.Submit(ctx, adapters.PilotSpec{TimeLimit: cluster.Unlimited, Preemptible: true, Command: []string{"harvest", "pilot"}})
			if err != nil {
				t.Fatal(err)
			}
			return string(id)
		}
		var first []string
		for range 4 {
			first = append(first, submit())
		}
		_ = c.AdvanceTo(5)
		late := submit() // no idle node: pending behind the foreign job
		_ = c.AdvanceTo(10)
		if _, err := c.AddJob(JobSpec{Name: "f", Nodes: 3, TimeLimit: 100, RunTime: 20, Submit: 10}); err != nil {
			t.Fatal(err)
		}
		_ = c.AdvanceTo(200)
		byID := map[string]Record{}
		var f Record
		for _, r := range c.Records() {
			byID[r.ID] = r
			if r.Name == "f" {
				f = r
			}
		}
		preempted := 0
		for _, id := range first {
			if r := byID[id]; r.Preempted {
				preempted++
				if r.End != tc.wantPilotEnd {
					t.Errorf("latency %d: preempted pilot ended at %d, want %d (the preempting pass)", tc.latency, r.End, tc.wantPilotEnd)
				}
			}
		}
		if preempted != 3 {
			t.Errorf("latency %d: %d pilots preempted, want 3 (newest first, as many as the job needs)", tc.latency, preempted)
		}
		if f.Start != tc.wantStart {
			t.Errorf("latency %d: the job that preempted started at %d, want %d (the next pass)", tc.latency, f.Start, tc.wantStart)
		}
		if r := byID[late]; r.Start != tc.wantLateStart || r.Preempted {
			t.Errorf("latency %d: the pilot queued behind started at %d (preempted %v), want %d: after the job, not in its nodes",
				tc.latency, r.Start, r.Preempted, tc.wantLateStart)
		}
	}
}
