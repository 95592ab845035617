// Package confine runs a task under Landlock (Linux 5.13+): the task may
// read and execute the system directories and the directories it is given,
// write only its job's output directory and its own temporary directory,
// and neither signal nor ptrace (read /proc/PID/environ of) processes
// outside its sandbox, the pilot included. Everything else the pilot
// account can reach (harvest's state directory and checkpoint, other
// users' outputs, the pilot's home) is out of its reach.
//
// Landlock restricts the calling thread and what it starts. The worker
// makes a job's Ruleset once and starts each of its tasks from a thread of
// its own confined with it (Ruleset.Start): the task runs in a Landlock
// domain of its own, at the cost of one fork and exec. `harvest
// __harvest-confine POLICY ARGV...` (Main, first thing in main) confines a
// command run by hand the same way. Where the kernel lacks Landlock the
// task runs unconfined (ModeAuto: best effort, and Probe says so) or not
// at all (ModeRequire).
package confine

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"syscall"

	"github.com/landlock-lsm/go-landlock/landlock"
	ll "github.com/landlock-lsm/go-landlock/landlock/syscall"
	"golang.org/x/sys/unix"
)

// Arg is the first argument that makes the binary a confining launcher.
const Arg = "__harvest-confine"

// Mode says what to do where the kernel lacks Landlock.
type Mode string

// Modes.
const (
	ModeAuto    Mode = "auto"    // confine where the kernel can, say so where not
	ModeRequire Mode = "require" // refuse to run a task unconfined
	ModeOff     Mode = "off"     // never confine
)

// ParseMode checks a mode given on the command line.
func ParseMode(s string) (Mode, error) {
	switch m := Mode(s); m {
	case ModeAuto, ModeRequire, ModeOff:
		return m, nil
	}
	return "", fmt.Errorf("confinement %q: want auto, require or off", s)
}

// SystemRead are the directories every task may read and execute: the
// system's programs, libraries and configuration, /proc and /sys (other
// processes' private files stay closed: Landlock forbids ptrace-like
// access out of the sandbox), the random devices (and SystemWrite's), and
// the resolver's directory. Not all of /dev: a root pilot's task read the
// disks (/dev/vda: every file, Landlock bypassed), any pilot's the
// terminals and /dev/shm, where TMPDIR=/dev/shm put every job's
// temporary directories and logs. A site adds devices with --task-read.
var SystemRead = []string{"/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc", "/opt",
	"/proc", "/sys", "/dev/random", "/dev/urandom", "/run/systemd/resolve"}

// linkedSystem maps each entry of SystemRead that is a link to a
// directory beneath another entry (/bin -> usr/bin, /lib -> usr/lib on a
// merged-/usr system) to that entry: in a list of read paths that holds
// both, the link's own rule adds nothing (Landlock checks the path an
// access resolves to, /usr/bin/..., beneath /usr) but a rule more to
// copy into every task's domain (landlock_restrict_self copies every
// rule of the domain it nests in, and the task's own). Found once.
var linkedSystem = sync.OnceValue(func() map[string]string {
	m := map[string]string{}
	for _, p := range SystemRead {
		if fi, err := os.Lstat(p); err != nil || fi.Mode()&os.ModeSymlink == 0 {
			continue
		}
		real, err := filepath.EvalSymlinks(p)
		if fi, ferr := os.Stat(real); err != nil || ferr != nil || !fi.IsDir() {
			continue
		}
		for _, q := range SystemRead {
			if fi, err := os.Lstat(q); q == p || err != nil || !fi.IsDir() {
				continue // (a link, which Lstat does not call a directory)
			}
			if real == q || strings.HasPrefix(real, strings.TrimSuffix(q, "/")+"/") {
				m[p] = q
				break
			}
		}
	}
	return m
})

// readPaths is read without the links of SystemRead into another entry
// read holds too (linkedSystem).
func readPaths(read []string) []string {
	links := linkedSystem()
	out := make([]string, 0, len(read))
	for _, p := range read {
		if q, ok := links[p]; ok && slices.Contains(read, q) {
			continue
		}
		out = append(out, p)
	}
	return out
}

// SystemWrite are the device files every task may write.
var SystemWrite = []string{"/dev/null", "/dev/zero", "/dev/full", "/dev/tty"}

// Policy is what one task may reach. A path may name a descriptor the
// launcher inherits (/proc/self/fd/N): the rule then holds the very
// directory the worker opened, whatever was renamed or linked since.
type Policy struct {
	Mode  Mode     `json:"mode"`
	Read  []string `json:"read,omitempty"`  // read and execute beneath each
	Write []string `json:"write,omitempty"` // read, write, create, remove, rename beneath each
	Dir   string   `json:"dir,omitempty"`   // working directory
	Path  string   `json:"path"`            // PATH the program is looked up in
}

// Support is what the kernel offers.
type Support struct {
	ABI int   // Landlock ABI version, 0: none
	Err error // why there is none
}

// Probe asks the kernel for its Landlock ABI.
func Probe() Support {
	v, err := ll.LandlockGetABIVersion()
	if err != nil || v < 1 {
		if err == nil {
			err = errors.New("no Landlock: ABI 0")
		}
		return Support{Err: err}
	}
	return Support{ABI: v}
}

// Describe says whether tasks run confined under mode m, in one phrase for
// logs and the status page.
func (s Support) Describe(m Mode) string {
	switch {
	case m == ModeOff:
		return "no (confinement off)"
	case s.ABI > 0:
		return fmt.Sprintf("yes (Landlock ABI %d)", s.ABI)
	default:
		return fmt.Sprintf("no (kernel without Landlock: %v)", s.Err)
	}
}

// Confined reports whether tasks run confined under mode m.
func (s Support) Confined(m Mode) bool { return m != ModeOff && s.ABI > 0 }

// Launcher says how tasks are confined: the worker confines them in
// process under Mode (Ruleset); Exe is a binary whose main calls Main,
// for a confined command run by hand (`harvest __harvest-confine POLICY
// ARGV...`).
type Launcher struct {
	Exe  string
	Mode Mode
}

// Self returns a launcher on the running binary.
func Self(m Mode) (*Launcher, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("confine: own executable: %w", err)
	}
	return &Launcher{Exe: exe, Mode: m}, nil
}

// Exit codes of the launcher when the task cannot start (as a shell's).
const (
	ExitCannotRun = 126
	ExitNotFound  = 127
)

// Main turns the process into the launcher when it was started as one:
// it confines itself and execs the task, and never returns then. It does
// nothing for any other command line.
func Main() {
	runner := len(os.Args) == 3 && os.Args[1] == RunnerArg
	if !runner && (len(os.Args) < 4 || os.Args[1] != Arg) {
		return
	}
	// The main goroutine keeps its thread until the runner has confined
	// itself and set its handlers (serveRunner), or the launcher has
	// exec'd its task. Only these processes lock it: every other (the
	// agent, the queue, the pilot, harvest sim) links the package too,
	// and a locked main goroutine hands its P to another thread at each
	// of its waits.
	runtime.LockOSThread()
	if runner {
		code, err := serveRunner(os.Args[2])
		if err != nil {
			fmt.Fprintf(os.Stderr, "harvest: task runner: %v\n", err)
		}
		os.Exit(code)
	}
	code, err := launch(os.Args[2], os.Args[3:])
	fmt.Fprintf(os.Stderr, "harvest: %v\n", err)
	os.Exit(code)
}

// launch only returns when the task could not be started.
func launch(spec string, argv []string) (int, error) {
	var p Policy
	if err := json.Unmarshal([]byte(spec), &p); err != nil {
		return ExitCannotRun, fmt.Errorf("confine: bad policy: %w", err)
	}
	prog, err := LookPath(argv[0], p.Path)
	if err != nil {
		return ExitNotFound, fmt.Errorf("start %s: %w", argv[0], err)
	}
	if p.Dir != "" {
		if err := os.Chdir(p.Dir); err != nil {
			return ExitCannotRun, fmt.Errorf("working directory: %w", err)
		}
	}
	if p.Mode != ModeOff {
		if err := restrict(p); err != nil {
			return ExitCannotRun, fmt.Errorf("confine the task: %w", err)
		}
	}
	// The descriptors the rules were made from are not the task's.
	cloexecFrom3()
	err = syscall.Exec(prog, argv, os.Environ())
	return ExitCannotRun, fmt.Errorf("start %s: %w", argv[0], err)
}

// cloexecFrom3 marks every descriptor from 3 up close-on-exec: one
// close_range (Linux 5.11) where the kernel has it, not a fcntl per
// number (1,021 system calls at each runner's start).
func cloexecFrom3() {
	if unix.CloseRange(3, ^uint(0), unix.CLOSE_RANGE_CLOEXEC) == nil {
		return
	}
	for fd := 3; fd < 1024; fd++ {
		unix.CloseOnExec(fd)
	}
}

// restrict applies p to this process (all its threads) and what it execs.
func restrict(p Policy) error { return restrictWith(p, required) }

// restrictWith is restrict with the rules' handled accesses and scopes
// from cfg.
func restrictWith(p Policy, cfg landlock.Config) error {
	if p.Mode != ModeRequire {
		cfg = cfg.BestEffort()
	}
	var rules []landlock.Rule
	for _, path := range readPaths(p.Read) {
		if isFile(path) {
			rules = append(rules, landlock.ROFiles(path).IgnoreIfMissing())
		} else {
			rules = append(rules, landlock.RODirs(path).IgnoreIfMissing())
		}
	}
	for _, path := range p.Write {
		if isFile(path) {
			rules = append(rules, landlock.RWFiles(path))
		} else {
			rules = append(rules, landlock.RWDirs(path).WithRefer())
		}
	}
	rules = append(rules, landlock.RWFiles(SystemWrite...).WithIoctlDev().IgnoreIfMissing())
	return cfg.Restrict(rules...)
}

func isFile(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && !fi.IsDir()
}

// LookPath finds a program as a shell would with PATH=path: a name with a
// slash is taken as it is.
func LookPath(name, path string) (string, error) {
	if strings.Contains(name, "/") {
		if err := executable(name); err != nil {
			return "", err
		}
		return name, nil
	}
	for _, dir := range filepath.SplitList(path) {
		if dir == "" {
			dir = "."
		}
		p := filepath.Join(dir, name)
		if executable(p) == nil {
			return p, nil
		}
	}
	return "", fmt.Errorf("%q not found in PATH %s: %w", name, path, os.ErrNotExist)
}

func executable(p string) error {
	fi, err := os.Stat(p)
	if err != nil {
		return err
	}
	if fi.IsDir() || fi.Mode().Perm()&0o111 == 0 {
		return fmt.Errorf("%s: not an executable file: %w", p, os.ErrPermission)
	}
	return nil
}
