package bench

import (
	"context"
	"fmt"
	"os/exec"
	"strconv"
	"syscall"
	"time"
)

// Floor is the machine's fork/exec floor for a task's program: the same
// program run Tasks times by Procs plain shell loops at once (one per
// worker of the dispatch run), nothing else.
type Floor struct {
	Procs     int     `json:"procs"`
	Tasks     int     `json:"tasks"`
	MakespanS float64 `json:"makespan_s"`
	TasksPerS float64 `json:"tasks_per_s"`
	// CPUUS is the CPU per task of the loops and the programs they ran.
	CPUUS float64 `json:"cpu_us_per_task"`
}

// loopScript runs "$@" $1 times, as `for i in ...; do prog; done` would.
const loopScript = `n=$1; shift; i=0; while [ $i -lt $n ]; do "$@"; i=$((i+1)); done`

// RunFloor runs argv tasks times, spread over procs shell loops, and
// measures the makespan and the CPU of the loops and their programs
// (RUSAGE_CHILDREN: the caller must not reap other children meanwhile).
func RunFloor(ctx context.Context, argv []string, procs, tasks int) (Floor, error) {
	if procs < 1 || tasks < 1 || len(argv) == 0 {
		return Floor{}, fmt.Errorf("bench: floor: want at least one loop, one task and a program")
	}
	prog, err := exec.LookPath(argv[0])
	if err != nil {
		return Floor{}, fmt.Errorf("bench: floor: %w", err)
	}
	cmds := make([]*exec.Cmd, procs)
	for i := range cmds {
		n := tasks / procs
		if i < tasks%procs {
			n++
		}
		args := append([]string{"-c", loopScript, "sh", strconv.Itoa(n), prog}, argv[1:]...)
		cmds[i] = exec.CommandContext(ctx, "/bin/sh", args...)
	}
	cpu0, begin := cpu(syscall.RUSAGE_CHILDREN), time.Now()
	for i, c := range cmds {
		if err := c.Start(); err != nil {
			for _, s := range cmds[:i] {
				s.Process.Kill()
				s.Wait()
			}
			return Floor{}, fmt.Errorf("bench: floor: %w", err)
		}
	}
	var werr error
	for _, c := range cmds {
		if err := c.Wait(); err != nil && werr == nil {
			werr = fmt.Errorf("bench: floor: %s loop: %w", prog, err)
		}
	}
	makespan := time.Since(begin)
	if werr != nil {
		return Floor{}, werr
	}
	used := cpu(syscall.RUSAGE_CHILDREN) - cpu0
	return Floor{Procs: procs, Tasks: tasks, MakespanS: makespan.Seconds(), TasksPerS: float64(tasks) / makespan.Seconds(),
		CPUUS: float64(used.Microseconds()) / float64(tasks)}, nil
}
