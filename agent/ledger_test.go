package agent

import (
	"testing"

	"github.com/harvest-hpc/harvest/cluster"
)

func pilotJob(id string) cluster.Job {
	return cluster.Job{ID: id, State: cluster.Pending, Nodes: 1, TimeLimit: 600, Pilot: true}
}

func TestLedger(t *testing.T) {
	t.Run("a submitted pilot is upcoming until a snapshot shows it", func(t *testing.T) {
		l := NewLedger(300)
		l.Submitted("10", 600, false, 0)
		l.Observe(cluster.Snapshot{Now: 5})
		if l.Len() != 1 {
			t.Fatalf("Len = %d, want 1", l.Len())
		}
		l.Observe(cluster.Snapshot{Now: 10, Jobs: []cluster.Job{pilotJob("10")}})
		if l.Len() != 0 {
			t.Fatalf("Len = %d after the pilot showed up, want 0", l.Len())
		}
	})
	t.Run("an entry expires after the TTL", func(t *testing.T) {
		l := NewLedger(300)
		l.Submitted("10", 600, false, 0)
		l.Observe(cluster.Snapshot{Now: 301})
		if l.Len() != 0 {
			t.Fatalf("Len = %d, want 0 after TTL", l.Len())
		}
	})
	t.Run("an unknown submit is settled by a pilot nobody expected", func(t *testing.T) {
		l := NewLedger(300)
		l.Observe(cluster.Snapshot{Now: 0, Jobs: []cluster.Job{pilotJob("5")}})
		l.Unknown(600, false, 1)
		l.Unknown(600, false, 1)
		l.Observe(cluster.Snapshot{Now: 2, Jobs: []cluster.Job{pilotJob("5"), pilotJob("6")}})
		if l.Len() != 1 {
			t.Fatalf("Len = %d, want 1 (one unknown submit settled by pilot 6)", l.Len())
		}
		// The same pilot seen again settles nothing more.
		l.Observe(cluster.Snapshot{Now: 3, Jobs: []cluster.Job{pilotJob("5"), pilotJob("6")}})
		if l.Len() != 1 {
			t.Fatalf("Len = %d, want still 1", l.Len())
		}
	})
	t.Run("a known pilot does not settle an unknown submit", func(t *testing.T) {
		l := NewLedger(300)
		l.Submitted("7", 600, false, 0)
		l.Unknown(600, false, 0)
		l.Observe(cluster.Snapshot{Now: 1, Jobs: []cluster.Job{pilotJob("7")}})
		if l.Len() != 1 || len(l.unknown) != 1 {
			t.Fatalf("Len = %d unknown = %d, want the unknown entry kept", l.Len(), len(l.unknown))
		}
	})
}
