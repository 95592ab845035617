package slurm_test

import (
	"testing"

	"github.com/harvest-hpc/harvest/internal/slurmtest"
)

// TestRealSLURMJobEventsMoveWithASubmissionAndACancel: sdiag's count on
// the mini-cluster moves when a job is submitted and when it is cancelled,
// and stays put when nothing happens.
func TestRealSLURMJobEventsMoveWithASubmissionAndACancel(t *testing.T) {
	c := slurmtest.Require(t, nodes)
	a := newAdapter(t, nil)
	count := func(what string) int64 {
		t.Helper()
		n, err := a.JobEvents(bg(t))
		if err != nil {
			t.Fatalf("%s: JobEvents: %v", what, err)
		}
		return n
	}
	n0 := count("at start")
	if n := count("again"); n != n0 {
		t.Errorf("the count moved from %d to %d with nothing submitted", n0, n)
	}
	id := c.Sbatch(t, "alice", "sleep 600", "-N1", "-t", "10")
	n1 := count("after sbatch")
	if n1 <= n0 {
		t.Errorf("after a submission the count is %d, was %d", n1, n0)
	}
	c.Run(t, "root", "scancel", id)
	n2 := count("after scancel")
	if n2 <= n1 {
		t.Errorf("after a cancel the count is %d, was %d", n2, n1)
	}
	t.Logf("sdiag's count: %d, %d after sbatch, %d after scancel", n0, n1, n2)
}
