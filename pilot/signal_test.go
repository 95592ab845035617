package pilot_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/harvest-hpc/harvest/pilot"
	"github.com/harvest-hpc/harvest/queue/api"
)

// waitFor polls cond until it holds or d passes: the tests wait on an
// event (a file appears, a process is reaped) with a deadline.
func waitFor(t *testing.T, what string, d time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.NewTimer(d)
	defer deadline.Stop()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		select {
		case <-deadline.C:
			t.Fatalf("timed out after %s waiting for %s", d, what)
		case <-tick.C:
		}
	}
}

// TestATaskSignalledByTheBatchSystemBeforeThePilotIsInterruptedNotFailed
// is issue 13 item 10: scancel (and SLURM preemption) sends SIGTERM to
// every process of the pilot job, the tasks included, so a task may die of
// the signal before the pilot's own handler has started the stop. Such a
// task was reported failed (exit -1) and charged an attempt; it must be
// reported interrupted and run again without one. max_attempts 1 makes a
// charged attempt visible: the job would fail.
func TestATaskSignalledByTheBatchSystemBeforeThePilotIsInterruptedNotFailed(t *testing.T) {
	r := startQueue(t)
	ds := filepath.Join(r.data, "sig")
	os.MkdirAll(filepath.Join(ds, "only"), 0o755)
	one := 1
	// The first run records its pid and sleeps; the second writes the output.
	script := `if [ -e "$2.first" ]; then echo ok > "$2"; else touch "$2.first"; echo $$ > "$2.tmp"; mv "$2.tmp" "$2.pid"; exec sleep 60; fi`
	j, err := r.user.Submit(context.Background(), api.JobSpec{Dataset: ds, BatchSize: 1, MaxAttempts: &one,
		Command: []string{"sh", "-c", script, "task", "{input}", "{output}"}})
	if err != nil {
		t.Fatal(err)
	}
	first := startPilot(t, fastPilot(r, "500", 2), r.pilot)
	pidFile := filepath.Join(j.OutputDir, "only.pid")
	var pid int
	waitFor(t, "the task to start", 15*time.Second, func() bool {
		b, _ := os.ReadFile(pidFile)
		pid, _ = strconv.Atoi(strings.TrimSpace(string(b)))
		return pid > 0
	})
	// SLURM's SIGTERM reaches the task first and the worker reaps it; only
	// then does the pilot's handler run.
	if err := syscall.Kill(pid, syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the task to be reaped", 5*time.Second, func() bool {
		return errors.Is(syscall.Kill(pid, 0), syscall.ESRCH)
	})
	first.stop(t)
	startPilot(t, fastPilot(r, "501", 2), r.pilot)
	got := r.waitJob(t, j.ID, 30*time.Second)
	if got.State != api.JobDone || got.Tasks.Done != 1 {
		t.Fatalf("job ended %s with %+v: the signalled task was charged an attempt", got.State, got.Tasks)
	}
}

// TestATaskKilledBySignalWithoutAStopStillFails: the grace above does not
// turn real failures into free retries. A task that dies of SIGTERM while
// its pilot goes on (the task killed itself, or the OOM killer's SIGKILL)
// is a failed attempt once the grace has passed.
func TestATaskKilledBySignalWithoutAStopStillFails(t *testing.T) {
	r := startQueue(t)
	ds := filepath.Join(r.data, "self")
	os.MkdirAll(filepath.Join(ds, "only"), 0o755)
	one := 1
	j, err := r.user.Submit(context.Background(), api.JobSpec{Dataset: ds, BatchSize: 1, MaxAttempts: &one,
		Command: []string{"sh", "-c", `kill -TERM $$`}})
	if err != nil {
		t.Fatal(err)
	}
	cfg := fastPilot(r, "510", 2)
	cfg.Worker.StopGrace = 100 * time.Millisecond
	startPilot(t, cfg, r.pilot)
	got := r.waitJob(t, j.ID, 30*time.Second)
	if got.State != api.JobFailed || got.Tasks.Failed != 1 {
		t.Fatalf("job ended %s with %+v, want FAILED with its task failed", got.State, got.Tasks)
	}
}

// TestPilotsEndingTogetherHandTheirTasksBackAtOnce is issue 11 item 2 for
// the case a batch system makes common: every pilot ends at the same
// moment (a wide job preempts them all, one scancel takes them all), the
// master's included. The master stops a few milliseconds before the other
// pilots' hand-backs reach it; it must still take them, so the tasks are
// back in the queue at once, not held by a master that is gone until the
// next one's reconnect grace (a minute here). max_attempts 1 shows no
// attempt was counted: a new pilot finishes the job.
func TestPilotsEndingTogetherHandTheirTasksBackAtOnce(t *testing.T) {
	r := startQueue(t)
	ds := filepath.Join(r.data, "together")
	for i := range 6 {
		os.MkdirAll(filepath.Join(ds, fmt.Sprintf("t%d", i)), 0o755)
	}
	one := 1
	// Until the flag exists, a task marks itself and sleeps; then it finishes.
	flag := filepath.Join(ds, "fast")
	script := `if [ -e "$1/../fast" ]; then echo ok > "$2"; else touch "$2.first"; exec sleep 60; fi`
	j, err := r.user.Submit(context.Background(), api.JobSpec{Dataset: ds, BatchSize: 1, MaxAttempts: &one,
		Command: []string{"sh", "-c", script, "task", "{input}", "{output}"}})
	if err != nil {
		t.Fatal(err)
	}
	slow := func(id string) pilot.Config {
		c := fastPilot(r, id, 2)
		// Only the hand-back can bring the tasks back within the test.
		c.Master.WorkerTimeout, c.Master.ReconnectGrace = time.Minute, time.Minute
		// Generous for a loaded machine; it ends when the hand-backs are in.
		c.Master.HandBackWait = 2 * time.Second
		return c
	}
	mc := slow("700")
	stopping := make(chan struct{}, 1)
	mc.Master.Logger = slog.New(onMessage{"master stopping", stopping, mc.Master.Logger.Handler()})
	master := startPilot(t, mc, r.pilot)
	r.waitMaster(t, "700")
	other := startPilot(t, slow("701"), r.pilot)
	waitFor(t, "3 tasks running on the two pilots (the master keeps a slot)", 15*time.Second, func() bool {
		m, _ := filepath.Glob(filepath.Join(j.OutputDir, "*.first"))
		return len(m) == 3
	})
	// The master's pilot first; the other once the master is stopping, so
	// its hand-back reaches a master that has begun to stop, as it does
	// when SLURM preempts them together.
	master.cancel()
	select {
	case <-stopping:
	case <-time.After(10 * time.Second):
		t.Fatal("the master did not begin to stop within 10 s")
	}
	other.cancel()
	for _, p := range []*runningPilot{master, other} {
		select {
		case err := <-p.done:
			p.done <- err
		case <-time.After(10 * time.Second):
			t.Fatal("a pilot did not stop within 10 s")
		}
	}
	got, err := r.user.Job(context.Background(), j.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got.Tasks.Running != 0 || got.Tasks.Waiting != 6 {
		t.Fatalf("with both pilots gone the queue shows %+v: tasks still held by the stopped master", got.Tasks)
	}
	if err := os.WriteFile(flag, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	startPilot(t, fastPilot(r, "702", 2), r.pilot)
	got = r.waitJob(t, j.ID, 30*time.Second)
	if got.State != api.JobDone || got.Tasks.Done != 6 {
		t.Fatalf("job ended %s with %+v: an interrupted task was charged an attempt", got.State, got.Tasks)
	}
}

// onMessage is a slog handler that signals ch when a record with message
// msg is logged, and passes every record on.
type onMessage struct {
	msg  string
	ch   chan struct{}
	next slog.Handler
}

func (h onMessage) Enabled(ctx context.Context, l slog.Level) bool { return true }

func (h onMessage) Handle(ctx context.Context, r slog.Record) error {
	if r.Message == h.msg {
		select {
		case h.ch <- struct{}{}:
		default:
		}
	}
	return h.next.Handle(ctx, r)
}

func (h onMessage) WithAttrs(as []slog.Attr) slog.Handler {
	return onMessage{h.msg, h.ch, h.next.WithAttrs(as)}
}

func (h onMessage) WithGroup(g string) slog.Handler {
	return onMessage{h.msg, h.ch, h.next.WithGroup(g)}
}
