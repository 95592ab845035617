package slurm_test

import (
	"testing"

	"github.com/harvest-hpc/harvest/internal/slurmtest"
)

// TestRealSLURMASubmittedPilotIsInTheNextSnapshot pins what the adapter's
// Info.SubmitsVisible promises the agent's ledger: sbatch returns once
// slurmctld made the job's record, so a snapshot taken right after a
// submit lists the pilot (pending or running). Pilots are submitted faster
// than the cluster can start them (more than its nodes), each snapshotted
// at once.
func TestRealSLURMASubmittedPilotIsInTheNextSnapshot(t *testing.T) {
	slurmtest.Require(t, nodes)
	a := newAdapter(t, nil)
	info, err := a.Info(bg(t))
	if err != nil || !info.SubmitsVisible {
		t.Fatalf("Info = %+v, %v: want SubmitsVisible", info, err)
	}
	defer cancelPilots(t, a)
	for i := 0; i < 2*nodes; i++ {
		id, err := a.Submit(bg(t), pilotSpec(5*60))
		if err != nil {
			t.Fatal(err)
		}
		s := snap(t, a)
		if _, ok := job(s, string(id)); !ok {
			t.Fatalf("pilot %s (submit %d) is not in the snapshot taken after its submit returned", id, i+1)
		}
	}
}
