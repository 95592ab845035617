package queue_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/harvest-hpc/harvest/pilotproto"
	"github.com/harvest-hpc/harvest/queue"
	"github.com/harvest-hpc/harvest/queue/api"
	"github.com/harvest-hpc/harvest/queue/queuetest"
)

// TestADeposedMasterWritesNothingWhenTheLeaseMovesBeforeItsWrite puts a
// lease takeover exactly between a master's request passing its first
// epoch check and its write transaction: the interleaving in which a
// check-then-act fence lets the deposed master write (issue 13, item 13).
// The epoch is checked inside the write transaction, so every write of
// the old epoch is refused and nothing it sent is stored.
func TestADeposedMasterWritesNothingWhenTheLeaseMovesBeforeItsWrite(t *testing.T) {
	for _, tc := range []struct {
		op   string // the hook's name for the write
		call func(ctx context.Context, q *queue.Queue, task pilotproto.Task) error
	}{
		{"assign", func(ctx context.Context, q *queue.Queue, _ pilotproto.Task) error {
			_, err := q.Pull(ctx, pilotproto.PullRequest{Epoch: 1, Max: 10})
			return err
		}},
		{"results", func(ctx context.Context, q *queue.Queue, task pilotproto.Task) error {
			_, err := q.ReportResults(ctx, pilotproto.ResultsRequest{Epoch: 1, Results: []pilotproto.Result{
				{TaskID: task.ID, Attempt: task.Attempt, Status: pilotproto.StatusDone, DurationMS: 1000}}})
			return err
		}},
		{"heartbeat", func(ctx context.Context, q *queue.Queue, task pilotproto.Task) error {
			_, err := q.Heartbeat(ctx, pilotproto.HeartbeatRequest{Epoch: 1, Running: []pilotproto.TaskRef{{TaskID: task.ID, Attempt: task.Attempt}}})
			return err
		}},
		{"recommend", func(ctx context.Context, q *queue.Queue, _ pilotproto.Task) error {
			return q.Recommend(ctx, pilotproto.RecommendationRequest{Epoch: 1, MinNodes: 7})
		}},
	} {
		t.Run(tc.op, func(t *testing.T) {
			e := queuetest.New(t)
			ctx := context.Background()
			if _, err := e.Q.Submit(ctx, "alice", api.JobSpec{Dataset: e.Dataset("d", 3), Command: []string{"p"}, BatchSize: 1}); err != nil {
				t.Fatal(err)
			}
			if l, err := e.Q.Lease(ctx, pilotproto.LeaseRequest{PilotID: "p1", Address: "http://a1:1"}); err != nil || l.Epoch != 1 {
				t.Fatalf("lease: %+v %v", l, err)
			}
			p, err := e.Q.Pull(ctx, pilotproto.PullRequest{Epoch: 1, Max: 1})
			if err != nil || len(p.Tasks) != 1 {
				t.Fatalf("pull: %+v %v", p, err)
			}
			// The master's lease is still valid when its request arrives.
			e.Clock.Advance(e.Cfg.LeaseTTL - time.Second)

			var afterTakeover string
			fired := 0
			queue.SetBeforeWrite(e.Q, func(op string) {
				if op != tc.op || fired > 0 {
					return
				}
				fired++
				e.Clock.Advance(2 * time.Second) // p1's lease runs out ...
				l, err := e.Q.Lease(ctx, pilotproto.LeaseRequest{PilotID: "p2", Address: "http://a2:1"})
				if err != nil || !l.Granted || l.Epoch != 2 {
					t.Errorf("takeover: %+v %v", l, err)
				}
				afterTakeover = e.Snapshot(t) // ... and p2 is master before p1's write begins
			})
			err = tc.call(ctx, e.Q, p.Tasks[0])
			if fired != 1 {
				t.Fatalf("the %s write was never attempted (err %v)", tc.op, err)
			}
			if !errors.Is(err, api.ErrStaleEpoch) {
				t.Fatalf("the deposed master's %s: %v, want api.ErrStaleEpoch", tc.op, err)
			}
			if got := e.Snapshot(t); got != afterTakeover {
				t.Fatalf("the deposed master's %s changed stored state:\nbefore:\n%s\nafter:\n%s", tc.op, afterTakeover, got)
			}
			if tc.op == "recommend" && e.Q.Recommendation() != 0 {
				t.Fatalf("the deposed master's recommendation was kept: %d", e.Q.Recommendation())
			}
		})
	}
}
