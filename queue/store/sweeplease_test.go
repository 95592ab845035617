package store

import (
	"context"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/harvest-hpc/harvest/internal/pgtest"
)

// TestADeposedSweeperChangesNothing: an agent that took the sweep lease,
// was paused past it while another agent took it, then resumed, has every
// sweep write refused inside its transaction; the new holder's go through.
func TestADeposedSweeperChangesNothing(t *testing.T) {
	s, job := openWithJob(t, pgtest.DB(t, filepath.Join(t.TempDir(), "q.db")), 4)
	defer s.Close()
	ctx := context.Background()
	take(t, s, job, 2)
	ea, held, err := s.TakeSweep(ctx, "a", t0, time.Minute)
	if err != nil || !held {
		t.Fatalf("a takes the sweeps: %d %v %v", ea, held, err)
	}
	later := t0.Add(2 * time.Minute) // a's lease lapsed; b takes it
	eb, held, err := s.TakeSweep(ctx, "b", later, time.Minute)
	if err != nil || !held || eb <= ea {
		t.Fatalf("b takes the sweeps: epoch %d (a's %d) %v %v", eb, ea, held, err)
	}
	asA := SweepFenced(ctx, "a", ea)
	if n, err := s.MarkZombies(asA, later, 10); !errors.Is(err, ErrSweepLost) || n != 0 {
		t.Fatalf("a marks zombies after losing the lease: %d, %v; want 0, ErrSweepLost", n, err)
	}
	if _, ok, err := s.ExpireJob(asA, job, t0.Add(2*time.Hour)); !errors.Is(err, ErrSweepLost) || ok {
		t.Fatalf("a expires a job after losing the lease: %v %v; want ErrSweepLost", ok, err)
	}
	if err := s.DropJob(asA, job, 10); !errors.Is(err, ErrSweepLost) {
		t.Fatalf("a drops a job after losing the lease: %v; want ErrSweepLost", err)
	}
	var zombies, jobs int
	s.r.QueryRow(`SELECT count(*) FROM grants WHERE state = 'ZOMBIE'`).Scan(&zombies)
	s.r.QueryRow(`SELECT count(*) FROM jobs WHERE state = 'RUNNING'`).Scan(&jobs)
	if zombies != 0 || jobs != 1 {
		t.Fatalf("after a's refused sweeps: %d ZOMBIE grants, %d RUNNING jobs; want 0 and 1", zombies, jobs)
	}
	// b holds the lease: its sweep goes through.
	if n, err := s.MarkZombies(SweepFenced(ctx, "b", eb), later, 10); err != nil || n == 0 {
		t.Fatalf("b marks zombies: %d %v", n, err)
	}
	// a takes nothing back by asking while b's lease is alive.
	if _, held, err := s.TakeSweep(ctx, "a", later, time.Minute); err != nil || held {
		t.Fatalf("a retakes b's live lease: %v %v", held, err)
	}
}
