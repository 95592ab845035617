package confine

import (
	"fmt"
	"runtime"

	"github.com/landlock-lsm/go-landlock/landlock"
	ll "github.com/landlock-lsm/go-landlock/landlock/syscall"
)

// A Ruleset is a Landlock ruleset made once and applied per task, in the
// task's process before its exec (spawn): each task runs in a Landlock
// domain of its own. The runner makes one that only scopes signals and
// abstract sockets (its own domain already holds the job's file rules):
// a task, nested in it, can then signal neither the runner nor its
// sibling tasks.
type Ruleset struct {
	fd int // the ruleset (O_CLOEXEC); -1 when nothing is enforced
}

// The main goroutine keeps the main thread: the runner serves on it, and
// starts and signals every task from it (serveRunner).
func init() { runtime.LockOSThread() }

// scopeRuleset makes the ruleset that only scopes (Landlock ABI 6 and
// later; before, there is no scoping to add and the tasks share the
// runner's domain).
func scopeRuleset() (*Ruleset, error) {
	sup := Probe()
	if sup.ABI < 6 {
		return &Ruleset{fd: -1}, nil
	}
	attr := ll.RulesetAttr{Scoped: uint64(landlock.V6.Scoped)}
	fd, err := ll.LandlockCreateRuleset(&attr, 0)
	if err != nil {
		return nil, fmt.Errorf("confine: landlock_create_ruleset: %w", err)
	}
	return &Ruleset{fd: fd}, nil
}
