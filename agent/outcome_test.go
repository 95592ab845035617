package agent

import (
	"context"
	"fmt"
	"testing"

	"github.com/harvest-hpc/harvest/adapters"
	"github.com/harvest-hpc/harvest/adapters/adaptertest"
)

// lostReply answers Submit at once with an unknown outcome (a reply lost,
// an sbatch killed), not a timeout.
type lostReply struct{ *adaptertest.Memory }

func (lostReply) Submit(context.Context, adapters.PilotSpec) (adapters.PilotID, error) {
	return "", fmt.Errorf("sbatch was killed by signal killed, the pilot may exist: %w", adapters.ErrOutcomeUnknown)
}

// Issue 35 item 10: an sbatch whose outcome is unknown but that did not
// time out was logged as "timed out" and doubled the submit timeout. It
// still counts as a pilot that may exist and ends the round, but the
// timeout stays.
func TestAnUnknownOutcomeThatIsNoTimeoutKeepsTheSubmitTimeout(t *testing.T) {
	cfg := testConfig()
	r := NewReconciler(lostReply{adaptertest.NewMemory(4)}, nil, cfg, nil)
	res, _ := r.Round(context.Background())
	if len(res.Errors) != 1 || len(res.Submitted) != 0 {
		t.Fatalf("round: errors %v, submitted %v; want the one unknown outcome", res.Errors, res.Submitted)
	}
	if got := r.SubmitTimeout(); got != cfg.SubmitTimeout {
		t.Errorf("submit timeout after an unknown outcome that was no timeout: %v, want %v unchanged", got, cfg.SubmitTimeout)
	}
	if up := r.ledger.Upcoming(); len(up) == 0 {
		t.Error("the pilot that may exist is not counted as held")
	}
}
