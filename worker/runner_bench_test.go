package worker_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"sync"
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

// BenchmarkExecGroupTrue hands groups of 100 tasks of one job (true, each
// an entry of the job's dataset directory under the roots, as a pull
// brings them) to a confined runner, as the worker does (StartGroup), at
// 1 and 4 slots: the worker's own CPU and allocations per task
// (worker-us/task, allocs/task: the inputs' checks, the tasks' specs, the
// runner's requests and answers, the outcomes).
func BenchmarkExecGroupTrue(b *testing.B) {
	if sup := confine.Probe(); !sup.Confined(confine.ModeRequire) {
		b.Skipf("this kernel has no Landlock: %v", sup.Err)
	}
	const group = 100
	for _, slots := range []int{1, 4} {
		b.Run(fmt.Sprintf("slots-%d", slots), func(b *testing.B) {
			dir := b.TempDir()
			exe, err := os.Executable()
			if err != nil {
				b.Fatal(err)
			}
			r := worker.DefaultExecRunner()
			r.Roots, r.TempRoot = []string{dir}, dir
			r.Jail = &confine.Launcher{Exe: exe, Mode: confine.ModeRequire}
			defer r.Close()
			ds, out := filepath.Join(dir, "ds"), filepath.Join(dir, "out")
			os.Mkdir(ds, 0o755)
			for i := range group {
				os.WriteFile(filepath.Join(ds, strconv.Itoa(i)), nil, 0o644)
			}
			cmd := []string{"true"}
			groups := make([][]pilotproto.Task, b.N)
			for n := range groups {
				ts := make([]pilotproto.Task, group)
				for i := range ts {
					id := int64(n*group + i + 1)
					name := strconv.Itoa(i)
					ts[i] = pilotproto.Task{ID: id, Attempt: 1, JobID: 1, Name: name, Input: ds + "/" + name, OutputDir: out,
						Output: out + "/" + name, Command: cmd, Env: pilotproto.TaskEnv(1, id)}
				}
				groups[n] = ts
			}
			var ms0, ms1 runtime.MemStats
			runtime.ReadMemStats(&ms0)
			self0 := rusage(syscall.RUSAGE_SELF)
			b.ResetTimer()
			for _, ts := range groups {
				done := make(chan struct{})
				left := len(ts)
				var mu sync.Mutex
				r.StartGroup(ts, slots, func(idx []int, os []worker.Outcome) {
					for _, o := range os {
						if o.Status != pilotproto.StatusDone {
							b.Errorf("%s %q", o.Status, o.ErrorTail)
						}
					}
					mu.Lock()
					left -= len(idx)
					if left == 0 {
						close(done)
					}
					mu.Unlock()
				})
				<-done
			}
			b.StopTimer()
			runtime.ReadMemStats(&ms1)
			self := rusage(syscall.RUSAGE_SELF) - self0
			tasks := float64(b.N * group)
			b.ReportMetric(float64(self.Microseconds())/tasks, "worker-us/task")
			b.ReportMetric(float64(ms1.Mallocs-ms0.Mallocs)/tasks, "allocs/task")
			b.ReportMetric(float64(ms1.TotalAlloc-ms0.TotalAlloc)/tasks, "B/task")
		})
	}
}
