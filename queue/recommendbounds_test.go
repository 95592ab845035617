package queue_test

import (
	"context"
	"errors"
	"testing"

	"github.com/harvest-hpc/harvest/pilotproto"
	"github.com/harvest-hpc/harvest/queue/api"
	"github.com/harvest-hpc/harvest/queue/queuetest"
)

// A master's recommendation had a floor but no ceiling: min_nodes of a
// billion was kept and, with no admin cap, became the agent's MiniNode,
// a floor no foreign job could ever get a pilot released under. Node
// figures above api.MaxNodes (the admin's own bound) are refused, and the
// recommendation in force stays.
func TestARecommendationBeyondAnyClusterIsRefused(t *testing.T) {
	e := queuetest.New(t)
	ctx := context.Background()
	l, err := e.Q.Lease(ctx, pilotproto.LeaseRequest{PilotID: "p1", Address: "http://127.0.0.1:1"})
	if err != nil || !l.Granted {
		t.Fatal(l, err)
	}
	if err := e.Q.Recommend(ctx, pilotproto.RecommendationRequest{Epoch: l.Epoch, MinNodes: 4, SlotsPerNode: 8}); err != nil {
		t.Fatal(err)
	}
	for _, r := range []pilotproto.RecommendationRequest{
		{Epoch: l.Epoch, MinNodes: api.MaxNodes + 1},
		{Epoch: l.Epoch, MinNodes: 1, MaxNodes: 1 << 40},
	} {
		if err := e.Q.Recommend(ctx, r); !errors.Is(err, api.ErrInvalid) {
			t.Errorf("recommendation %+v: %v, want invalid", r, err)
		}
	}
	if got := e.Q.Recommendation(); got != 4 {
		t.Errorf("the recommendation in force is %d after refused ones, want 4", got)
	}
}
