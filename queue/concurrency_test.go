package queue_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/harvest-hpc/harvest/pilotproto"
	"github.com/harvest-hpc/harvest/queue"
	"github.com/harvest-hpc/harvest/queue/api"
	"github.com/harvest-hpc/harvest/queue/queuetest"
)

// Pulls, results, heartbeats, job reads, sweeps and reconciles at once, as
// a pilot's master and the queue's own loops make them: when everything is
// done, the job's counters, its per-site count and its tasks agree.
func TestConcurrentHotPathKeepsCountersAndTasksInStep(t *testing.T) {
	e := queuetest.New(t, func(c *queue.Config) { c.LeaseTTL = time.Hour })
	ctx := context.Background()
	const n = 400
	j, err := e.Q.Submit(ctx, "alice", api.JobSpec{Dataset: e.Dataset("c", n), Command: []string{"p"}, BatchSize: 4})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.Q.Lease(ctx, pilotproto.LeaseRequest{PilotID: "p1"}); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var held []pilotproto.TaskRef
	done := make(chan struct{})
	var wg sync.WaitGroup
	loop := func(f func()) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-done:
					return
				default:
					f()
				}
			}
		}()
	}
	loop(func() { // the master's pulls
		p, err := e.Q.Pull(ctx, pilotproto.PullRequest{Epoch: 1, Max: 7})
		if err != nil {
			t.Error(err)
			return
		}
		mu.Lock()
		for _, tk := range p.Tasks {
			held = append(held, pilotproto.TaskRef{TaskID: tk.ID, Attempt: tk.Attempt})
		}
		mu.Unlock()
	})
	loop(func() { // the master's results: mostly done, some interrupted (requeued)
		mu.Lock()
		k := min(len(held), 5)
		batch := append([]pilotproto.TaskRef(nil), held[:k]...)
		held = held[k:]
		mu.Unlock()
		var rs []pilotproto.Result
		for i, r := range batch {
			st := pilotproto.StatusDone
			if (r.TaskID+int64(i))%7 == 0 && r.Attempt < 3 {
				st = pilotproto.StatusInterrupted
			}
			rs = append(rs, pilotproto.Result{TaskID: r.TaskID, Attempt: r.Attempt, Status: st, StartedAt: 1, DurationMS: 1})
		}
		if len(rs) > 0 {
			if _, err := e.Q.ReportResults(ctx, pilotproto.ResultsRequest{Epoch: 1, Results: rs}); err != nil {
				t.Error(err)
			}
		}
	})
	loop(func() { // heartbeats of what is held
		mu.Lock()
		refs := append([]pilotproto.TaskRef(nil), held...)
		mu.Unlock()
		if _, err := e.Q.Heartbeat(ctx, pilotproto.HeartbeatRequest{Epoch: 1, Running: refs}); err != nil {
			t.Error(err)
		}
	})
	loop(func() { // users reading their job, the agent's demand, the sweeps, the reconciler
		if _, err := e.Q.Job(ctx, "alice", false, j.ID); err != nil {
			t.Error(err)
		}
		if _, err := e.Q.Demand(ctx); err != nil {
			t.Error(err)
		}
		if err := e.Q.Sweep(ctx); err != nil {
			t.Error(err)
		}
		if err := e.Q.Reconcile(ctx); err != nil {
			t.Error(err)
		}
	})
	deadline := time.After(60 * time.Second)
	for {
		got, err := e.Q.Job(ctx, "alice", false, j.ID)
		if err != nil {
			t.Fatal(err)
		}
		if got.State == api.JobDone {
			break
		}
		select {
		case <-deadline:
			close(done)
			wg.Wait()
			t.Fatalf("the job did not finish: %+v, sites %+v", got.Tasks, got.Sites)
		case <-time.After(5 * time.Millisecond):
		}
	}
	close(done)
	wg.Wait()
	got, _ := e.Q.Job(ctx, "alice", false, j.ID)
	d := e.Count(`SELECT count(*) FROM tasks WHERE job_id = $1 AND state = 'DONE'`, j.ID)
	if got.Tasks.Done != n || d != n || len(got.Sites) != 1 || got.Sites[0].Done != n {
		t.Fatalf("job %+v, sites %+v, %d tasks DONE in the table; want %d everywhere", got.Tasks, got.Sites, d, n)
	}
}

// A restart can cut the answer of a pull the queue committed; the holder
// then renews its own epoch, so no new master's first heartbeat asks about
// those tasks. The pool's first heartbeat after the open does: what its
// epoch was handed before the open and it does not list goes back to the
// queue at once; what was handed since the open is left alone.
func TestAfterARestartTheFirstHeartbeatRequeuesWhatItsEpochNeverReceived(t *testing.T) {
	e := queuetest.New(t, func(c *queue.Config) { c.LeaseTTL = time.Hour })
	ctx := context.Background()
	j, tasks, _ := e.Handed(t, 4, 3, api.JobSpec{})
	// The answer of the third task is lost in the restart.
	if err := e.Q.Close(); err != nil {
		t.Fatal(err)
	}
	e.Clock.Advance(time.Second)
	q, err := queue.Open(e.Cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { q.Close() })
	held := []pilotproto.TaskRef{{TaskID: tasks[0].ID, Attempt: 1}, {TaskID: tasks[1].ID, Attempt: 1}}
	if _, err := q.Heartbeat(ctx, pilotproto.HeartbeatRequest{Epoch: 1, Running: held}); err != nil {
		t.Fatal(err)
	}
	got, err := q.Job(ctx, "alice", false, j.ID)
	if err != nil || got.Tasks.Waiting != 2 || got.Tasks.Running != 2 {
		t.Fatalf("after the first heartbeat: %+v %v, want the cut task requeued (2 waiting, 2 running)", got.Tasks, err)
	}
	// Pulled since the open and not listed yet: the next heartbeat leaves it.
	p2, err := q.Pull(ctx, pilotproto.PullRequest{Epoch: 1, Max: 1})
	if err != nil || len(p2.Tasks) != 1 || p2.Tasks[0].ID != tasks[2].ID || p2.Tasks[0].Attempt != 2 {
		t.Fatalf("pull after the open: %+v %v, want the requeued task, attempt 2", p2, err)
	}
	if _, err := q.Heartbeat(ctx, pilotproto.HeartbeatRequest{Epoch: 1, Running: held}); err != nil {
		t.Fatal(err)
	}
	if got, _ := q.Job(ctx, "alice", false, j.ID); got.Tasks.Waiting != 1 || got.Tasks.Running != 3 {
		t.Fatalf("after the second heartbeat: %+v, want 1 waiting, 3 running", got.Tasks)
	}
}
