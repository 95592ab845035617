package worker

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/harvest-hpc/harvest/pilotproto"
)

// Outcome is what a Runner reports for one task; the worker adds the ids.
type Outcome struct {
	Status    string // pilotproto.Status*
	ExitCode  int
	StartedAt time.Time
	Duration  time.Duration
	ErrorTail string
	// Signal ended the task (0: it exited). The worker needs it to tell a
	// task the batch system stopped from one that failed.
	Signal syscall.Signal
}

// Runner runs one task. When ctx is cancelled it must stop the task
// promptly and return (the worker decides the status from the cause).
type Runner interface {
	Run(ctx context.Context, t pilotproto.Task) Outcome
}

// Substitute replaces the placeholders {input} {output} {job} {task} in
// every argument, in one pass (a value that contains a placeholder is not
// expanded again). {job} and {task} are the job and task ids, as `harvest
// submit` documents.
func Substitute(argv []string, t pilotproto.Task) []string {
	r := strings.NewReplacer("{input}", t.Input, "{output}", t.Output,
		"{job}", strconv.FormatInt(t.JobID, 10), "{task}", strconv.FormatInt(t.ID, 10))
	out := make([]string, len(argv))
	for i, a := range argv {
		out[i] = r.Replace(a)
	}
	return out
}

// LogPaths returns where a task's stdout and stderr go:
// OUTDIR/.harvest/logs/<task id>.<attempt>.out|.err.
func LogPaths(t pilotproto.Task, fallback string) (string, string) {
	dir := fallback
	if t.OutputDir != "" {
		dir = filepath.Join(t.OutputDir, ".harvest", "logs")
	}
	base := filepath.Join(dir, fmt.Sprintf("%d.%d", t.ID, t.Attempt))
	return base + ".out", base + ".err"
}

// ExecRunner runs the task's command without a shell, in its own process
// group (so a kill reaches everything it started), with stdout and stderr
// in per-task files and a per-task timeout.
type ExecRunner struct {
	KillGrace   time.Duration // SIGTERM to SIGKILL
	TailBytes   int           // size of the error tail
	FallbackLog string        // log directory for tasks without an output directory
	Env         []string      // base environment (os.Environ() when nil)
}

// DefaultExecRunner returns an ExecRunner with a 2 s kill grace and a 2 KB tail.
func DefaultExecRunner() *ExecRunner {
	return &ExecRunner{KillGrace: 2 * time.Second, TailBytes: 2048, FallbackLog: filepath.Join(os.TempDir(), "harvest-logs")}
}

// Run implements Runner.
func (r *ExecRunner) Run(ctx context.Context, t pilotproto.Task) Outcome {
	start := time.Now()
	fail := func(code int, err error) Outcome {
		return Outcome{Status: pilotproto.StatusFailed, ExitCode: code, StartedAt: start, Duration: time.Since(start), ErrorTail: err.Error()}
	}
	argv := Substitute(t.Command, t)
	if len(argv) == 0 || argv[0] == "" {
		return fail(-1, errors.New("empty command"))
	}
	outPath, errPath := LogPaths(t, r.FallbackLog)
	if err := os.MkdirAll(filepath.Dir(outPath), 0o755); err != nil {
		return fail(-1, fmt.Errorf("log directory: %w", err))
	}
	if t.Output != "" {
		// Best effort: the command may create its output itself.
		_ = os.MkdirAll(filepath.Dir(t.Output), 0o755)
	}
	stdout, err := os.Create(outPath)
	if err != nil {
		return fail(-1, fmt.Errorf("stdout file: %w", err))
	}
	defer stdout.Close()
	stderr, err := os.Create(errPath)
	if err != nil {
		return fail(-1, fmt.Errorf("stderr file: %w", err))
	}
	defer stderr.Close()

	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdout, cmd.Stderr = stdout, stderr
	cmd.Dir = t.WorkDir
	if cmd.Dir == "" {
		cmd.Dir = t.OutputDir
	}
	base := r.Env
	if base == nil {
		base = os.Environ()
	}
	cmd.Env = append(append(append([]string(nil), base...),
		"HARVEST_TASK_ID="+strconv.FormatInt(t.ID, 10),
		"HARVEST_JOB_ID="+strconv.FormatInt(t.JobID, 10),
		"HARVEST_ATTEMPT="+strconv.Itoa(t.Attempt)), t.Env...)
	// Own process group so kill reaches the children; SIGKILL if the
	// worker itself dies (kill -9), so no orphan keeps writing.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		code := -1
		if errors.Is(err, exec.ErrNotFound) || errors.Is(err, os.ErrNotExist) {
			code = 127
		}
		return fail(code, fmt.Errorf("start %s: %w", argv[0], err))
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()

	var timeout <-chan time.Time
	if t.TimeoutS > 0 {
		tm := time.NewTimer(time.Duration(t.TimeoutS) * time.Second)
		defer tm.Stop()
		timeout = tm.C
	}
	timedOut := false
	var waitErr error
	select {
	case waitErr = <-done:
	case <-ctx.Done():
		waitErr = r.kill(cmd, done)
	case <-timeout:
		timedOut = true
		waitErr = r.kill(cmd, done)
	}
	o := Outcome{StartedAt: start, Duration: time.Since(start), ExitCode: cmd.ProcessState.ExitCode()}
	if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		o.Signal = ws.Signal()
	}
	switch {
	case timedOut:
		o.Status = pilotproto.StatusTimeout
	case waitErr == nil:
		o.Status = pilotproto.StatusDone
	default:
		o.Status = pilotproto.StatusFailed
	}
	if o.Status != pilotproto.StatusDone {
		o.ErrorTail = tail(errPath, r.TailBytes)
		if timedOut {
			o.ErrorTail += fmt.Sprintf("\n[harvest] killed after the task timeout of %ds", t.TimeoutS)
		}
	}
	return o
}

// kill sends SIGTERM to the task's process group, SIGKILL after the grace.
func (r *ExecRunner) kill(cmd *exec.Cmd, done <-chan error) error {
	pgid := cmd.Process.Pid
	_ = syscall.Kill(-pgid, syscall.SIGTERM)
	t := time.NewTimer(r.KillGrace)
	defer t.Stop()
	select {
	case err := <-done:
		_ = syscall.Kill(-pgid, syscall.SIGKILL) // stragglers in the group
		return err
	case <-t.C:
		_ = syscall.Kill(-pgid, syscall.SIGKILL)
		return <-done
	}
}

// tail returns the last n bytes of a file ("" if unreadable).
func tail(path string, n int) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return ""
	}
	off := st.Size() - int64(n)
	if off < 0 {
		off = 0
	}
	b, err := io.ReadAll(io.NewSectionReader(f, off, st.Size()-off))
	if err != nil {
		return ""
	}
	return string(b)
}

// NoopRunner finishes every task at once without running anything: the
// dispatch benchmark's task, so that only harvest's own overhead is timed.
type NoopRunner struct{}

// Run implements Runner.
func (NoopRunner) Run(context.Context, pilotproto.Task) Outcome {
	return Outcome{Status: pilotproto.StatusDone, StartedAt: time.Now()}
}

// SleepRunner sleeps D per task in process (the scaled-down thesis shape).
type SleepRunner struct{ D time.Duration }

// Run implements Runner.
func (s SleepRunner) Run(ctx context.Context, _ pilotproto.Task) Outcome {
	start := time.Now()
	t := time.NewTimer(s.D)
	defer t.Stop()
	select {
	case <-t.C:
		return Outcome{Status: pilotproto.StatusDone, StartedAt: start, Duration: time.Since(start)}
	case <-ctx.Done():
		return Outcome{Status: pilotproto.StatusFailed, ExitCode: -1, StartedAt: start, Duration: time.Since(start)}
	}
}
