package slurm_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/harvest-hpc/harvest/adapters"
	"github.com/harvest-hpc/harvest/adapters/slurm"
	"github.com/harvest-hpc/harvest/cluster"
	"github.com/harvest-hpc/harvest/internal/slurmtest"
)

// asUser writes wrappers that run the SLURM clients as user, so the
// adapter sees the cluster as that user does (root sees every partition).
func asUser(t *testing.T, c *slurmtest.Cluster, user string) string {
	t.Helper()
	dir := t.TempDir()
	for _, name := range []string{"squeue", "sinfo", "scontrol", "sbatch", "scancel"} {
		path, err := exec.LookPath(name)
		if err != nil {
			t.Fatal(err)
		}
		script := fmt.Sprintf("#!/bin/sh\nexec runuser -u %s -- env SLURM_CONF=%s %s \"$@\"\n", user, c.Conf, path)
		if err := os.WriteFile(filepath.Join(dir, name), []byte(script), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// A scavenger partition is often Hidden=YES: SLURM leaves it out of a
// user's `scontrol show partition` unless asked with -a, and `sinfo -p`
// shows it anyway (22.05 refuses -a beside -p). The adapter, run as a
// user, harvests it.
func TestRealSLURMHiddenPartition(t *testing.T) {
	c := slurmtest.RequireWith(t, nodes, slurmtest.Options{Extra: "PartitionName=scavenger Nodes=n[1-8] MaxTime=60 State=UP Hidden=YES"})
	c.Script(t, "users")
	c.CancelAll(t)
	t.Cleanup(func() { c.CancelAll(t) })

	if out := c.Run(t, "alice", "scontrol", "-o", "show", "partition"); strings.Contains(out, "scavenger") {
		t.Fatalf("SLURM shows the hidden partition to a user without -a (the test proves nothing): %s", out)
	}
	if out := c.Run(t, "alice", "scontrol", "-a", "-o", "show", "partition"); !strings.Contains(out, "PartitionName=scavenger") {
		t.Fatalf("scontrol -a does not show the hidden partition: %s", out)
	}

	bin := asUser(t, c, "alice")
	a := newAdapter(t, func(cfg *slurm.Config) {
		cfg.BinDir, cfg.User, cfg.Partition = bin, "alice", "scavenger"
		cfg.SlurmConf = c.Conf
	})
	s := snap(t, a)
	if s.Partition != "scavenger" || s.TotalNodes != nodes || s.IdleNodes != nodes || s.PartitionMaxTime() != 3600 {
		t.Fatalf("snapshot of the hidden partition: %+v", s)
	}
	// Another user's job in it, and a pilot.
	foreign := c.Sbatch(t, "bob", "sleep 300", "-p", "scavenger", "-N", "2", "-t", "5", "-D", c.Lab+"/shared")
	id, err := a.Submit(bg(t), pilotSpec(10*60))
	if err != nil {
		t.Fatalf("submit to the hidden partition: %v", err)
	}
	s = waitSnap(t, a, "the foreign job and the pilot running", 30*time.Second, func(s cluster.Snapshot) bool {
		f, ok1 := job(s, foreign)
		p, ok2 := job(s, string(id))
		return ok1 && ok2 && f.State == cluster.Running && p.State == cluster.Running && p.Pilot
	})
	if s.IdleNodes != nodes-3 {
		t.Errorf("idle nodes %d, want %d: %+v", s.IdleNodes, nodes-3, s)
	}
	// Nodes held by a job of another partition over the same nodes: the
	// cross-check asks squeue who holds them and the snapshot stands. A
	// suspended job is left out, and sinfo shows its nodes idle
	// (select/linear).
	other := c.Sbatch(t, "alice", "sleep 300", "-p", "batch", "-N", "2", "-t", "5", "-D", c.Lab+"/shared")
	slurmtest.WaitFor(t, "the batch job running", 20*time.Second, func() bool { return c.JobState(t, other) == "RUNNING" })
	c.Run(t, "", "scontrol", "suspend", foreign)
	s = snap(t, a)
	if _, ok := job(s, foreign); ok || s.IdleNodes != nodes-3 {
		t.Errorf("with a suspended job and a job of another partition: %+v", s)
	}
	if err := a.Cancel(bg(t), adapters.PilotID(id)); err != nil {
		t.Errorf("cancel: %v", err)
	}
}
