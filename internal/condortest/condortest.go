// Package condortest gives tests a real HTCondor pool: the personal pool
// of scripts/minipool.sh (collector, negotiator, schedd and N startds
// standing in for N nodes, on this machine, built from ../shared/htcondor).
//
// Tests that need it call Require. They run only when
// HARVEST_HTCONDOR_TESTS=1 (the test script sets it; CI runs them); then a
// pool that cannot be started is a failure, never a skip. Require holds an
// exclusive file lock of the pool for the life of the test, so packages
// running in parallel take turns on it.
package condortest

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/harvest-hpc/harvest/internal/slurmtest"
)

// Env is the variable that enables real-HTCondor tests.
const Env = "HARVEST_HTCONDOR_TESTS"

// DefaultLab is the pool's directory when POOL_LAB is not set.
const DefaultLab = "/var/tmp/harvest-condor"

// Submitter is the ordinary account harvest submits pilots as: HTCondor
// refuses jobs owned by root or by its daemon account (CONDOR_IDS).
const Submitter = "harvest"

// Users are the pool's own users in tests (their jobs are foreign jobs).
var Users = []string{"alice", "bob", "carol"}

// lockWait bounds the wait for the pool lock.
const lockWait = 12 * time.Minute

// Lab is the pool's directory: $POOL_LAB (as scripts/minipool.sh reads it)
// or DefaultLab.
func Lab() string {
	if l := os.Getenv("POOL_LAB"); l != "" {
		return l
	}
	return DefaultLab
}

// Enabled reports whether real-HTCondor tests run.
func Enabled() bool { return os.Getenv(Env) == "1" }

// Pool is a running personal pool.
type Pool struct {
	Root  string // repository root
	Nodes int
	Lab   string
	// Shared is a directory every account may write (mode 1777): jobs'
	// initial directories and outputs.
	Shared string
	// Env is what a process needs to use the pool: CONDOR_CONFIG, the
	// tools in PATH, the libraries in LD_LIBRARY_PATH.
	Env []string
}

// Require returns the pool with n nodes, started if needed, with no jobs
// in its queue, locked for t's life; t is skipped when real-HTCondor
// tests are off. It also sets t's environment (t.Setenv) to the pool's,
// so condor_* commands that t starts reach it.
func Require(t testing.TB, n int) *Pool {
	t.Helper()
	if !Enabled() {
		t.Skipf("real-HTCondor test: set %s=1 to run it on the personal pool of scripts/minipool.sh (needs root and ../shared/htcondor)", Env)
	}
	if os.Geteuid() != 0 {
		t.Fatalf("%s=1 needs root: the pool runs jobs as several accounts", Env)
	}
	root, err := slurmtest.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	p := &Pool{Root: root, Nodes: n, Lab: Lab()}
	p.Shared = filepath.Join(p.Lab, "shared")
	lock(t, p.Lab+".lock")
	script := filepath.Join(root, "scripts", "minipool.sh")
	if out, err := exec.Command(filepath.Join(root, "scripts", "minicluster.sh"), append([]string{"users"}, append(Users, Submitter)...)...).CombinedOutput(); err != nil {
		t.Fatalf("creating test accounts: %v\n%s", err, out)
	}
	start := exec.Command(script, "start", strconv.Itoa(n))
	start.Env = append(os.Environ(), "POOL_LAB="+p.Lab)
	if out, err := start.CombinedOutput(); err != nil {
		t.Fatalf("minipool.sh start %d: %v\n%s", n, err, out)
	}
	envCmd := exec.Command(script, "env")
	envCmd.Env = start.Env
	out, err := envCmd.Output()
	if err != nil {
		t.Fatalf("minipool.sh env: %v", err)
	}
	// Lines of: export NAME=value[:$NAME...]
	for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		l = strings.TrimPrefix(l, "export ")
		k, v, ok := strings.Cut(l, "=")
		if !ok {
			continue
		}
		v = strings.Trim(v, `'`)
		switch k {
		case "PATH":
			v = strings.TrimSuffix(v, ":$PATH") + ":" + os.Getenv("PATH")
		case "LD_LIBRARY_PATH":
			v = v[:strings.IndexAny(v+"$", "$")]
		}
		p.Env = append(p.Env, k+"="+v)
		t.Setenv(k, v)
	}
	if err := os.MkdirAll(p.Shared, 0o755); err != nil {
		t.Fatal(err)
	}
	os.Chmod(p.Shared, 0o777|os.ModeSticky)
	p.RemoveAll(t)
	t.Cleanup(func() { p.RemoveAll(t) })
	return p
}

func lock(t testing.TB, path string) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o666)
	if err != nil {
		t.Fatalf("htcondor test lock: %v", err)
	}
	deadline := time.Now().Add(lockWait)
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			break
		}
		if err != syscall.EWOULDBLOCK {
			t.Fatalf("htcondor test lock: %v", err)
		}
		if time.Now().After(deadline) {
			t.Fatalf("htcondor test lock %s still held after %v", path, lockWait)
		}
		time.Sleep(500 * time.Millisecond)
	}
	t.Cleanup(func() {
		syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
		f.Close()
	})
}

// Command is a condor_* (or any) command in the pool's environment.
func (p *Pool) Command(name string, args ...string) *exec.Cmd {
	cmd := exec.Command(name, args...)
	cmd.Env = append(os.Environ(), p.Env...)
	cmd.Dir = p.Shared
	return cmd
}

// Try runs name as user ("" or "root" = root) and returns its trimmed
// standard output.
func (p *Pool) Try(user, name string, args ...string) (string, error) {
	cmd := p.Command(name, args...)
	if user != "" && user != "root" {
		cmd = p.Command("runuser", append([]string{"-u", user, "--", name}, args...)...)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("%s %s (as %q): %w: %s", name, strings.Join(args, " "), user, err, strings.TrimSpace(stderr.String()))
	}
	return strings.TrimSpace(string(out)), nil
}

// Run is Try that fails t.
func (p *Pool) Run(t testing.TB, user, name string, args ...string) string {
	t.Helper()
	out, err := p.Try(user, name, args...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// Submit submits one job of user running /bin/sh -c script, with extra
// submit-description lines, and returns its id (cluster.proc).
func (p *Pool) Submit(t testing.TB, user, script string, extra ...string) string {
	t.Helper()
	desc := strings.Join(append([]string{
		"universe = vanilla",
		"executable = /bin/sh",
		fmt.Sprintf("arguments = \"-c '%s'\"", strings.ReplaceAll(script, "'", "''")),
		"transfer_executable = false",
		"output = /dev/null", "error = /dev/null",
		"request_cpus = 1", "request_memory = 64",
	}, extra...), "\n") + "\nqueue 1\n"
	cmd := p.Command("runuser", "-u", user, "--", "condor_submit", "-terse", "-")
	cmd.Stdin = strings.NewReader(desc)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("condor_submit as %s: %v: %s", user, err, stderr.String())
	}
	id, _, _ := strings.Cut(strings.TrimSpace(string(out)), " ")
	return id
}

// Attr is one attribute of a job in the queue ("" if the job is gone).
func (p *Pool) Attr(t testing.TB, id, attr string) string {
	t.Helper()
	return p.Run(t, "", "condor_q", "-allusers", id, "-af", attr)
}

// RemoveAll removes every job and waits until the queue is empty.
func (p *Pool) RemoveAll(t testing.TB) {
	t.Helper()
	p.Command("condor_rm", "-all").Run()
	WaitFor(t, "an empty queue", 60*time.Second, func() bool {
		out, err := p.Try("", "condor_q", "-allusers", "-af", "ClusterId")
		return err == nil && out == ""
	})
}

// WaitFor polls cond until it holds, failing t after d.
func WaitFor(t testing.TB, what string, d time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", d, what)
		}
		time.Sleep(200 * time.Millisecond)
	}
}
