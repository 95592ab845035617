package agent

import (
	"context"
	"errors"
	"testing"

	"github.com/harvest-hpc/harvest/adapters/adaptertest"
)

// Issue 35 item 7: a decision for more pilots than MaxSubmitPerRound is
// carried out over several rounds, never at once.
func TestSubmissionsPerRoundAreBounded(t *testing.T) {
	m := adaptertest.NewMemory(120)
	cfg := testConfig()
	cfg.Policy.HarvestWhileIdle = true
	cfg.MaxSubmitPerRound = 50
	r := NewReconciler(m, nil, cfg, nil)
	for round, want := range []int{50, 50, 20, 0} {
		res, err := r.Round(context.Background())
		if err != nil {
			t.Fatalf("round %d: %v", round+1, err)
		}
		if len(res.Submitted) != want {
			t.Fatalf("round %d submitted %d (decided %+v), want %d", round+1, len(res.Submitted), res.Decision.Submit, want)
		}
	}
	if n := len(m.PilotIDs()); n != 120 {
		t.Errorf("%d pilots after the rounds, want 120", n)
	}
}

// Issue 35 item 7: a snapshot of 3.3 M idle nodes on a cluster that had 8
// at start is refused with a clear error, and nothing is done on it.
func TestASnapshotTooLargeToBeTrueIsRefused(t *testing.T) {
	m := adaptertest.NewMemory(8)
	cfg := testConfig()
	cfg.Policy.HarvestWhileIdle = true
	cfg.MaxSubmitPerRound = 0 // no bound: only the refusal stops it
	r := NewReconciler(m, nil, cfg, nil)
	m.Down = true // nothing submitted in the first round: all 8 nodes stay idle
	if _, err := r.Round(context.Background()); !errors.Is(err, ErrNoSnapshot) {
		t.Fatalf("round while down: %v", err)
	}
	m.Down = false
	res, err := r.Round(context.Background())
	if err != nil || len(res.Submitted) != 8 {
		t.Fatalf("first round: %v, submitted %d, want 8", err, len(res.Submitted))
	}
	m.Nodes = 3_300_000
	res, err = r.Round(context.Background())
	if !errors.Is(err, ErrNoSnapshot) || !errors.Is(err, ErrImplausible) || !errors.Is(err, ErrBatchSystem) {
		t.Fatalf("a snapshot of 3.3 M nodes: %v, want it refused as implausible", err)
	}
	if len(res.Submitted) != 0 || len(m.PilotIDs()) != 8 {
		t.Errorf("submitted %d pilots on the refused snapshot (%d exist, want 8)", len(res.Submitted), len(m.PilotIDs()))
	}
	// A cluster that grows within the bound is believed.
	m.Nodes = 80
	if _, err := r.Round(context.Background()); err != nil {
		t.Errorf("a snapshot of 80 nodes after 8: %v", err)
	}
}
