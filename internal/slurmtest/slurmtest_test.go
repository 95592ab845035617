package slurmtest

import (
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
