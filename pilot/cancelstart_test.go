package pilot_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/harvest-hpc/harvest/pilotproto"
	"github.com/harvest-hpc/harvest/queue/api"
	"github.com/harvest-hpc/harvest/worker"
	"github.com/harvest-hpc/harvest/worker/confine"
)

// workerEvents is a slog handler that passes on the pilot of every
// "worker left" (it deregistered) and "worker lost" (its timeout) record.
type workerEvents struct {
	left, lost chan string
	next       slog.Handler
}

func (h workerEvents) Enabled(ctx context.Context, l slog.Level) bool { return true }

func (h workerEvents) Handle(ctx context.Context, r slog.Record) error {
	ch := map[string]chan string{"worker left": h.left, "worker lost": h.lost}[r.Message]
	if ch != nil {
		pilot := ""
		r.Attrs(func(a slog.Attr) bool {
			if a.Key == "pilot" {
				pilot = a.Value.String()
			}
			return true
		})
		if pilot == "" {
			// "worker lost" names the worker (pilot-random).
			r.Attrs(func(a slog.Attr) bool {
				if a.Key == "worker" {
					pilot, _, _ = strings.Cut(a.Value.String(), "-")
				}
				return true
			})
		}
		select {
		case ch <- pilot:
		default:
		}
	}
	return h.next.Handle(ctx, r)
}

func (h workerEvents) WithAttrs(as []slog.Attr) slog.Handler {
	return workerEvents{h.left, h.lost, h.next.WithAttrs(as)}
}

func (h workerEvents) WithGroup(g string) slog.Handler {
	return workerEvents{h.left, h.lost, h.next.WithGroup(g)}
}

// runnerOf is the pid of parent's job task runner (its child running
// `harvest __harvest-runner`), or 0.
func runnerOf(parent int) int {
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		s := string(b)
		f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
		if len(f) < 2 || f[1] != strconv.Itoa(parent) {
			continue
		}
		if c, _ := os.ReadFile("/proc/" + e.Name() + "/cmdline"); strings.Contains(string(c), confine.RunnerArg) {
			return pid
		}
	}
	return 0
}

// TestAPilotCancelledWhileItsRunnerStartsExitsAtOnceAndLeaves is issue
// 33's pilot that held its node after scancel. SLURM signals every
// process of the pilot job, so a cancel that comes as the pilot starts
// its first task also hits the job's task runner while the runner is in
// the Go runtime's start, where SIGTERM kills it. The worker waited for
// that runner's start forever: the pilot did not stop, never deregistered,
// and held its node until SLURM's SIGKILL (5 s later); the master counted
// it, and held its tasks, until the worker timeout. Here, three times, the
// runner is caught as it appears (SIGSTOP), then SIGTERM goes to it and to
// the pilot, and SIGCONT, as SLURM sends: the pilot must exit within a
// moment and its master hear it leave (its worker timeout is a minute,
// so only the deregistration can). max_attempts 1: a stop charged as a
// failed attempt would fail the job.
func TestAPilotCancelledWhileItsRunnerStartsExitsAtOnceAndLeaves(t *testing.T) {
	if !confine.Probe().Confined(confine.ModeAuto) {
		t.Skip("no Landlock here: tasks are not run by a job's runner")
	}
	bin := buildHarvest(t)
	r := startQueue(t)
	ds := filepath.Join(r.data, "startstop")
	const n = 6
	for i := range n {
		os.MkdirAll(filepath.Join(ds, fmt.Sprintf("t%d", i)), 0o755)
	}
	one := 1
	flag := filepath.Join(ds, "go")
	j, err := r.user.Submit(context.Background(), api.JobSpec{Dataset: ds, BatchSize: 1, MaxAttempts: &one,
		Command: []string{"sh", "-c", `while [ ! -e "$1/../go" ]; do sleep 0.05; done; echo ok > "$2"`, "task", "{input}", "{output}"}})
	if err != nil {
		t.Fatal(err)
	}
	mc := fastPilot(r, "800", 2)
	mc.Master.WorkerTimeout, mc.Master.ReconnectGrace = time.Minute, time.Minute
	ev := workerEvents{left: make(chan string, 16), lost: make(chan string, 16), next: mc.Master.Logger.Handler()}
	mc.Master.Logger = slog.New(ev)
	startPilot(t, mc, r.pilot)
	r.waitMaster(t, "800")

	for round := range 3 {
		id := strconv.Itoa(801 + round)
		p := startPilotProcess(t, bin, r, id, "--slots", "1", "--worker-timeout", "1m", "--reconnect-grace", "1m", "--log-level", "info")
		var runner int
		waitFor(t, "pilot "+id+"'s task runner to start", 30*time.Second, func() bool {
			runner = runnerOf(p.Process.Pid)
			return runner > 0
		})
		syscall.Kill(runner, syscall.SIGSTOP)
		syscall.Kill(runner, syscall.SIGTERM)
		syscall.Kill(p.Process.Pid, syscall.SIGTERM)
		syscall.Kill(runner, syscall.SIGCONT)
		exited := make(chan error, 1)
		go func() { exited <- p.Wait() }()
		select {
		case err := <-exited:
			var ee *exec.ExitError
			if err != nil && !errors.As(err, &ee) {
				t.Fatal(err)
			}
		case <-time.After(5 * time.Second):
			p.Process.Kill()
			<-exited
			b, _ := os.ReadFile(filepath.Join(r.state, "pilot-"+id+".log"))
			t.Fatalf("round %d: pilot %s did not exit within 5 s of SIGTERM, when SLURM would kill it (KillWait, at least 5 s): the node held until then; its log:\n%s", round, id, b)
		}
		select {
		case got := <-ev.left:
			if got != id {
				t.Fatalf("round %d: worker of pilot %s left, want %s", round, got, id)
			}
		case got := <-ev.lost:
			t.Fatalf("round %d: the master lost pilot %s's worker instead of hearing it leave", round, got)
		case <-time.After(10 * time.Second):
			t.Fatalf("round %d: the master did not hear pilot %s's worker leave", round, id)
		}
	}
	if err := os.WriteFile(flag, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	got := r.waitJob(t, j.ID, 60*time.Second)
	if got.State != api.JobDone || got.Tasks.Done != n {
		t.Fatalf("job ended %s with %+v: a stopped pilot's task was charged an attempt", got.State, got.Tasks)
	}
}

// stuckRunner runs every task until release is closed, whatever its
// context says: a task that does not stop when the pilot does.
type stuckRunner struct {
	started chan struct{}
	release chan struct{}
}

func (s stuckRunner) Run(ctx context.Context, t pilotproto.Task) worker.Outcome {
	select {
	case s.started <- struct{}{}:
	default:
	}
	<-s.release
	return worker.Outcome{Status: pilotproto.StatusDone, StartedAt: time.Now()}
}

// gateRunner runs each task as a no-op once open is closed.
type gateRunner struct{ open chan struct{} }

func (g gateRunner) Run(ctx context.Context, t pilotproto.Task) worker.Outcome {
	select {
	case <-g.open:
		return worker.Outcome{Status: pilotproto.StatusDone, StartedAt: time.Now()}
	case <-ctx.Done():
		return worker.Outcome{Status: pilotproto.StatusInterrupted, StartedAt: time.Now()}
	}
}

// TestAPilotWhoseTaskDoesNotStopStillLeaves: a pilot stops within its
// shutdown timeout whatever its tasks do, and must still deregister: the
// worker's last request ("leaving") had the same deadline as the wait for
// its tasks and was never sent once that wait used it up, so the master
// held what the worker had until its worker timeout (a minute here)
// instead of requeuing it at once.
func TestAPilotWhoseTaskDoesNotStopStillLeaves(t *testing.T) {
	r := startQueue(t)
	j := r.submit(t, 4, 1, `echo ok > "$2"`)
	mc := fastPilot(r, "850", 2)
	mc.Master.WorkerTimeout, mc.Master.ReconnectGrace = time.Minute, time.Minute
	ev := workerEvents{left: make(chan string, 16), lost: make(chan string, 16), next: mc.Master.Logger.Handler()}
	mc.Master.Logger = slog.New(ev)
	// The master's own worker runs nothing until pilot 851 holds a task.
	gate := make(chan struct{})
	mc.Worker.Runner = gateRunner{gate}
	startPilot(t, mc, r.pilot)
	r.waitMaster(t, "850")

	stuck := stuckRunner{started: make(chan struct{}, 1), release: make(chan struct{})}
	defer close(stuck.release)
	wc := fastPilot(r, "851", 1)
	wc.Worker.Runner = stuck
	wc.Worker.ShutdownTimeout = 2 * time.Second
	p := startPilot(t, wc, r.pilot)
	select {
	case <-stuck.started:
	case <-time.After(20 * time.Second):
		t.Fatal("pilot 851 started no task")
	}
	close(gate)
	p.cancel()
	select {
	case <-p.done:
		p.done <- nil
	case <-time.After(10 * time.Second):
		t.Fatal("pilot 851 did not stop within 10 s")
	}
	select {
	case got := <-ev.left:
		if got != "851" {
			t.Fatalf("worker of pilot %s left, want 851", got)
		}
	case got := <-ev.lost:
		t.Fatalf("the master lost pilot %s's worker instead of hearing it leave", got)
	case <-time.After(10 * time.Second):
		t.Fatal("the master did not hear pilot 851's worker leave")
	}
	got := r.waitJob(t, j.ID, 30*time.Second)
	if got.State != api.JobDone || got.Tasks.Done != 4 {
		t.Fatalf("job ended %s with %+v", got.State, got.Tasks)
	}
}
