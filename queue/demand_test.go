package queue_test

import (
	"context"
	"testing"

	"github.com/harvest-hpc/harvest/pilotproto"
	"github.com/harvest-hpc/harvest/queue/api"
	"github.com/harvest-hpc/harvest/queue/queuetest"
)

// Issue 35 item 9: the backlog the agent sizes pilots by counted every
// waiting task, quotas ignored: carol capped at 4 cores with 31 waiting
// tasks held 6 pilot nodes round after round. The demand is now what a
// pull would hand out: up to her free cores, none once she is at her cap,
// and other users' tasks up to theirs.
func TestTheDemandIsWhatTheQueueWouldHandOut(t *testing.T) {
	e := queuetest.New(t)
	ctx := context.Background()
	four, two := 4, 2
	if _, err := e.Q.SetUser(ctx, "carol", api.UserSettings{MaxCores: &four, Create: true}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.Q.Submit(ctx, "carol", api.JobSpec{Dataset: e.Dataset("c", 31), Command: []string{"p"}, BatchSize: 1}); err != nil {
		t.Fatal(err)
	}
	demand := func() int {
		t.Helper()
		p, err := e.Q.AgentRound(ctx, e.Q.LocalSite(), api.AgentRound{})
		if err != nil {
			t.Fatal(err)
		}
		return p.PendingTasks
	}
	if got := demand(); got != 4 {
		t.Fatalf("demand with carol's 31 tasks under a 4-core cap: %d, want 4", got)
	}
	if _, err := e.Q.Lease(ctx, pilotproto.LeaseRequest{PilotID: "m"}); err != nil {
		t.Fatal(err)
	}
	r, err := e.Q.Pull(ctx, pilotproto.PullRequest{Epoch: 1, Max: 100})
	if err != nil || len(r.Tasks) != 4 {
		t.Fatalf("pull: %d tasks, %v; want carol's 4", len(r.Tasks), err)
	}
	if got := demand(); got != 0 {
		t.Fatalf("demand with carol at her cap: %d, want 0 (27 tasks wait, none can be handed out)", got)
	}
	// Dave's 2-core tasks under his 5-core cap: 3 of them start (a pull
	// hands out while his running cores are under the cap).
	five := 5
	if _, err := e.Q.SetUser(ctx, "dave", api.UserSettings{MaxCores: &five, Create: true}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.Q.Submit(ctx, "dave", api.JobSpec{Dataset: e.Dataset("d", 10), Command: []string{"p"}, BatchSize: 1, Cores: &two}); err != nil {
		t.Fatal(err)
	}
	if got := demand(); got != 3 {
		t.Fatalf("demand with dave's 10 two-core tasks under a 5-core cap: %d, want 3", got)
	}
	r, err = e.Q.Pull(ctx, pilotproto.PullRequest{Epoch: 1, Max: 100})
	if err != nil || len(r.Tasks) != 3 {
		t.Fatalf("pull: %d tasks, %v; want the 3 the demand announced", len(r.Tasks), err)
	}
}
