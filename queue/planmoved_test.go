package queue_test

import (
	"context"
	"testing"

	"github.com/harvest-hpc/harvest/pilotproto"
	"github.com/harvest-hpc/harvest/queue/api"
	"github.com/harvest-hpc/harvest/queue/queuetest"
)

// The hosting agent rounds at once when the local master's cap or
// recommendation changes (a new master's first cap of 4 otherwise waited
// up to a poll while the pilots started for the whole cluster took
// tasks). Only a change wakes it: a master beats every 2 s.
func TestPlanMovedSignalsACapOrRecommendationChange(t *testing.T) {
	e := queuetest.New(t)
	ctx := context.Background()
	l, err := e.Q.Lease(ctx, pilotproto.LeaseRequest{PilotID: "p1", Address: "http://127.0.0.1:1"})
	if err != nil || !l.Granted {
		t.Fatal(l, err)
	}
	moved := func() bool {
		select {
		case <-e.Q.PlanMoved():
			return true
		default:
			return false
		}
	}
	for i, c := range []struct {
		min, cap int
		want     bool
	}{
		{2, 4, true},  // the new master's first cap
		{2, 4, false}, // the same again, a beat later
		{4, 4, true},  // more tasks: a larger recommendation
		{4, 8, true},  // the cap grows
		{4, 8, false},
	} {
		req := pilotproto.RecommendationRequest{Epoch: l.Epoch, MinNodes: c.min, MaxNodes: c.cap, SlotsPerNode: 1}
		if err := e.Q.Recommend(ctx, req); err != nil {
			t.Fatal(err)
		}
		if got := moved(); got != c.want {
			t.Fatalf("report %d (min %d, cap %d): moved %v, want %v", i, c.min, c.cap, got, c.want)
		}
	}
}

// A job arriving at a queue with none wakes the hosting agent: its round
// may have read the empty queue just before, and the first pilots then
// waited a whole poll (a replay's window opened with up to 2 s of idle
// nodes). A job arriving beside others does not: rounds would follow
// every submission of a burst.
func TestPlanMovedSignalsWorkArrivingAtAnIdleQueue(t *testing.T) {
	e := queuetest.New(t)
	ctx := context.Background()
	moved := func() bool {
		select {
		case <-e.Q.PlanMoved():
			return true
		default:
			return false
		}
	}
	if moved() {
		t.Fatal("a token before any job")
	}
	spec := api.JobSpec{Dataset: e.Dataset("first", 3), Command: []string{"p"}, BatchSize: 1}
	if _, err := e.Q.Submit(ctx, "alice", spec); err != nil {
		t.Fatal(err)
	}
	if !moved() {
		t.Fatal("the first job did not wake the agent")
	}
	spec.Dataset = e.Dataset("second", 3)
	if _, err := e.Q.Submit(ctx, "bob", spec); err != nil {
		t.Fatal(err)
	}
	if moved() {
		t.Fatal("a job beside a waiting one woke the agent")
	}
}
