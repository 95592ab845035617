package pilot_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

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
