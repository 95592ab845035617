package slurm_test

import (
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/harvest-hpc/harvest/internal/slurmtest"
)

// TestRealSLURMPreemptsTheYoungestPilotsFirst: with the mini-cluster's
// preemption settings (scripts/minicluster.sh PREEMPT=1, which adds
// SchedulerParameters=preempt_youngest_first) a foreign job preempts the
// pilots that started last and keeps the oldest, where the pilots' master
// usually runs. SLURM's default order (preempt/partition_prio's key is
// the tier and the node count, equal for one-node pilots, so the job
// list's order decides) took the oldest first: on the 16-node replay of
// KTH day 70 the master's pilot was preempted three times in 16 s, each
// time a hand-over that held the pool's capacity rule at 8 pilots for 34 s
// longer than in polling mode (docs/admin.md, docs/sim.md).
func TestRealSLURMPreemptsTheYoungestPilotsFirst(t *testing.T) {
	c := slurmtest.RequireWith(t, nodes, slurmtest.Options{Preempt: true})
	c.Script(t, "users")
	dir := sigDir(t)
	half := nodes / 2
	old := make([]string, half)
	for i := range old {
		old[i] = sigPilot(t, c, dir, "-p", slurmtest.PreemptPartition, "-t", "30")
	}
	waitJobs(t, c, old, "RUNNING", 20*time.Second)
	oldStart := latestStart(t, c, old)
	// SLURM keeps start times to the second: the young pilots must start
	// in a later one for their order to be defined.
	for time.Now().Unix() <= oldStart {
		time.Sleep(50 * time.Millisecond)
	}
	young := make([]string, nodes-half)
	for i := range young {
		young[i] = sigPilot(t, c, dir, "-p", slurmtest.PreemptPartition, "-t", "30")
	}
	waitJobs(t, c, young, "RUNNING", 20*time.Second)
	if s := earliestStart(t, c, young); s <= oldStart {
		t.Fatalf("the young pilots started at %d, not after the old ones (%d)", s, oldStart)
	}
	f := c.Sbatch(t, "alice", "sleep 600", "-N"+strconv.Itoa(half-1), "-t", "5")
	waitJobs(t, c, []string{f}, "RUNNING", 10*time.Second)
	all := append(slices.Clone(old), young...)
	preempted := statesOf(t, c, all)["PREEMPTED"]
	if len(preempted) != half-1 {
		t.Fatalf("want %d pilots preempted, got %v", half-1, statesOf(t, c, all))
	}
	for _, p := range preempted {
		if !slices.Contains(young, p) {
			t.Errorf("pilot %s, one of the %d oldest (%v), was preempted while younger ones (%v) ran: preempted %v",
				p, half, old, young, preempted)
		}
	}
}

// latestStart and earliestStart are the last and first StartTime of jobs
// (Unix seconds).
func latestStart(t *testing.T, c *slurmtest.Cluster, ids []string) int64 {
	t.Helper()
	return slices.Max(starts(t, c, ids))
}

func earliestStart(t *testing.T, c *slurmtest.Cluster, ids []string) int64 {
	t.Helper()
	return slices.Min(starts(t, c, ids))
}

func starts(t *testing.T, c *slurmtest.Cluster, ids []string) []int64 {
	t.Helper()
	t.Setenv("SLURM_TIME_FORMAT", "%s")
	var out []int64
	for _, id := range ids {
		v := c.Run(t, "", "squeue", "-h", "-j", id, "-o", "%S")
		s, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			t.Fatalf("squeue %%S of job %s: %q", id, v)
		}
		out = append(out, s)
	}
	return out
}
