package bench

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// procTimes is one process's CPU time from /proc/PID/stat: its own (user
// + system, all its threads) and that of its children it has reaped.
type procTimes struct {
	self, children time.Duration
}

// clockTick is the unit of /proc/PID/stat's times (USER_HZ, 100 on Linux).
const clockTick = 10 * time.Millisecond

// parsePIDStat reads utime, stime, cutime and cstime (fields 14-17) of a
// /proc/PID/stat line; the command name (field 2) may hold spaces and
// parentheses, so the fields are counted from its closing one.
func parsePIDStat(line string) (procTimes, error) {
	i := strings.LastIndexByte(line, ')')
	if i < 0 {
		return procTimes{}, fmt.Errorf("stat: no command name")
	}
	f := strings.Fields(line[i+1:]) // from field 3 (state)
	if len(f) < 15 {
		return procTimes{}, fmt.Errorf("stat: %d fields", len(f)+2)
	}
	var v [4]time.Duration
	for k := range v {
		n, err := strconv.ParseInt(f[11+k], 10, 64)
		if err != nil {
			return procTimes{}, fmt.Errorf("stat field %d: %w", 14+k, err)
		}
		v[k] = time.Duration(n) * clockTick
	}
	return procTimes{self: v[0] + v[1], children: v[2] + v[3]}, nil
}

func readPIDStat(pid int) (procTimes, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return procTimes{}, err
	}
	return parsePIDStat(string(b))
}

// childPIDs lists pid's children (/proc/PID/task/*/children).
func childPIDs(pid int) []int {
	files, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/children", pid))
	var out []int
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		for _, s := range strings.Fields(string(b)) {
			if n, err := strconv.Atoi(s); err == nil {
				out = append(out, n)
			}
		}
	}
	return out
}

// WorkerSplit is the workers' CPU during a run by component: the worker
// processes themselves, their children that are alive at the end (the
// jobs' task runners, with --exec and confinement), and the processes
// those children and the workers reaped (the tasks).
type WorkerSplit struct {
	WorkerUS float64 `json:"worker_us_per_task"`
	RunnerUS float64 `json:"runner_us_per_task"`
	TaskUS   float64 `json:"task_us_per_task"`
}

// splitSample is what sampleSplit saw of the workers and their children.
type splitSample struct {
	worker, runner, task time.Duration
	ok                   bool
}

// sampleSplit reads the CPU of the worker processes pids and of their
// children: a worker's own time is the worker's, a child's own time the
// runner's, and what a child or a worker reaped the tasks'.
func sampleSplit(pids []int) splitSample {
	var s splitSample
	for _, pid := range pids {
		w, err := readPIDStat(pid)
		if err != nil {
			return splitSample{}
		}
		s.worker += w.self
		s.task += w.children
		for _, c := range childPIDs(pid) {
			if t, err := readPIDStat(c); err == nil {
				s.runner += t.self
				s.task += t.children
			}
		}
	}
	s.ok = true
	return s
}

// perTask returns the CPU between a and b per task (nil if either sample
// failed).
func (b splitSample) perTask(a splitSample, tasks int) *WorkerSplit {
	if !a.ok || !b.ok || tasks <= 0 {
		return nil
	}
	us := func(d time.Duration) float64 { return float64(d.Microseconds()) / float64(tasks) }
	return &WorkerSplit{WorkerUS: us(b.worker - a.worker), RunnerUS: us(b.runner - a.runner), TaskUS: us(b.task - a.task)}
}
