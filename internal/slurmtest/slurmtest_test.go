package slurmtest

import (
	"os"
	"path/filepath"
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
