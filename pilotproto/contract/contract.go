// Package contract is the conformance suite of the pilotproto.Queue
// contract: the rules a master relies on (lease, epochs and fencing, each
// task handed once, results applied once, interrupted tasks requeued
// without an attempt, cancelled jobs, orphans of a dead master). Every
// implementation runs it: the queue in process and over HTTP (queue's
// contract_test.go), and any fake that claims to stand for the queue.
package contract

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/harvest-hpc/harvest/pilotproto"
	"github.com/harvest-hpc/harvest/queue/api"
)

// Harness is one fresh queue under test and the controls the suite needs
// beyond the contract.
type Harness struct {
	Queue pilotproto.Queue
	// TTL is the lease TTL the queue was configured with.
	TTL time.Duration
	// Advance moves the queue's clock on.
	Advance func(time.Duration)
	// Submit adds a job of n tasks (batch size batch, maxAttempts
	// attempts each) and returns its id.
	Submit func(t *testing.T, n, batch, maxAttempts int) int64
	// Cancel cancels a job.
	Cancel func(t *testing.T, job int64)
}

// Run runs every rule against fresh harnesses from newHarness.
func Run(t *testing.T, newHarness func(t *testing.T) Harness) {
	for _, r := range rules {
		t.Run(r.name, func(t *testing.T) { r.check(t, newHarness(t)) })
	}
}

type rule struct {
	name  string
	check func(*testing.T, Harness)
}

var ctx = context.Background()

func lease(t *testing.T, h Harness, pilot string, epoch int64) pilotproto.Lease {
	t.Helper()
	l, err := h.Queue.Lease(ctx, pilotproto.LeaseRequest{PilotID: pilot, Address: "http://" + pilot, Epoch: epoch})
	if err != nil {
		t.Fatalf("lease for %s (epoch %d): %v", pilot, epoch, err)
	}
	return l
}

func master(t *testing.T, h Harness, pilot string) int64 {
	t.Helper()
	l := lease(t, h, pilot, 0)
	if !l.Granted {
		t.Fatalf("%s did not get a free lease: %+v", pilot, l)
	}
	return l.Epoch
}

func pull(t *testing.T, h Harness, epoch int64, max int) pilotproto.PullResponse {
	t.Helper()
	r, err := h.Queue.Pull(ctx, pilotproto.PullRequest{Epoch: epoch, Max: max})
	if err != nil {
		t.Fatalf("pull (epoch %d): %v", epoch, err)
	}
	return r
}

func report(t *testing.T, h Harness, epoch int64, rs ...pilotproto.Result) pilotproto.ResultsResponse {
	t.Helper()
	r, err := h.Queue.Results(ctx, pilotproto.ResultsRequest{Epoch: epoch, Results: rs})
	if err != nil {
		t.Fatalf("results (epoch %d): %v", epoch, err)
	}
	return r
}

func result(task pilotproto.Task, status string) pilotproto.Result {
	return pilotproto.Result{TaskID: task.ID, Attempt: task.Attempt, Status: status, DurationMS: 10}
}

func ids(ts []pilotproto.Task) []int64 {
	var out []int64
	for _, t := range ts {
		out = append(out, t.ID)
	}
	slices.Sort(out)
	return out
}

func wantErr(t *testing.T, what string, err, target error) {
	t.Helper()
	if !errors.Is(err, target) {
		t.Fatalf("%s: got %v, want %v", what, err, target)
	}
}

var rules = []rule{
	{"the first asker becomes master and the others learn where it is", func(t *testing.T, h Harness) {
		a := lease(t, h, "pA", 0)
		if !a.Granted || a.Epoch < 1 || a.Holder != "pA" {
			t.Fatalf("first asker: %+v", a)
		}
		b := lease(t, h, "pB", 0)
		if b.Granted || b.Holder != "pA" || b.Address != "http://pA" || b.Epoch != a.Epoch {
			t.Fatalf("second asker: %+v, want the holder pA at http://pA, epoch %d", b, a.Epoch)
		}
	}},
	{"the lease says its TTL so the master can renew in time", func(t *testing.T, h Harness) {
		l := lease(t, h, "pA", 0)
		got := time.Duration(l.TTLMS) * time.Millisecond
		if l.TTLMS == 0 {
			got = time.Duration(l.TTLSecond) * time.Second
		}
		if got != h.TTL {
			t.Fatalf("lease TTL %s, want %s", got, h.TTL)
		}
	}},
	{"the holder renews with its epoch and keeps it past the first TTL", func(t *testing.T, h Harness) {
		e := master(t, h, "pA")
		for i := 0; i < 4; i++ {
			h.Advance(h.TTL / 2)
			if l := lease(t, h, "pA", e); !l.Granted || l.Epoch != e {
				t.Fatalf("renewal %d: %+v", i, l)
			}
		}
		if l := lease(t, h, "pB", 0); l.Granted {
			t.Fatalf("a renewed lease went to another pilot: %+v", l)
		}
	}},
	{"after the TTL another pilot becomes master and the old epoch is fenced everywhere", func(t *testing.T, h Harness) {
		h.Submit(t, 2, 1, 3)
		old := master(t, h, "pA")
		tasks := pull(t, h, old, 1).Tasks
		if len(tasks) != 1 {
			t.Fatalf("pulled %d tasks, want 1", len(tasks))
		}
		h.Advance(h.TTL + time.Millisecond)
		newer := master(t, h, "pB")
		if newer != old+1 {
			t.Fatalf("new epoch %d, want %d", newer, old+1)
		}
		_, err := h.Queue.Lease(ctx, pilotproto.LeaseRequest{PilotID: "pA", Epoch: old})
		wantErr(t, "renewal by the old master", err, api.ErrStaleEpoch)
		_, err = h.Queue.Pull(ctx, pilotproto.PullRequest{Epoch: old, Max: 1})
		wantErr(t, "pull by the old master", err, api.ErrStaleEpoch)
		_, err = h.Queue.Results(ctx, pilotproto.ResultsRequest{Epoch: old, Results: []pilotproto.Result{result(tasks[0], pilotproto.StatusDone)}})
		wantErr(t, "results of the old master", err, api.ErrStaleEpoch)
		_, err = h.Queue.Heartbeat(ctx, pilotproto.HeartbeatRequest{Epoch: old})
		wantErr(t, "heartbeat of the old master", err, api.ErrStaleEpoch)
		err = h.Queue.Recommend(ctx, pilotproto.RecommendationRequest{Epoch: old, MinNodes: 1})
		wantErr(t, "recommendation of the old master", err, api.ErrStaleEpoch)
	}},
	{"an expired lease refuses writes until its holder renews it, if nobody took it", func(t *testing.T, h Harness) {
		e := master(t, h, "pA")
		h.Advance(h.TTL + time.Millisecond)
		_, err := h.Queue.Heartbeat(ctx, pilotproto.HeartbeatRequest{Epoch: e})
		wantErr(t, "heartbeat after the TTL", err, api.ErrLeaseExpired)
		if l := lease(t, h, "pA", e); !l.Granted || l.Epoch != e {
			t.Fatalf("renewal after expiry: %+v", l)
		}
		if _, err := h.Queue.Heartbeat(ctx, pilotproto.HeartbeatRequest{Epoch: e}); err != nil {
			t.Fatalf("heartbeat after the renewal: %v", err)
		}
	}},
	{"a heartbeat renews the lease", func(t *testing.T, h Harness) {
		e := master(t, h, "pA")
		for i := 0; i < 4; i++ {
			h.Advance(h.TTL / 2)
			if _, err := h.Queue.Heartbeat(ctx, pilotproto.HeartbeatRequest{Epoch: e}); err != nil {
				t.Fatalf("heartbeat %d: %v", i, err)
			}
		}
		if l := lease(t, h, "pB", 0); l.Granted {
			t.Fatalf("a lease kept alive by heartbeats went to another pilot: %+v", l)
		}
	}},
	{"a released lease goes to the next asker at once, and only its holder may release it", func(t *testing.T, h Harness) {
		e := master(t, h, "pA")
		_, err := h.Queue.Lease(ctx, pilotproto.LeaseRequest{PilotID: "pB", Epoch: e, Release: true})
		wantErr(t, "release by another pilot", err, api.ErrStaleEpoch)
		if _, err := h.Queue.Lease(ctx, pilotproto.LeaseRequest{PilotID: "pA", Epoch: e, Release: true}); err != nil {
			t.Fatalf("release by the holder: %v", err)
		}
		if l := lease(t, h, "pB", 0); !l.Granted || l.Epoch != e+1 {
			t.Fatalf("after the release: %+v, want pB master with epoch %d", l, e+1)
		}
	}},
	{"a pull hands each waiting task once, at most max, starting at attempt 1", func(t *testing.T, h Harness) {
		job := h.Submit(t, 5, 2, 3)
		e := master(t, h, "pA")
		first := pull(t, h, e, 3).Tasks
		rest := pull(t, h, e, 10).Tasks
		if len(first) != 3 || len(rest) != 2 {
			t.Fatalf("pulled %d then %d tasks of 5, want 3 then 2", len(first), len(rest))
		}
		all := append(ids(first), ids(rest)...)
		slices.Sort(all)
		if len(slices.Compact(all)) != 5 {
			t.Fatalf("a task was handed twice: %v", all)
		}
		for _, tk := range append(first, rest...) {
			if tk.Attempt != 1 || tk.JobID != job || tk.BatchSize != 2 {
				t.Fatalf("task %+v: want attempt 1 of job %d with batch size 2", tk, job)
			}
		}
		if more := pull(t, h, e, 10).Tasks; len(more) != 0 {
			t.Fatalf("a third pull handed %d tasks again", len(more))
		}
	}},
	{"a result is applied once and a done task is not handed again", func(t *testing.T, h Harness) {
		h.Submit(t, 1, 1, 3)
		e := master(t, h, "pA")
		tk := pull(t, h, e, 1).Tasks
		if len(tk) != 1 {
			t.Fatalf("pulled %d tasks, want 1", len(tk))
		}
		if r := report(t, h, e, result(tk[0], pilotproto.StatusDone)); r.Applied != 1 {
			t.Fatalf("first report: %+v, want 1 applied", r)
		}
		if r := report(t, h, e, result(tk[0], pilotproto.StatusDone)); r.Applied != 0 || r.Duplicates != 1 {
			t.Fatalf("repeated report: %+v, want 1 duplicate", r)
		}
		if again := pull(t, h, e, 1).Tasks; len(again) != 0 {
			t.Fatalf("a done task was handed again: %+v", again)
		}
	}},
	{"an interrupted task is handed again at once with a new attempt and costs no attempt", func(t *testing.T, h Harness) {
		h.Submit(t, 1, 1, 1)
		e := master(t, h, "pA")
		for i := 1; i <= 3; i++ {
			tk := pull(t, h, e, 1).Tasks
			if len(tk) != 1 {
				t.Fatalf("after %d interruptions the task (1 attempt) was not handed again", i-1)
			}
			if tk[0].Attempt != i {
				t.Fatalf("hand-out %d: attempt %d, want %d", i, tk[0].Attempt, i)
			}
			report(t, h, e, result(tk[0], pilotproto.StatusInterrupted))
		}
	}},
	{"a failed task is retried until its attempts are used up", func(t *testing.T, h Harness) {
		h.Submit(t, 1, 1, 2)
		e := master(t, h, "pA")
		for i := 0; i < 2; i++ {
			tk := pull(t, h, e, 1).Tasks
			if len(tk) != 1 {
				t.Fatalf("try %d: no task handed", i+1)
			}
			report(t, h, e, result(tk[0], pilotproto.StatusFailed))
		}
		if tk := pull(t, h, e, 1).Tasks; len(tk) != 0 {
			t.Fatalf("a task that failed its 2 attempts was handed again: %+v", tk)
		}
	}},
	{"a cancelled job is listed to the master and its waiting tasks are not handed out", func(t *testing.T, h Harness) {
		job := h.Submit(t, 3, 1, 3)
		other := h.Submit(t, 1, 1, 3)
		e := master(t, h, "pA")
		h.Cancel(t, job)
		r := pull(t, h, e, 10)
		if got := ids(r.Tasks); len(got) != 1 || r.Tasks[0].JobID != other {
			t.Fatalf("pull after the cancel handed %v, want only job %d's task", got, other)
		}
		if !slices.Contains(r.CancelledJobs, job) {
			t.Fatalf("pull lists cancelled jobs %v, want %d among them", r.CancelledJobs, job)
		}
		hb, err := h.Queue.Heartbeat(ctx, pilotproto.HeartbeatRequest{Epoch: e})
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Contains(hb.CancelledJobs, job) {
			t.Fatalf("heartbeat lists cancelled jobs %v, want %d among them", hb.CancelledJobs, job)
		}
	}},
	{"a new master's first heartbeat requeues the old epoch's tasks it does not hold", func(t *testing.T, h Harness) {
		h.Submit(t, 2, 1, 1)
		old := master(t, h, "pA")
		tasks := pull(t, h, old, 2).Tasks
		if len(tasks) != 2 {
			t.Fatalf("pulled %d tasks, want 2", len(tasks))
		}
		// pA dies having checkpointed only the first task; pB restores it.
		h.Advance(h.TTL + time.Millisecond)
		e := master(t, h, "pB")
		kept := pilotproto.TaskRef{TaskID: tasks[0].ID, Attempt: tasks[0].Attempt}
		if _, err := h.Queue.Heartbeat(ctx, pilotproto.HeartbeatRequest{Epoch: e, Running: []pilotproto.TaskRef{kept}}); err != nil {
			t.Fatal(err)
		}
		again := pull(t, h, e, 10).Tasks
		if len(again) != 1 || again[0].ID != tasks[1].ID || again[0].Attempt != tasks[1].Attempt+1 {
			t.Fatalf("after the new master's heartbeat the pull handed %+v, want task %d again (attempt %d)",
				again, tasks[1].ID, tasks[1].Attempt+1)
		}
		if r := report(t, h, e, result(tasks[0], pilotproto.StatusDone)); r.Applied != 1 {
			t.Fatalf("the restored task's result was not applied: %+v", r)
		}
	}},
	{"the recommendation of the current master is accepted", func(t *testing.T, h Harness) {
		e := master(t, h, "pA")
		if err := h.Queue.Recommend(ctx, pilotproto.RecommendationRequest{Epoch: e, MinNodes: 3, PendingTasks: 10}); err != nil {
			t.Fatal(err)
		}
	}},
}
