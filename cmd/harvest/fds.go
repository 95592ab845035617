package main

import (
	"os"
	"strconv"

	"golang.org/x/sys/unix"
)

// closeInheritedOnExec marks close-on-exec every descriptor beyond stdin,
// stdout and stderr that this process holds at its start: what its parent
// left open (a shell's saved descriptors, a harness's pipe, a file a
// script opened) went on into every child (the workers of harvest bench
// and of a pilot, and through them each task's runner; the agent's
// sbatch and adapters), which could read or write it and kept a pipe's
// reader waiting. Go opens its own descriptors close-on-exec, and
// exec.Cmd.ExtraFiles still hands on the ones a child is given. No
// harvest command takes a descriptor from its parent (the task runner,
// which does, has started before this).
func closeInheritedOnExec() {
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return // no /proc: nothing known to mark
	}
	for _, e := range ents {
		if fd, err := strconv.Atoi(e.Name()); err == nil && fd > 2 {
			unix.CloseOnExec(fd)
		}
	}
}
