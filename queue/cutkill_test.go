package queue_test

import (
	"context"
	"errors"
	"runtime"
	"testing"
	"time"

	"github.com/harvest-hpc/harvest/pilotproto"
	"github.com/harvest-hpc/harvest/queue"
	"github.com/harvest-hpc/harvest/queue/api"
	"github.com/harvest-hpc/harvest/queue/queuetest"
)

// stopAt makes the queue's goroutine that reaches the test hook op end
// there, as a kill -9 would end the process: what it committed before
// stays, nothing after it runs. It returns a channel closed once it has.
func stopAt(q *queue.Queue, op string) <-chan struct{} {
	stopped := make(chan struct{})
	queue.SetBeforeWrite(q, func(at string) {
		if at == op {
			close(stopped)
			runtime.Goexit()
		}
	})
	return stopped
}

// cutCancel submits a job of n entries, hands out pull of them and
// cancels it, the cancel cut after the job is KILLED and before its
// tasks are.
func cutCancel(t *testing.T, e *queuetest.Env, n, pull int) api.Job {
	t.Helper()
	j, _, _ := e.Handed(t, n, pull, api.JobSpec{})
	stopped := stopAt(e.Q, "cancel-kill")
	go e.Q.Cancel(context.Background(), "alice", false, j.ID)
	<-stopped
	queue.SetBeforeWrite(e.Q, nil)
	return j
}

// reopen closes the queue (committing nothing the stopped goroutine would
// have done) and opens it again on the same database, as a restart after
// a kill -9 does.
func reopen(t *testing.T, e *queuetest.Env) *queue.Queue {
	t.Helper()
	e.Q.Close()
	q, err := queue.Open(e.Cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { q.Close() })
	return q
}

// TestACancelCutByACrashIsFinishedAtOpen is issue 35 item 3: a cancel
// marks its job KILLED, then kills the tasks in chunks; a crash between
// the two left the job KILLED with its tasks WAITING and RUNNING forever
// (and the running ones counted against its owner). The queue now
// finishes the kill when it opens, and a repeated cancel of the KILLED
// job answers the job, not a conflict.
func TestACancelCutByACrashIsFinishedAtOpen(t *testing.T) {
	e := queuetest.New(t)
	ctx := context.Background()
	j := cutCancel(t, e, 30, 4)
	// The crash point: the job is KILLED, the 4 entries of its live grant
	// are not (its 26 waiting entries need no row to be killed: an entry
	// never handed out of a killed job is killed).
	if n := e.Count(`SELECT count(*) FROM tasks WHERE job_id = $1 AND state IN ('WAITING', 'ASSIGNED', 'RUNNING')`, j.ID); n != 4 {
		t.Fatalf("at the crash point %d tasks are live, want 4 (the test would not test the recovery)", n)
	}
	q := reopen(t, e)
	if n := e.Count(`SELECT count(*) FROM tasks WHERE job_id = $1 AND state != 'KILLED'`, j.ID); n != 0 {
		t.Fatalf("after the restart %d tasks of the cancelled job are not KILLED", n)
	}
	if u, err := q.User(ctx, "alice"); err != nil || u.RunningCores != 0 {
		t.Fatalf("alice runs %d cores after the restart (%v), want 0", u.RunningCores, err)
	}
	got, err := q.Cancel(ctx, "alice", false, j.ID)
	if err != nil || got.State != api.JobKilled || got.Tasks.Killed != 30 {
		t.Fatalf("a repeated cancel: %s %+v, %v; want the KILLED job, 30 killed", got.State, got.Tasks, err)
	}
}

// A repeated cancel finishes a kill that a crash cut, without a restart;
// a cancel of a job that ended otherwise is still a conflict.
func TestARepeatedCancelFinishesTheKillAndSucceeds(t *testing.T) {
	e := queuetest.New(t)
	ctx := context.Background()
	j := cutCancel(t, e, 10, 2)
	got, err := e.Q.Cancel(ctx, "alice", false, j.ID)
	if err != nil || got.State != api.JobKilled {
		t.Fatalf("the client's retry of its cancel: %s, %v; want the KILLED job", got.State, err)
	}
	if n := e.Count(`SELECT count(*) FROM tasks WHERE job_id = $1 AND state != 'KILLED'`, j.ID); n != 0 {
		t.Fatalf("after the repeated cancel %d tasks are not KILLED", n)
	}
	// A job that ended DONE cannot be cancelled.
	d, err := e.Q.Submit(ctx, "alice", api.JobSpec{Dataset: e.Dataset("one", 1), Command: []string{"p"}, BatchSize: 1})
	if err != nil {
		t.Fatal(err)
	}
	p, err := e.Q.Pull(ctx, pilotproto.PullRequest{Epoch: 1, Max: 1})
	if err != nil || len(p.Tasks) != 1 || p.Tasks[0].JobID != d.ID {
		t.Fatalf("pull: %+v %v", p, err)
	}
	if _, err := e.Q.Results(ctx, pilotproto.ResultsRequest{Epoch: 1, Results: []pilotproto.Result{{TaskID: p.Tasks[0].ID, Attempt: 1, Status: pilotproto.StatusDone}}}); err != nil {
		t.Fatal(err)
	}
	if got, err := e.Q.Cancel(ctx, "alice", false, d.ID); !errors.Is(err, api.ErrConflict) || got.State != api.JobDone {
		t.Fatalf("cancel of a DONE job: %s, %v; want a conflict", got.State, err)
	}
}

// An expiry is cut the same way (the job ERROR_EW, its tasks WAITING) and
// finished at Open.
func TestAnExpiryCutByACrashIsFinishedAtOpen(t *testing.T) {
	e := queuetest.New(t)
	ctx := context.Background()
	j, err := e.Q.Submit(ctx, "alice", api.JobSpec{Dataset: e.Dataset("exp", 25), Command: []string{"p"}, BatchSize: 1, ExpiryS: 60})
	if err != nil {
		t.Fatal(err)
	}
	e.Clock.Advance(2 * time.Minute)
	stopped := stopAt(e.Q, "expiry-kill")
	go e.Q.Sweep(ctx)
	<-stopped
	// The crash point: the job is ERROR_EW with its kill recorded and not
	// done (its entries, never handed out, are killed with the job).
	if n := e.Count(`SELECT count(*) FROM jobs WHERE id = $1 AND state = 'ERROR_EW' AND kill_states != ''`, j.ID); n != 1 {
		t.Fatal("at the crash point the expired job's kill is not pending (the test would not test the recovery)")
	}
	reopen(t, e)
	if n := e.Count(`SELECT count(*) FROM tasks WHERE job_id = $1 AND state != 'KILLED'`, j.ID); n != 0 {
		t.Fatalf("after the restart %d tasks of the expired job are not KILLED", n)
	}
	if s := e.Count(`SELECT count(*) FROM jobs WHERE id = $1 AND state = 'ERROR_EW' AND kill_states = ''`, j.ID); s != 1 {
		t.Fatal("the expired job is not ERROR_EW with its kill done")
	}
}
