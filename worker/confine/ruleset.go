package confine

import (
	"fmt"

	"golang.org/x/sys/unix"

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

// taskRules are the file rules of each task's own domain
// (RunnerPolicy.Tasks), opened once (O_PATH) and kept: the common
// ruleset is made from them once, and a task that may read one path more
// (its entry's link target) gets a ruleset of its own made from them
// and that path, without opening them again.
type taskRules struct {
	handled, scoped uint64
	rules           []pathRule
}

type pathRule struct {
	fd     int
	access uint64
}

// The access rights of the rules (as go-landlock's RODirs, RWDirs with
// refer, and RWFiles with ioctl for the device files).
const (
	readFile  = ll.AccessFSExecute | ll.AccessFSReadFile
	readDir   = readFile | ll.AccessFSReadDir
	writeFile = readFile | ll.AccessFSWriteFile | ll.AccessFSTruncate
)

// newTaskRules opens p's paths for the tasks' own domains on a kernel of
// Landlock ABI abi (a read path that does not exist is left out, as in
// the runner's own; a write path must exist).
func newTaskRules(p Policy, abi int) (*taskRules, error) {
	cfgs := []landlock.Config{landlock.V1, landlock.V2, landlock.V3, landlock.V4, landlock.V5, landlock.V6, landlock.V7}
	cfg := cfgs[min(abi, len(cfgs))-1]
	tr := &taskRules{handled: uint64(cfg.HandledAccessFS), scoped: uint64(cfg.Scoped)}
	ok := false
	defer func() {
		if !ok {
			tr.close()
		}
	}()
	for _, path := range readPaths(p.Read) {
		if err := tr.add(path, readFile, readDir, false); err != nil {
			return nil, err
		}
	}
	for _, path := range p.Write {
		if err := tr.add(path, writeFile, tr.handled&^ll.AccessFSIoctlDev, true); err != nil {
			return nil, err
		}
	}
	for _, path := range SystemWrite {
		if err := tr.add(path, writeFile|ll.AccessFSIoctlDev, 0, false); err != nil {
			return nil, err
		}
	}
	ok = true
	return tr, nil
}

// add opens path (links followed: the worker's paths, or its descriptors
// by /proc/self/fd/N) with the rights for a file or a directory; a
// missing path is left out unless must.
func (tr *taskRules) add(path string, file, dir uint64, must bool) error {
	fd, err := unix.Open(path, unix.O_PATH|unix.O_CLOEXEC, 0)
	if err != nil {
		if !must && err == unix.ENOENT {
			return nil
		}
		return fmt.Errorf("confine: %s: %w", path, err)
	}
	tr.addFD(fd, file, dir)
	return nil
}

func (tr *taskRules) addFD(fd int, file, dir uint64) {
	access := dir
	var st unix.Stat_t
	if unix.Fstat(fd, &st) == nil && st.Mode&unix.S_IFMT != unix.S_IFDIR {
		access = file
	}
	if access&tr.handled == 0 {
		unix.Close(fd)
		return
	}
	tr.rules = append(tr.rules, pathRule{fd: fd, access: access & tr.handled})
}

// ruleset makes a ruleset of the rules and, read, more paths the task
// may read: paths the worker resolved, opened here refusing any link on
// the way (one planted since is not followed; the path is then left
// out, and the task cannot read it).
func (tr *taskRules) ruleset(read []string) (int, error) {
	attr := ll.RulesetAttr{HandledAccessFS: tr.handled, Scoped: tr.scoped}
	fd, err := ll.LandlockCreateRuleset(&attr, 0)
	if err != nil {
		return -1, fmt.Errorf("confine: landlock_create_ruleset: %w", err)
	}
	add := func(r pathRule) error {
		return ll.LandlockAddPathBeneathRule(fd, &ll.PathBeneathAttr{AllowedAccess: r.access, ParentFd: r.fd}, 0)
	}
	for _, r := range tr.rules {
		if err := add(r); err != nil {
			unix.Close(fd)
			return -1, fmt.Errorf("confine: landlock_add_rule: %w", err)
		}
	}
	for _, path := range read {
		pfd, err := unix.Openat2(unix.AT_FDCWD, path, &unix.OpenHow{Flags: unix.O_PATH | unix.O_CLOEXEC,
			Resolve: unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS})
		if err != nil {
			continue
		}
		access := uint64(readDir)
		var st unix.Stat_t
		if unix.Fstat(pfd, &st) == nil && st.Mode&unix.S_IFMT != unix.S_IFDIR {
			access = readFile
		}
		err = add(pathRule{fd: pfd, access: access & tr.handled})
		unix.Close(pfd)
		if err != nil {
			unix.Close(fd)
			return -1, fmt.Errorf("confine: landlock_add_rule %s: %w", path, err)
		}
	}
	return fd, nil
}

func (tr *taskRules) close() {
	for _, r := range tr.rules {
		unix.Close(r.fd)
	}
	tr.rules = nil
}
