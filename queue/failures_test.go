package queue_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/harvest-hpc/harvest/pilotproto"
	"github.com/harvest-hpc/harvest/queue"
	"github.com/harvest-hpc/harvest/queue/api"
	"github.com/harvest-hpc/harvest/queue/queuetest"
)

// A job's failures, through the HTTP API as its owner reads them: a task
// whose retry succeeded, one with no attempt left, one whose attempt
// expired and is being retried; the task that never failed is not
// there. Pages follow the task order; other users see nothing.
func TestFailuresSayWhichTasksFailedAndWhy(t *testing.T) {
	e := queuetest.New(t, func(c *queue.Config) { c.ZombieTimeout = time.Minute; c.LeaseTTL = time.Hour })
	ctx := context.Background()
	j, ts, epoch := e.Handed(t, 4, 4, api.JobSpec{MaxAttempts: queuetest.Ptr(2)})
	report := func(rs ...pilotproto.Result) {
		t.Helper()
		if r, err := e.Q.ReportResults(ctx, pilotproto.ResultsRequest{Epoch: epoch, Results: rs}); err != nil || r.Applied != len(rs) {
			t.Fatalf("results: %+v %v", r, err)
		}
	}
	res := func(tk pilotproto.Task, status string, exit int, tail string) pilotproto.Result {
		return pilotproto.Result{TaskID: tk.ID, Attempt: tk.Attempt, Status: status, ExitCode: exit, StartedAt: 1_767_268_800_000, DurationMS: 1500, Pilot: "p1", ErrorTail: tail}
	}
	report(res(ts[0], pilotproto.StatusFailed, 3, "reading e00000\nboom: no such file\n"),
		res(ts[1], pilotproto.StatusTimeout, -1, "slow\n[harvest] killed after the task timeout of 60s"),
		res(ts[2], pilotproto.StatusDone, 0, ""))
	// Task 3's master goes silent: ZOMBIE, then expired and requeued.
	e.Clock.Advance(121 * time.Second)
	e.Q.Sweep(ctx)
	e.Clock.Advance(time.Second)
	e.Q.Sweep(ctx)
	p, err := e.Q.Pull(ctx, pilotproto.PullRequest{Epoch: epoch, Max: 4})
	if err != nil || len(p.Tasks) != 3 {
		t.Fatalf("the retries: %d tasks %v", len(p.Tasks), err)
	}
	report(res(p.Tasks[0], pilotproto.StatusDone, 0, ""), res(p.Tasks[1], pilotproto.StatusFailed, 4, "second try\nstill broken"))

	alice := e.Client("alice")
	l, err := alice.Failures(ctx, j.ID, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	logOf := func(tk pilotproto.Task, attempt int) string {
		return filepath.Join(j.OutputDir, ".harvest", "logs", fmt.Sprintf("%d.%d.err", tk.ID, attempt))
	}
	want := []api.Failure{
		{TaskID: ts[0].ID, Name: ts[0].Name, State: api.TaskDone, Tries: 1, Attempt: 1, Status: "failed", ExitCode: 3, Site: "local", Pilot: "p1",
			StartedAt: 1_767_268_800_000, DurationMS: 1500, ErrorTail: "reading e00000\nboom: no such file\n", Log: logOf(ts[0], 1)},
		{TaskID: ts[1].ID, Index: 1, Name: ts[1].Name, State: api.TaskErrorE, Tries: 2, Attempt: 2, Status: "failed", ExitCode: 4, Site: "local", Pilot: "p1",
			StartedAt: 1_767_268_800_000, DurationMS: 1500, ErrorTail: "second try\nstill broken", Log: logOf(ts[1], 2)},
		{TaskID: ts[3].ID, Index: 3, Name: ts[3].Name, State: api.TaskAssigned, Tries: 1, Status: api.FailureStatusExpired, ErrorTail: "no heartbeat: expired"},
	}
	if len(l.Failures) != len(want) || l.NextCursor != 0 {
		t.Fatalf("%d failures (next %d), want %d: %+v", len(l.Failures), l.NextCursor, len(want), l.Failures)
	}
	for i := range want {
		if l.Failures[i] != want[i] {
			t.Errorf("failure %d:\n got %+v\nwant %+v", i, l.Failures[i], want[i])
		}
	}

	// Two pages of two, then one.
	p1, err := alice.Failures(ctx, j.ID, 0, 2)
	if err != nil || len(p1.Failures) != 2 || p1.NextCursor != ts[1].ID {
		t.Fatalf("first page: %+v %v", p1, err)
	}
	p2, err := alice.Failures(ctx, j.ID, p1.NextCursor, 2)
	if err != nil || len(p2.Failures) != 1 || p2.Failures[0].TaskID != ts[3].ID || p2.NextCursor != 0 {
		t.Fatalf("second page: %+v %v", p2, err)
	}

	// Bob does not see alice's job; the admin does; bad pages are refused.
	if _, err := e.Client("bob").Failures(ctx, j.ID, 0, 0); !errors.Is(err, api.ErrNotFound) {
		t.Errorf("bob reading alice's failures: %v, want not found", err)
	}
	if a, err := e.Client("admin").Failures(ctx, j.ID, 0, 0); err != nil || len(a.Failures) != 3 {
		t.Errorf("the admin: %d failures %v", len(a.Failures), err)
	}
	if _, err := alice.Failures(ctx, 999, 0, 0); !errors.Is(err, api.ErrNotFound) {
		t.Errorf("an unknown job: %v", err)
	}
	for _, q := range []string{"?limit=0", "?limit=-3", "?limit=1001", "?cursor=x", "?cursor=-1"} {
		if code, msg := e.Raw("GET", api.PathJob+"1"+api.PathFailuresSuffix+q, "alice", ""); code != 400 || msg == "" {
			t.Errorf("GET failures%s: %d %q, want 400 with a message", q, code, msg)
		}
	}
}

// The last failure is the last attempt that counted: a failed attempt,
// then an expired one, then an interrupted one (which counts nothing)
// shows the expiry, not the first failure nor the interruption's stderr.
func TestFailuresShowTheLastAttemptThatCounted(t *testing.T) {
	e := queuetest.New(t, func(c *queue.Config) { c.ZombieTimeout = time.Minute; c.LeaseTTL = time.Hour })
	ctx := context.Background()
	j, ts, epoch := e.Handed(t, 1, 1, api.JobSpec{MaxAttempts: queuetest.Ptr(3)})
	if _, err := e.Q.ReportResults(ctx, pilotproto.ResultsRequest{Epoch: epoch, Results: []pilotproto.Result{
		{TaskID: ts[0].ID, Attempt: 1, Status: pilotproto.StatusFailed, ExitCode: 2, ErrorTail: "first: bad"}}}); err != nil {
		t.Fatal(err)
	}
	pull := func() pilotproto.Task {
		t.Helper()
		p, err := e.Q.Pull(ctx, pilotproto.PullRequest{Epoch: epoch, Max: 1})
		if err != nil || len(p.Tasks) != 1 {
			t.Fatalf("pull: %+v %v", p, err)
		}
		return p.Tasks[0]
	}
	pull() // attempt 2, whose master goes silent
	e.Clock.Advance(121 * time.Second)
	e.Q.Sweep(ctx)
	e.Clock.Advance(time.Second)
	e.Q.Sweep(ctx)
	a3 := pull()
	if _, err := e.Q.ReportResults(ctx, pilotproto.ResultsRequest{Epoch: epoch, Results: []pilotproto.Result{
		{TaskID: a3.ID, Attempt: a3.Attempt, Status: pilotproto.StatusInterrupted, ErrorTail: "terminated"}}}); err != nil {
		t.Fatal(err)
	}
	l, err := e.Client("alice").Failures(ctx, j.ID, 0, 0)
	if err != nil || len(l.Failures) != 1 {
		t.Fatalf("%+v %v", l, err)
	}
	if f := l.Failures[0]; f.Status != api.FailureStatusExpired || f.Tries != 2 || f.ErrorTail != "no heartbeat: expired" || f.State != api.TaskWaiting {
		t.Errorf("after failed, expired, interrupted: %+v, want the expiry as the last of 2 failures, the task waiting", f)
	}
}
