package adaptertest

import (
	"context"
	"testing"
	"time"

	"github.com/harvest-hpc/harvest/adapters"
	"github.com/harvest-hpc/harvest/cluster"
)

// Helpers for an adapter's own tests on a real batch system (beyond the
// suite): read snapshots, wait for a state, clean pilots up.

// Snap returns a's snapshot, failing t if it cannot be read or does not
// validate. Each call has 30 s.
func Snap(t testing.TB, a adapters.Adapter) cluster.Snapshot {
	t.Helper()
	c, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := a.Snapshot(c)
	if err != nil {
		t.Fatalf("Snapshot: %v", err)
	}
	if err := s.Validate(); err != nil {
		t.Fatalf("snapshot does not validate: %v", err)
	}
	return s
}

// Find returns the job of s with id.
func Find(s cluster.Snapshot, id string) (cluster.Job, bool) { return find(s, adapters.PilotID(id)) }

// Running says whether the job id is running in s.
func Running(id string) func(cluster.Snapshot) bool {
	return func(s cluster.Snapshot) bool {
		j, ok := Find(s, id)
		return ok && j.State == cluster.Running
	}
}

// WaitSnap polls a's snapshots (every 300 ms) until cond holds and
// returns that snapshot; after d it fails t with the last one.
func WaitSnap(t testing.TB, a adapters.Adapter, what string, d time.Duration, cond func(cluster.Snapshot) bool) cluster.Snapshot {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		s := Snap(t, a)
		if cond(s) {
			return s
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s; last snapshot: %+v", d, what, s)
		}
		time.Sleep(300 * time.Millisecond)
	}
}

// CancelPilots cancels every pilot of a and waits (up to d) until none
// is listed.
func CancelPilots(t testing.TB, a adapters.Adapter, d time.Duration) {
	t.Helper()
	for _, p := range Snap(t, a).Pilots() {
		c, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		err := a.Cancel(c, adapters.PilotID(p.ID))
		cancel()
		if err != nil {
			t.Errorf("cancel pilot %s: %v", p.ID, err)
		}
	}
	WaitSnap(t, a, "no pilots left", d, func(s cluster.Snapshot) bool { return len(s.Pilots()) == 0 })
}
