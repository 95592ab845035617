package main

import (
	"fmt"
	"os/exec"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// A descriptor harvest inherited without close-on-exec (here opened so,
// as a shell leaves its redirections) reaches no child once main's first
// step has run: before, the workers of harvest bench dispatch held the
// bench's parent's descriptors, and each task runner in turn.
func TestChildrenInheritNoStrayDescriptor(t *testing.T) {
	fd, err := unix.Open("/dev/null", unix.O_RDONLY, 0) // no O_CLOEXEC
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	child := func() string {
		out, _ := exec.Command("/bin/sh", "-c", fmt.Sprintf("if [ -e /proc/$$/fd/%d ]; then echo open; else echo closed; fi", fd)).Output()
		return strings.TrimSpace(string(out))
	}
	if got := child(); got != "open" {
		t.Fatalf("before: the child finds descriptor %d %q, want open (the test cannot see a leak)", fd, got)
	}
	closeInheritedOnExec()
	if got := child(); got != "closed" {
		t.Errorf("descriptor %d is %s in a child, want closed", fd, got)
	}
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0); err != nil {
		t.Errorf("descriptor %d no longer open here: %v", fd, err)
	}
}
