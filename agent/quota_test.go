package agent

import (
	"context"
	"testing"

	"github.com/harvest-hpc/harvest/adapters/adaptertest"
	"github.com/harvest-hpc/harvest/queue/api"
	"github.com/harvest-hpc/harvest/queue/queuetest"
)

// Issue 35 item 9, end to end through the real queue: carol, capped at 4
// cores, has 31 waiting tasks on an idle 8-node cluster. The agent asks
// for the pilots her quota lets the queue feed, not for every node.
func TestTheAgentSizesPilotsByWhatTheQueueCanFeed(t *testing.T) {
	e := queuetest.New(t)
	ctx := context.Background()
	four := 4
	if _, err := e.Q.SetUser(ctx, "carol", api.UserSettings{MaxCores: &four, Create: true}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.Q.Submit(ctx, "carol", api.JobSpec{Dataset: e.Dataset("c", 31), Command: []string{"p"}, BatchSize: 1}); err != nil {
		t.Fatal(err)
	}
	site := e.Q.LocalSite()
	src := SiteDemand{Round: func(ctx context.Context, r api.AgentRound) (api.AgentPlan, error) {
		return e.Q.AgentRound(ctx, site, r)
	}}
	m := adaptertest.NewMemory(8)
	r := NewReconciler(m, src, testConfig(), nil)
	res, err := r.Round(ctx)
	if err != nil {
		t.Fatal(err)
	}
	plan, _ := e.Q.AgentRound(ctx, site, api.AgentRound{})
	slots := max(plan.SlotsPerNode, 1)
	want := (4 + slots - 1) / slots
	if len(res.Submitted) != want {
		t.Errorf("submitted %d pilots for carol's 4 cores of work (%d slots a node), want %d: %s", len(res.Submitted), slots, want, res.Decision.Reason)
	}
}
