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

// Two mini-clusters run side by side on one machine (one shared munged,
// node names n1..n8 in both, state and spool per LAB): their job ids
// start at 1 in both, and a cancel in one leaves the other's job alone.
func TestTwoClustersRunSideBySide(t *testing.T) {
	a, b := RequireTwo(t, 2)
	if a.Conf == b.Conf || a.Conf == "" {
		t.Fatalf("confs %q and %q", a.Conf, b.Conf)
	}
	ja := a.Sbatch(t, "alice", "sleep 60", "-N1", "-D", "/tmp")
	jb := b.Sbatch(t, "alice", "sleep 60", "-N1", "-D", "/tmp")
	running := func(c *Cluster, id string) func() bool {
		return func() bool { return c.JobState(t, id) == "RUNNING" }
	}
	WaitFor(t, "both jobs running", 20*time.Second, func() bool { return running(a, ja)() && running(b, jb)() })
	b.Run(t, "", "scancel", jb)
	WaitFor(t, "b's job cancelled", 20*time.Second, func() bool { return b.JobState(t, jb) == "CANCELLED" })
	if s := a.JobState(t, ja); s != "RUNNING" {
		t.Fatalf("a's job %s is %s after b's job %s was cancelled", ja, s, jb)
	}
	if got := a.Run(t, "", "sinfo", "-h", "-o", "%D"); got != "2" {
		t.Fatalf("a has %q nodes", got)
	}
}

// With two clusters in the pool, a test takes the one whose lock is free:
// here the first is held by another holder (another package's test).
func TestLockTakesTheFreeCluster(t *testing.T) {
	dir := t.TempDir()
	specs := []Spec{{Lab: filepath.Join(dir, "a"), CtldPort: 1, PortBase: 1}, {Lab: filepath.Join(dir, "b"), CtldPort: 2, PortBase: 2}}
	held, err := os.OpenFile(specs[0].Lab+".lock", os.O_CREATE|os.O_RDWR, 0o666)
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	if err := syscall.Flock(int(held.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		t.Fatal(err)
	}
	var got Spec
	t.Run("first held", func(t *testing.T) {
		got = (&Cluster{}).lock(t, specs)
	})
	if got != specs[1] {
		t.Fatalf("took %+v while %s was held, want %+v", got, specs[0].Lab, specs[1])
	}
	// The subtest's end released b: with a free, the first free one is a.
	syscall.Flock(int(held.Fd()), syscall.LOCK_UN)
	t.Run("both free", func(t *testing.T) {
		got = (&Cluster{}).lock(t, specs)
	})
	if got != specs[0] {
		t.Fatalf("took %+v with both free, want the first, %+v", got, specs[0])
	}
}

// Two clusters restarted at once (each with a new slurm.conf, so each stops
// and starts again) share one munged: neither stops it while the other
// needs it, and they do not both start one. Before minicluster.sh took a
// machine-wide lock around munged, one cluster's stop killed munged while
// the other, mid-restart, started its own, and that start failed on the
// lock the exiting daemon still held (CI on 8b1719f).
func TestTwoClustersRestartAtOnce(t *testing.T) {
	a, b := RequireTwo(t, 2)
	for round := 1; round <= 3; round++ {
		var wg sync.WaitGroup
		outs := make([][]byte, 2)
		errs := make([]error, 2)
		for i, c := range []*Cluster{a, b} {
			o := c.opts
			// a new comment line is a new slurm.conf: the start restarts
			o.Extra = fmt.Sprintf("# restart round %d", round)
			cmd := c.Command(filepath.Join(c.Root, "scripts", "minicluster.sh"), "start", strconv.Itoa(c.Nodes))
			cmd.Env = append(append(os.Environ(), c.env...), o.env()...)
			wg.Add(1)
			go func() {
				defer wg.Done()
				outs[i], errs[i] = cmd.CombinedOutput()
			}()
		}
		wg.Wait()
		for i, c := range []*Cluster{a, b} {
			if errs[i] != nil {
				t.Fatalf("round %d: restart %s: %v\n%s", round, c.Lab, errs[i], outs[i])
			}
			if got := c.Run(t, "", "sinfo", "-h", "-o", "%D"); got != "2" {
				t.Fatalf("round %d: %s has %q nodes", round, c.Lab, got)
			}
		}
		if err := exec.Command("sh", "-c", "munge -n </dev/null | unmunge >/dev/null").Run(); err != nil {
			t.Fatalf("round %d: munged does not answer after both restarts: %v", round, err)
		}
	}
	// and both still run jobs
	ja := a.Sbatch(t, "alice", "true", "-N1", "-D", "/tmp")
	jb := b.Sbatch(t, "alice", "true", "-N1", "-D", "/tmp")
	WaitFor(t, "a job on each cluster completed", 30*time.Second, func() bool {
		return a.JobState(t, ja) == "COMPLETED" && b.JobState(t, jb) == "COMPLETED"
	})
}

// A pid file left by a daemon that died names, once PIDs wrap, some other
// process: minicluster.sh stop must leave that process alone (it checks the
// PID is one of its daemons). Needs no SLURM: the lab has only pid files.
func TestStopLeavesAProcessWithAStalePIDAlone(t *testing.T) {
	root, err := RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	lab := t.TempDir()
	run := filepath.Join(lab, "run")
	if err := os.MkdirAll(run, 0o755); err != nil {
		t.Fatal(err)
	}
	other := exec.Command("sleep", "60")
	if err := other.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- other.Wait() }()
	defer other.Process.Kill()
	pid := strconv.Itoa(other.Process.Pid)
	for _, f := range []string{"slurmctld.pid", "slurmd-n1.pid", "slurmdbd.pid", "mariadbd.pid"} {
		if err := os.WriteFile(filepath.Join(run, f), []byte(pid+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	stop := exec.Command(filepath.Join(root, "scripts", "minicluster.sh"), "stop")
	stop.Env = append(os.Environ(), "LAB="+lab, "LINK_ETC=0", "MUNGE_LOCK="+filepath.Join(lab, "munge.lock"))
	if out, err := stop.CombinedOutput(); err != nil {
		t.Fatalf("minicluster.sh stop: %v\n%s", err, out)
	}
	// A kill by stop happened before stop exited: by now the sleep is a
	// zombie or already reaped.
	select {
	case err := <-exited:
		t.Fatalf("stop killed pid %s, a sleep named by stale pid files: %v", pid, err)
	default:
	}
	stat, err := os.ReadFile("/proc/" + pid + "/stat")
	if err != nil {
		t.Fatalf("stop killed pid %s, a sleep named by stale pid files: %v", pid, err)
	}
	if f := strings.Fields(string(stat[bytes.LastIndexByte(stat, ')')+1:])); len(f) == 0 || f[0] == "Z" {
		t.Fatalf("stop killed pid %s, a sleep named by stale pid files (stat %q)", pid, stat)
	}
}
