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
	path := pgtest.DB(t, filepath.Join(t.TempDir(), "q.db"))
	s, job := openWithJob(t, path, 4) // agent a
	defer s.Close()
	b, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	s.Share("a")
	b.Share("b")
	ctx := context.Background()
	take(t, s, job, 2)
	ea, held, err := s.TakeSweep(ctx, t0, time.Minute)
	if err != nil || !held {
		t.Fatalf("a takes the sweeps: %d %v %v", ea, held, err)
	}
	later := t0.Add(2 * time.Minute) // a's lease lapsed; b takes it
	eb, held, err := b.TakeSweep(ctx, later, time.Minute)
	if err != nil || !held || eb <= ea {
		t.Fatalf("b takes the sweeps: epoch %d (a's %d) %v %v", eb, ea, held, err)
	}
	asA := SweepFenced(ctx, ea)
	if n, err := s.MarkZombies(asA, later, 10); !errors.Is(err, ErrSweepLost) || n != 0 {
		t.Fatalf("a marks zombies after losing the lease: %d, %v; want 0, ErrSweepLost", n, err)
	}
	if ok, err := s.ExpireJob(asA, job, t0.Add(2*time.Hour)); !errors.Is(err, ErrSweepLost) || ok {
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
	if n, err := s.MarkZombies(SweepFenced(ctx, eb), later, 10); !errors.Is(err, ErrSweepLost) || n != 0 {
		t.Fatalf("a marks zombies under b's epoch: %d, %v; want 0, ErrSweepLost", n, err)
	}
	if n, err := b.MarkZombies(SweepFenced(ctx, eb), later, 10); err != nil || n == 0 {
		t.Fatalf("b marks zombies: %d %v", n, err)
	}
	// a takes nothing back by asking while b's lease is alive.
	if _, held, err := s.TakeSweep(ctx, later, time.Minute); err != nil || held {
		t.Fatalf("a retakes b's live lease: %v %v", held, err)
	}
}

// TestTheLivenessOfDeadAgentsIsTakenOverAndPruned: a submission is taken
// over only once its storer's liveness lapsed; lapsed liveness rows are
// pruned, live ones kept.
func TestTheLivenessOfDeadAgentsIsTakenOverAndPruned(t *testing.T) {
	path := pgtest.DB(t, filepath.Join(t.TempDir(), "q.db"))
	a, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	a.Share("a")
	b.Share("b")
	ctx := context.Background()
	if err := a.BeatAgent(ctx, t0, time.Minute); err != nil {
		t.Fatal(err)
	}
	if err := b.BeatAgent(ctx, t0.Add(time.Hour), time.Minute); err != nil {
		t.Fatal(err)
	}
	id, err := a.CreateJob(ctx, NewJob{Owner: "alice", Dataset: "/d", Command: []string{"p"}, BatchSize: 1, Price: 1, Cores: 1, MaxAttempts: 1,
		Submitted: t0, Expires: t0.Add(time.Hour), IdemKey: "k", IdemHash: "h"})
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := b.TakeOverSubmission(ctx, id, t0.Add(30*time.Second)); err != nil || ok {
		t.Fatalf("take over while a lives: %v %v; want false", ok, err)
	}
	if ok, err := b.TakeOverSubmission(ctx, id, t0.Add(2*time.Minute)); err != nil || !ok {
		t.Fatalf("take over after a died: %v %v; want true", ok, err)
	}
	if _, _, _, found, err := b.JobByKey(ctx, "alice", "k"); err != nil || found {
		t.Fatalf("the key after the take-over: found %v %v; want free", found, err)
	}
	if err := a.ActivateJob(ctx, id, "/o", 0); !errors.Is(err, ErrSubmissionTaken) {
		t.Fatalf("a activates the job taken over: %v; want ErrSubmissionTaken", err)
	}
	if err := b.PruneAgents(ctx, t0.Add(30*time.Minute)); err != nil {
		t.Fatal(err)
	}
	var left []string
	rows, err := b.r.Query(`SELECT holder FROM leases WHERE pool LIKE '~agent:%' ORDER BY holder`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var h string
		rows.Scan(&h)
		left = append(left, h)
	}
	rows.Close()
	if len(left) != 1 || left[0] != "b" {
		t.Fatalf("liveness rows after the prune: %v; want [b]", left)
	}
}
