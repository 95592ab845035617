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

// A Ruleset is a Policy made into a Landlock ruleset once, for every task
// of a job a worker runs: Start confines one thread of the worker with it
// and starts the task from that thread, so the task runs in a Landlock
// domain of its own (it can signal neither the worker nor its sibling
// tasks) without a launcher process per task. Making the ruleset (an
// O_PATH open and a landlock_add_rule per directory) is what is shared;
// what is per task is one landlock_restrict_self on a fresh thread.
type Ruleset struct {
	fd   int  // the ruleset (O_CLOEXEC); -1 when nothing is enforced
	open bool // Mode auto on a kernel without Landlock: tasks run unconfined
}

// The main goroutine keeps the main thread: no other goroutine runs on
// it, so Start never confines it (a goroutine that exits locked on the
// main thread leaves it wedged, not ended: it would stay confined, and
// be the thread group leader a task's kill(2) names).
func init() { runtime.LockOSThread() }

// versions are go-landlock's configurations by Landlock ABI: what this
// kernel can enforce of V7 (the level the launcher asks for).
var versions = []landlock.Config{landlock.V1, landlock.V2, landlock.V3, landlock.V4, landlock.V5, landlock.V6, landlock.V7}

// NewRuleset makes p's ruleset. Under ModeRequire it fails where the
// kernel cannot enforce all of V7 (as the launcher does); under ModeAuto
// it enforces what the kernel can; under ModeOff it enforces nothing.
// Paths may name descriptors (/proc/self/fd/N): the rule then holds the
// very directory opened.
func NewRuleset(p Policy) (*Ruleset, error) {
	if p.Mode == ModeOff {
		return &Ruleset{fd: -1, open: true}, nil
	}
	sup := Probe()
	switch {
	case p.Mode == ModeRequire && sup.ABI < len(versions):
		return nil, fmt.Errorf("confine: Landlock ABI %d, confinement required needs %d (%v)", sup.ABI, len(versions), sup.Err)
	case sup.ABI == 0:
		return &Ruleset{fd: -1, open: true}, nil
	}
	cfg := versions[min(sup.ABI, len(versions))-1]
	handled := uint64(cfg.HandledAccessFS)
	attr := ll.RulesetAttr{HandledAccessFS: handled, Scoped: uint64(cfg.Scoped)}
	fd, err := ll.LandlockCreateRuleset(&attr, 0)
	if err != nil {
		return nil, fmt.Errorf("confine: landlock_create_ruleset: %w", err)
	}
	rs := &Ruleset{fd: fd}
	const (
		read  = ll.AccessFSExecute | ll.AccessFSReadFile | ll.AccessFSReadDir
		write = ll.AccessFSWriteFile | ll.AccessFSRemoveDir | ll.AccessFSRemoveFile | ll.AccessFSMakeChar | ll.AccessFSMakeDir |
			ll.AccessFSMakeReg | ll.AccessFSMakeSock | ll.AccessFSMakeFifo | ll.AccessFSMakeBlock | ll.AccessFSMakeSym | ll.AccessFSTruncate
		file = ll.AccessFSExecute | ll.AccessFSWriteFile | ll.AccessFSTruncate | ll.AccessFSReadFile
	)
	add := func(path string, access uint64, ignoreMissing bool) error {
		pfd, err := unix.Open(path, unix.O_PATH|unix.O_CLOEXEC, 0)
		if err != nil {
			if ignoreMissing && errors.Is(err, unix.ENOENT) {
				return nil
			}
			return fmt.Errorf("confine: rule for %s: %w", path, err)
		}
		defer unix.Close(pfd)
		var st unix.Stat_t
		if err := unix.Fstat(pfd, &st); err != nil {
			return fmt.Errorf("confine: rule for %s: %w", path, err)
		}
		if st.Mode&unix.S_IFMT != unix.S_IFDIR {
			access &= file // rights on a directory's entries mean nothing on a file
		}
		if access &= handled; access == 0 {
			return nil
		}
		if err := ll.LandlockAddPathBeneathRule(fd, &ll.PathBeneathAttr{AllowedAccess: access, ParentFd: pfd}, 0); err != nil {
			return fmt.Errorf("confine: rule for %s: %w", path, err)
		}
		return nil
	}
	for _, path := range p.Read {
		if err := add(path, read, true); err != nil {
			rs.Close()
			return nil, err
		}
	}
	for _, path := range p.Write {
		if err := add(path, read|write|ll.AccessFSRefer, false); err != nil {
			rs.Close()
			return nil, err
		}
	}
	for _, path := range SystemWrite {
		if err := add(path, (read|write)&file|ll.AccessFSIoctlDev, true); err != nil {
			rs.Close()
			return nil, err
		}
	}
	return rs, nil
}

// Confined reports whether tasks started with rs run confined.
func (rs *Ruleset) Confined() bool { return !rs.open }

// Close releases the ruleset (tasks already started keep their domain).
func (rs *Ruleset) Close() {
	if rs.fd >= 0 {
		unix.Close(rs.fd)
		rs.fd = -1
	}
}

// Start runs start on a thread of its own confined by rs, and keeps that
// thread until release is closed: start must start the task's process
// (fork and exec), which inherits the thread's Landlock domain, and the
// thread must outlive the task, whose parent-death signal follows its
// parent thread. The thread ends with release (it is never reused: it
// stays confined). Start returns start's error, or why the thread could
// not be confined (the task is then not started).
func (rs *Ruleset) Start(start func() error, release <-chan struct{}) error {
	if rs.open {
		return start()
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
			<-release
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
