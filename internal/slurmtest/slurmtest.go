// Package slurmtest gives tests a real SLURM cluster: the mini-cluster of
// scripts/minicluster.sh (slurmctld + N slurmd on this machine).
//
// Tests that need it call Require. They run only when HARVEST_SLURM_TESTS=1
// (the test script sets it; CI runs them); then a cluster that cannot be
// started is a failure, never a skip. Packages run in parallel under
// `go test ./...`, so Require holds an exclusive file lock of a cluster for
// the life of the test: real-SLURM tests of different packages take turns
// on it, or, with HARVEST_SLURM_LABS=2, on whichever of two clusters is
// free.
package slurmtest

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// lockWait bounds the wait for the cluster lock; the whole suite's
// real-SLURM tests take a few minutes.
const lockWait = 12 * time.Minute

// Env is the variable that enables real-SLURM tests.
const Env = "HARVEST_SLURM_TESTS"

// TwoEnv set to "later" skips the tests that need both clusters at once
// (RequireTwo), for a run that takes them in a step of its own.
const TwoEnv = "HARVEST_SLURM_TWO"

// DefaultLab is the mini-cluster's directory when LAB is not set.
const DefaultLab = "/var/tmp/harvest-slurm"

// Lab is the mini-cluster's directory: $LAB (as scripts/minicluster.sh
// reads it) or DefaultLab. Several clusters run side by side with their own
// LAB, CTLD_PORT and PORT_BASE (and LINK_ETC=0); each has its own test lock.
func Lab() string {
	if l := os.Getenv("LAB"); l != "" {
		return l
	}
	return DefaultLab
}

// Conf is the slurm.conf of the cluster in Lab.
func Conf() string { return filepath.Join(Lab(), "etc", "slurm.conf") }

// Enabled reports whether real-SLURM tests run.
func Enabled() bool { return os.Getenv(Env) == "1" }

// Cluster is a running mini-cluster.
type Cluster struct {
	Root  string // repository root
	Nodes int
	// Lab and Conf are the cluster's directory and slurm.conf.
	Lab, Conf string
	// env is added to every command's environment: the cluster's LAB,
	// ports and SLURM_CONF, so its own commands reach it whatever the
	// process's environment says by then.
	env []string
	// opts are the settings the cluster is started with.
	opts Options
}

// Options are the mini-cluster settings a test needs besides the node
// count; the zero value is the default cluster (one partition, batch).
type Options struct {
	// Preempt adds the preemptible partition PreemptPartition over the
	// same nodes (minicluster.sh PREEMPT=1), with GraceTime seconds of
	// grace and PreemptMode CANCEL.
	Preempt   bool
	GraceTime int
	// Extra is appended to slurm.conf (minicluster.sh EXTRA_CONF).
	Extra string
	// JobComp makes slurmctld write the job completion log
	// (JobCompType=jobcomp/filetxt, minicluster.sh JOBCOMP=1) at
	// JobCompLog().
	JobComp bool
}

// JobCompLog is where a cluster started with Options.JobComp logs the
// jobs that ended (minicluster.sh's JOBCOMP_LOC default).
func (c *Cluster) JobCompLog() string { return filepath.Join(c.Lab, "run", "log", "jobcomp.log") }

// PreemptPartition is the preemptible partition of Options.Preempt.
const PreemptPartition = "harvest"

// env is what minicluster.sh start reads for these options. Every knob is
// set, so a cluster started with other settings is restarted.
func (o Options) env() []string {
	e := []string{"PREEMPT=0", "EXTRA_CONF=" + o.Extra}
	if o.Preempt {
		e = []string{"PREEMPT=1", "PREEMPT_PARTITION=" + PreemptPartition, "PREEMPT_MODE=CANCEL",
			"PREEMPT_GRACE=" + strconv.Itoa(o.GraceTime), "EXTRA_CONF=" + o.Extra}
	}
	if o.JobComp {
		return append(e, "JOBCOMP=1", "JOBCOMP_LOC=")
	}
	return append(e, "JOBCOMP=0")
}

// Spec names a mini-cluster other than the one of the environment: its
// directory and ports (scripts/minicluster.sh's LAB, CTLD_PORT, PORT_BASE).
type Spec struct {
	Lab                string
	CtldPort, PortBase int
}

// SecondSpec is the second cluster of two-cluster tests: LAB_B,
// CTLD_PORT_B and PORT_BASE_B, by default next to the first (Lab()+"-b",
// its ports + 100), as the environment said when the tests began.
func SecondSpec() Spec {
	pool()
	return second
}

var second Spec

// envInt is the positive integer in the environment variable name, else def.
func envInt(name string, def int) int {
	if n, err := strconv.Atoi(os.Getenv(name)); err == nil && n > 0 {
		return n
	}
	return def
}

// secondSpec reads SecondSpec from the environment.
func secondSpec() Spec {
	lab := os.Getenv("LAB_B")
	if lab == "" {
		lab = Lab() + "-b"
	}
	return Spec{Lab: lab, CtldPort: envInt("CTLD_PORT_B", envInt("CTLD_PORT", 6817)+100), PortBase: envInt("PORT_BASE_B", envInt("PORT_BASE", 17000)+100)}
}

// RequireTwo gives a test two clusters of n nodes each: the one of the
// environment and SecondSpec's. Both are locked (always in this order)
// for the life of the test.
func RequireTwo(t testing.TB, n int) (a, b *Cluster) {
	t.Helper()
	skipUnlessEnabled(t)
	if os.Getenv(TwoEnv) == "later" {
		// A test that needs both clusters while other packages' tests hold
		// one of them would keep the other idle for as long as it waits
		// (12 min in one CI run); scripts/test.sh runs these tests in a
		// step of their own after the others instead.
		t.Skipf("%s=later: two-cluster tests run in their own step (scripts/test.sh)", TwoEnv)
	}
	specs := pool()
	second := SecondSpec()
	if second.Lab == specs[0].Lab {
		t.Fatalf("the second cluster's LAB_B %s is the first cluster's LAB", second.Lab)
	}
	a = newCluster(t, specs[0], n, Options{})
	a.env = specs[0].env()
	a.use(t, a.lock(t, []Spec{specs[0]}))
	b = newCluster(t, second, n, Options{})
	b.env = second.env()
	b.lock(t, []Spec{second})
	a.start(t)
	b.start(t)
	return a, b
}

// Require skips t unless real-SLURM tests are enabled, then takes a
// cluster's lock and makes sure a cluster of n nodes runs with no jobs.
func Require(t testing.TB, n int) *Cluster {
	t.Helper()
	return RequireWith(t, n, Options{})
}

// RequireWith is Require for a cluster with options: a running cluster
// with other settings is restarted (minicluster.sh start compares the
// whole slurm.conf).
//
// With HARVEST_SLURM_LABS=2 (scripts/test.sh sets it) the test gets
// whichever of the environment's cluster and SecondSpec's is free first,
// so two packages' real-SLURM tests run at once; for the life of the test
// the process's LAB, CTLD_PORT, PORT_BASE and SLURM_CONF name the cluster
// it got, so the code under test and Lab() find it.
func RequireWith(t testing.TB, n int, o Options) *Cluster {
	t.Helper()
	skipUnlessEnabled(t)
	specs := pool()
	c := newCluster(t, specs[0], n, o)
	got := c.lock(t, specs)
	// The cluster's own commands name it explicitly: its cleanup runs
	// after the environment is restored.
	c.Lab, c.Conf, c.env = got.Lab, got.conf(), got.env()
	c.use(t, got)
	c.start(t)
	return c
}

func skipUnlessEnabled(t testing.TB) {
	t.Helper()
	if !Enabled() {
		t.Skipf("real-SLURM test: set %s=1 (scripts/test.sh does)", Env)
	}
}

func newCluster(t testing.TB, s Spec, n int, o Options) *Cluster {
	t.Helper()
	root, err := RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	return &Cluster{Root: root, Nodes: n, Lab: s.Lab, Conf: s.conf(), opts: o}
}

// use points the process's environment at s for the life of t: SLURM
// commands run by the code under test (and Lab(), Conf()) find this
// cluster without the /etc/slurm symlink.
func (c *Cluster) use(t testing.TB, s Spec) {
	for _, kv := range s.env() {
		k, v, _ := strings.Cut(kv, "=")
		t.Setenv(k, v)
	}
}

// labsEnv is the variable that lets tests use two clusters at once.
const labsEnv = "HARVEST_SLURM_LABS"

var (
	poolOnce sync.Once
	labPool  []Spec
)

// pool is the clusters Require may use, read once from the environment
// (Require changes LAB and the ports while a test runs): the environment's
// own, and SecondSpec's when HARVEST_SLURM_LABS=2.
func pool() []Spec {
	poolOnce.Do(func() {
		second = secondSpec()
		labPool = []Spec{{Lab: Lab(), CtldPort: envInt("CTLD_PORT", 6817), PortBase: envInt("PORT_BASE", 17000)}, second}
		if os.Getenv(labsEnv) != "2" {
			labPool = labPool[:1]
		}
	})
	return labPool
}

func (s Spec) conf() string { return filepath.Join(s.Lab, "etc", "slurm.conf") }

// env is what scripts/minicluster.sh and the SLURM commands need to reach
// the cluster of s. The environment's own cluster keeps its LINK_ETC.
func (s Spec) env() []string {
	e := []string{"LAB=" + s.Lab, "CTLD_PORT=" + strconv.Itoa(s.CtldPort), "PORT_BASE=" + strconv.Itoa(s.PortBase),
		"SLURM_CONF=" + s.conf()}
	if s != pool()[0] {
		e = append(e, "LINK_ETC=0")
	}
	return e
}

// lock takes the test lock of the first of specs to be free, for the life
// of the test, and returns it.
func (c *Cluster) lock(t testing.TB, specs []Spec) Spec {
	t.Helper()
	locks := make([]*os.File, len(specs))
	for i, s := range specs {
		f, err := os.OpenFile(s.Lab+".lock", os.O_CREATE|os.O_RDWR, 0o666)
		if err != nil {
			t.Fatalf("slurm test lock: %v", err)
		}
		locks[i] = f
	}
	// Wait for our turn, but not forever: a daemon started by hand under
	// `flock` keeps the lock for its whole life, and a hung test is worse
	// than a clear failure.
	waitUntil := time.Now().Add(lockWait)
	for {
		for i, f := range locks {
			err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
			if err != nil && err != syscall.EWOULDBLOCK {
				t.Fatalf("slurm test lock: %v", err)
			}
			if err != nil {
				continue
			}
			for j, other := range locks {
				if j != i {
					other.Close()
				}
			}
			t.Cleanup(func() {
				syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
				f.Close()
			})
			return specs[i]
		}
		if time.Now().After(waitUntil) {
			t.Fatalf("slurm test locks of %v still held after %v (see FLOCK in /proc/locks for the holder)", specs, lockWait)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// start makes sure the cluster runs with c.Nodes idle nodes and no jobs,
// and leaves it so when t ends (before its lock is released).
func (c *Cluster) start(t testing.TB) {
	t.Helper()
	t.Cleanup(func() { c.CancelAll(t) })
	start := c.Command(filepath.Join(c.Root, "scripts", "minicluster.sh"), "start", strconv.Itoa(c.Nodes))
	start.Env = append(append(os.Environ(), c.env...), c.opts.env()...)
	out, err := start.CombinedOutput()
	if err != nil {
		t.Fatalf("start the SLURM mini-cluster %s with %d nodes: %v\n%s", c.Lab, c.Nodes, err, out)
	}
	c.CancelAll(t)
	c.ResumeAll(t)
}

// Command is a command run against this cluster (its SLURM_CONF).
func (c *Cluster) Command(name string, args ...string) *exec.Cmd {
	cmd := exec.Command(name, args...)
	if c.env != nil {
		cmd.Env = append(os.Environ(), c.env...)
	}
	return cmd
}

// ResumeAll brings drained or down nodes back (a test that drains a node
// must not change the next test's cluster) and waits until all n are idle.
func (c *Cluster) ResumeAll(t testing.TB) {
	t.Helper()
	c.Command("scontrol", "update", fmt.Sprintf("nodename=n[1-%d]", c.Nodes), "state=resume").Run()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		out, err := c.Command("sinfo", "-h", "-N", "-t", "idle", "-o", "%N").Output()
		if err == nil && len(strings.Fields(string(out))) >= c.Nodes {
			return
		}
		time.Sleep(200 * time.Millisecond)
	}
	out, _ := c.Command("sinfo", "-N").CombinedOutput()
	t.Fatalf("not all %d nodes idle after resuming:\n%s", c.Nodes, out)
}

// RepoRoot finds the repository root (the directory holding go.mod).
func RepoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("go.mod not found above the working directory")
		}
		dir = parent
	}
}

func (c *Cluster) script(args ...string) ([]byte, error) {
	return c.Command(filepath.Join(c.Root, "scripts", "minicluster.sh"), args...).CombinedOutput()
}

// Script runs scripts/minicluster.sh with args (e.g. "stop-ctld").
func (c *Cluster) Script(t testing.TB, args ...string) {
	t.Helper()
	if out, err := c.script(args...); err != nil {
		t.Fatalf("minicluster.sh %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

// Run runs a SLURM command as user ("" or "root" = root) and returns stdout.
func (c *Cluster) Run(t testing.TB, user string, name string, args ...string) string {
	t.Helper()
	var cmd *exec.Cmd
	if user == "" || user == "root" {
		cmd = c.Command(name, args...)
	} else {
		cmd = c.Command("runuser", append([]string{"-u", user, "--", name}, args...)...)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	cmd.Dir = "/tmp"
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s %s (as %q): %v: %s", name, strings.Join(args, " "), user, err, stderr.String())
	}
	return strings.TrimSpace(string(out))
}

// Sbatch submits a batch job as user and returns its id. args are sbatch
// options; the job runs `script` with /bin/sh.
func (c *Cluster) Sbatch(t testing.TB, user, script string, args ...string) string {
	t.Helper()
	a := append([]string{"--parsable", "-o", "/dev/null", "--wrap", script}, args...)
	id := c.Run(t, user, "sbatch", a...)
	if i := strings.IndexByte(id, ';'); i >= 0 {
		id = id[:i]
	}
	return id
}

// CancelAll cancels every job and waits until none is left.
func (c *Cluster) CancelAll(t testing.TB) {
	c.Command("scancel", "--full", "-u", "root").Run()
	for _, u := range []string{"alice", "bob", "carol"} {
		c.Command("scancel", "-u", u).Run()
	}
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		out, err := c.Command("squeue", "-h", "-t", "PENDING,RUNNING,CONFIGURING,COMPLETING,SUSPENDED", "-o", "%i").Output()
		if err == nil && len(bytes.TrimSpace(out)) == 0 {
			// and all nodes idle again
			out, err = c.Command("sinfo", "-h", "-N", "-o", "%T").Output()
			if err == nil && !bytes.Contains(out, []byte("alloc")) && !bytes.Contains(out, []byte("completing")) && !bytes.Contains(out, []byte("mixed")) {
				return
			}
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Logf("warning: jobs or busy nodes left after CancelAll")
}

// JobField returns one field of `scontrol -o show job ID` (e.g. "StartTime").
func (c *Cluster) JobField(t testing.TB, id, field string) string {
	t.Helper()
	out := c.Run(t, "", "scontrol", "-o", "show", "job", id)
	for _, kv := range strings.Fields(out) {
		if k, v, ok := strings.Cut(kv, "="); ok && k == field {
			return v
		}
	}
	t.Fatalf("job %s has no field %s: %s", id, field, out)
	return ""
}

// JobState returns the job's state (PENDING, RUNNING, COMPLETED...).
func (c *Cluster) JobState(t testing.TB, id string) string { return c.JobField(t, id, "JobState") }

// StartTime returns a job's start time (zero if not started).
func (c *Cluster) StartTime(t testing.TB, id string) time.Time {
	t.Helper()
	if s := c.JobState(t, id); s == "PENDING" {
		return time.Time{}
	}
	v := c.JobField(t, id, "StartTime")
	ts, err := time.ParseInLocation("2006-01-02T15:04:05", v, time.Local)
	if err != nil {
		t.Fatalf("job %s StartTime %q: %v", id, v, err)
	}
	return ts
}

// WaitFor polls cond until it holds or d passes (SLURM cannot tell us when
// a job changes state, so tests watch it with a deadline).
func WaitFor(t testing.TB, what string, d time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		if cond() {
			return
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Fatalf("timed out after %v waiting for %s", d, what)
}

// Try runs a command as user ("" or "root" = root) and returns its
// combined output and error, for commands expected to fail.
func (c *Cluster) Try(user string, name string, args ...string) (string, error) {
	var cmd *exec.Cmd
	if user == "" || user == "root" {
		cmd = c.Command(name, args...)
	} else {
		cmd = c.Command("runuser", append([]string{"-u", user, "--", name}, args...)...)
	}
	cmd.Dir = "/tmp"
	out, err := cmd.CombinedOutput()
	return strings.TrimSpace(string(out)), err
}
