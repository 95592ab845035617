package confine

import (
	"errors"
	"fmt"
	"runtime"
	"syscall"

	"github.com/landlock-lsm/go-landlock/landlock"
	ll "github.com/landlock-lsm/go-landlock/landlock/syscall"
	"golang.org/x/sys/unix"
)

// A Ruleset is a Landlock ruleset made once and applied per task to a
// thread of its own (Start): each task runs in a Landlock domain of its
// own. The runner makes one that only scopes signals and abstract sockets
// (its own domain already holds the job's file rules): a task, nested in
// it, can then signal neither the runner's main thread nor its sibling
// tasks.
type Ruleset struct {
	fd   int  // the ruleset (O_CLOEXEC); -1 when nothing is enforced
	open bool // the kernel cannot scope: tasks share the runner's domain
}

// The main goroutine keeps the main thread: no other goroutine runs on
// it, so Start never confines it (a goroutine that exits locked on the
// main thread leaves it wedged, not ended: it would stay confined, and be
// the thread group leader a task's kill(2) names).
func init() { runtime.LockOSThread() }

// scopeRuleset makes the ruleset that only scopes (Landlock ABI 6 and
// later; before, there is no scoping to add).
func scopeRuleset() (*Ruleset, error) {
	sup := Probe()
	if sup.ABI < 6 {
		return &Ruleset{fd: -1, open: true}, nil
	}
	attr := ll.RulesetAttr{Scoped: uint64(landlock.V6.Scoped)}
	fd, err := ll.LandlockCreateRuleset(&attr, 0)
	if err != nil {
		return nil, fmt.Errorf("confine: landlock_create_ruleset: %w", err)
	}
	return &Ruleset{fd: fd}, nil
}

// Start runs start on a thread of its own confined by rs and, if it
// succeeded, then after on the same thread, which then ends (it is never
// reused: it stays confined). start must start the task's process (fork
// and exec), which inherits the thread's Landlock domain; after waits for
// the task: the task's parent-death signal follows its parent thread,
// and only that thread's domain may signal it. Start returns start's
// error, or why the thread could not be confined (nothing started).
func (rs *Ruleset) Start(start func() error, after func()) error {
	if rs.open {
		if err := start(); err != nil {
			return err
		}
		go after()
		return nil
	}
	errc := make(chan error, 1)
	go func() {
		// Locked and never unlocked: the thread exits with the goroutine.
		runtime.LockOSThread()
		if unix.Gettid() == unix.Getpid() {
			errc <- errors.New("confine: refusing to confine the main thread")
			return
		}
		if err := rs.restrictThread(); err != nil {
			errc <- err
			return
		}
		err := start()
		errc <- err
		if err == nil {
			after()
		}
	}()
	return <-errc
}

// restrictThread confines the calling thread (only it: no TSYNC).
func (rs *Ruleset) restrictThread() error {
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("confine: prctl(PR_SET_NO_NEW_PRIVS): %w", err)
	}
	if err := ll.LandlockRestrictSelf(rs.fd, 0); err != nil {
		if errors.Is(err, syscall.E2BIG) {
			return fmt.Errorf("confine: too many stacked Landlock domains: %w", err)
		}
		return fmt.Errorf("confine: landlock_restrict_self: %w", err)
	}
	return nil
}
