package worker_test

import (
	"context"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/harvest-hpc/harvest/pilotproto"
	"github.com/harvest-hpc/harvest/worker"
	"github.com/harvest-hpc/harvest/worker/confine"
)

func rusage(who int) time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(who, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkExecRunnerTrue runs /bin/true as a task of one job, one after
// another: the worker's own CPU per task (worker-us/task: the task's files,
// the start, the wait) and its children's (task-us/task: the program, and
// when confined the job's runner: receiving the request, fork, exec, wait),
// confined and not; confined, also with an input in its dataset directory
// and with an input that is a link (a ruleset per task). The queue and
// the master are not in it (harvest bench dispatch --exec has them).
func BenchmarkExecRunnerTrue(b *testing.B) {
	// none: no input; entry: an input in its dataset directory (the job's
	// rules name it); link: an input that is a link (each task a ruleset
	// of its own, with its target). Confined, the last two.
	for _, c := range []struct {
		name  string
		mode  confine.Mode
		input string
	}{{"off", confine.ModeOff, ""}, {"auto", confine.ModeAuto, ""}, {"auto-entry", confine.ModeAuto, "entry"}, {"auto-link", confine.ModeAuto, "link"}} {
		mode := c.mode
		b.Run(c.name, func(b *testing.B) {
			dir := b.TempDir()
			r := worker.DefaultExecRunner()
			r.Roots, r.TempRoot = []string{dir}, dir
			if mode != confine.ModeOff {
				exe, err := os.Executable()
				if err != nil {
					b.Fatal(err)
				}
				r.Jail = &confine.Launcher{Exe: exe, Mode: mode}
			}
			defer r.Close()
			out := filepath.Join(dir, "out")
			in := ""
			if c.input != "" {
				ds := filepath.Join(dir, "ds")
				os.MkdirAll(filepath.Join(dir, "shared"), 0o755)
				os.Mkdir(ds, 0o755)
				os.WriteFile(filepath.Join(dir, "shared", "x"), nil, 0o644)
				in = filepath.Join(ds, "x")
				if c.input == "link" {
					os.Symlink(filepath.Join(dir, "shared", "x"), in)
				} else {
					os.WriteFile(in, nil, 0o644)
				}
			}
			self0, child0 := rusage(syscall.RUSAGE_SELF), rusage(syscall.RUSAGE_CHILDREN)
			b.ResetTimer()
			for i := range b.N {
				o := r.Run(context.Background(), pilotproto.Task{ID: int64(i + 1), Attempt: 1, JobID: 1, OutputDir: out,
					Input: in, Output: filepath.Join(out, "x"), Command: []string{"true"}})
				if o.Status != pilotproto.StatusDone {
					b.Fatalf("%s %q", o.Status, o.ErrorTail)
				}
			}
			b.StopTimer()
			r.Close() // the job's runner is reaped: its CPU is counted
			b.ReportMetric(float64((rusage(syscall.RUSAGE_SELF)-self0).Microseconds())/float64(b.N), "worker-us/task")
			b.ReportMetric(float64((rusage(syscall.RUSAGE_CHILDREN)-child0).Microseconds())/float64(b.N), "task-us/task")
		})
	}
}
