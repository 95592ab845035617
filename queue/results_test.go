package queue_test

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/harvest-hpc/harvest/pilotproto"
	"github.com/harvest-hpc/harvest/queue"
	"github.com/harvest-hpc/harvest/queue/api"
	"github.com/harvest-hpc/harvest/queue/queuetest"
)

// A batch of results is applied in chunks of at most WriteChunk results
// and about 64 KiB of error tails: 10 results with the longest tails the
// API takes are 10 transactions, 10 with none are one; all are applied.
func TestResultsWithLongErrorTailsAreAppliedInSmallChunks(t *testing.T) {
	e := queuetest.New(t)
	var chunks atomic.Int64
	queue.SetBeforeWrite(e.Q, func(op string) {
		if op == "results" {
			chunks.Add(1)
		}
	})
	_, tasks, epoch := e.Handed(t, 20, 20, api.JobSpec{MaxAttempts: queuetest.Ptr(1)})
	for i, c := range []struct {
		tail       int
		wantChunks int64
	}{{64 << 10, 10}, {0, 1}} {
		var rs []pilotproto.Result
		for _, tk := range tasks[10*i : 10*i+10] {
			rs = append(rs, pilotproto.Result{TaskID: tk.ID, Attempt: tk.Attempt, Status: pilotproto.StatusFailed, ExitCode: 2,
				ErrorTail: strings.Repeat("e", c.tail)})
		}
		chunks.Store(0)
		r, err := e.Q.ReportResults(context.Background(), pilotproto.ResultsRequest{Epoch: epoch, Results: rs})
		if err != nil || r.Applied != 10 {
			t.Fatalf("%d-byte tails: %+v %v", c.tail, r, err)
		}
		if got := chunks.Load(); got != c.wantChunks {
			t.Errorf("10 results with %d-byte tails in %d transactions, want %d", c.tail, got, c.wantChunks)
		}
	}
	if n := e.Count(`SELECT count(*) FROM exceptions WHERE length(error_tail) = $1`, 64<<10); n != 10 {
		t.Errorf("%d failed entries kept their whole tail, want 10", n)
	}
}
