// Package slurmtest gives tests a real SLURM cluster: the mini-cluster of
// scripts/minicluster.sh (slurmctld + N slurmd on this machine).
//
// Tests that need it call Require. They run only when HARVEST_SLURM_TESTS=1
// (the test script sets it; CI runs them); then a cluster that cannot be
// started is a failure, never a skip. Packages run in parallel under
// `go test ./...`, so Require holds an exclusive file lock for the life of
// the test: real-SLURM tests of different packages take turns.
package slurmtest

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
)

// lockWait bounds the wait for the cluster lock; the whole suite's
// real-SLURM tests take a few minutes.
const lockWait = 12 * time.Minute

// Env is the variable that enables real-SLURM tests.
const Env = "HARVEST_SLURM_TESTS"

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
	// env is added to every command's environment (a second cluster's
	// LAB, ports and SLURM_CONF); nil for the cluster of the process's
	// own environment.
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
// its ports + 100).
func SecondSpec() Spec {
	num := func(name string, def int) int {
		if n, err := strconv.Atoi(os.Getenv(name)); err == nil && n > 0 {
			return n
		}
		return def
	}
	lab := os.Getenv("LAB_B")
	if lab == "" {
		lab = Lab() + "-b"
	}
	return Spec{Lab: lab, CtldPort: num("CTLD_PORT_B", num("CTLD_PORT", 6817)+100), PortBase: num("PORT_BASE_B", num("PORT_BASE", 17000)+100)}
}

// RequireTwo gives a test two clusters of n nodes each: the one of the
// environment and SecondSpec's. Both are locked (always in this order)
// for the life of the test.
func RequireTwo(t testing.TB, n int) (a, b *Cluster) {
	t.Helper()
	a = Require(t, n)
	spec := SecondSpec()
	if spec.Lab == a.Lab {
		t.Fatalf("the second cluster's LAB_B %s is the first cluster's LAB", spec.Lab)
	}
	conf := filepath.Join(spec.Lab, "etc", "slurm.conf")
	b = &Cluster{Root: a.Root, Nodes: n, Lab: spec.Lab, Conf: conf, env: []string{
		"LAB=" + spec.Lab, "CTLD_PORT=" + strconv.Itoa(spec.CtldPort), "PORT_BASE=" + strconv.Itoa(spec.PortBase),
		"LINK_ETC=0", "SLURM_CONF=" + conf,
	}}
	b.lockAndStart(t)
	return a, b
}

// Require skips t unless real-SLURM tests are enabled, then takes the
// cluster lock and makes sure a cluster of n nodes runs with no jobs.
func Require(t testing.TB, n int) *Cluster {
	t.Helper()
	return RequireWith(t, n, Options{})
}

// RequireWith is Require for a cluster with options: a running cluster
// with other settings is restarted (minicluster.sh start compares the
// whole slurm.conf).
func RequireWith(t testing.TB, n int, o Options) *Cluster {
	t.Helper()
	if !Enabled() {
		t.Skipf("real-SLURM test: set %s=1 (scripts/test.sh does)", Env)
	}
	root, err := RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	// SLURM commands run by the test and by the code under test find this
	// cluster without the /etc/slurm symlink.
	if os.Getenv("SLURM_CONF") == "" {
		os.Setenv("SLURM_CONF", Conf())
	}
	c := &Cluster{Root: root, Nodes: n, Lab: Lab(), Conf: os.Getenv("SLURM_CONF"), opts: o}
	c.lockAndStart(t)
	return c
}

// lockAndStart takes the cluster's test lock for the life of the test and
// makes sure it runs with c.Nodes idle nodes and no jobs.
func (c *Cluster) lockAndStart(t testing.TB) {
	t.Helper()
	lockPath := c.Lab + ".lock"
	lock, err := os.OpenFile(lockPath, os.O_CREATE|os.O_RDWR, 0o666)
	if err != nil {
		t.Fatalf("slurm test lock: %v", err)
	}
	// Wait for our turn, but not forever: a daemon started by hand under
	// `flock` keeps the lock for its whole life, and a hung test is worse
	// than a clear failure.
	waitUntil := time.Now().Add(lockWait)
	for {
		err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			break
		}
		if err != syscall.EWOULDBLOCK {
			t.Fatalf("slurm test lock: %v", err)
		}
		if time.Now().After(waitUntil) {
			t.Fatalf("slurm test lock %s still held after %v (see FLOCK in /proc/locks for the holder)", lockPath, lockWait)
		}
		time.Sleep(500 * time.Millisecond)
	}
	t.Cleanup(func() {
		c.CancelAll(t)
		syscall.Flock(int(lock.Fd()), syscall.LOCK_UN)
		lock.Close()
	})
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
