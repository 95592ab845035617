package store

import (
	"context"
	"path/filepath"
	"testing"
)

// The writer never checkpoints; Checkpoint copies the WAL into the
// database file from its own connection, and empties a WAL grown past
// the bound.
func TestCheckpointCopiesTheWALAndEmptiesAGrownOne(t *testing.T) {
	s, id := openWithJob(t, filepath.Join(t.TempDir(), "q.db"), 200)
	defer s.Close()
	ctx := context.Background()
	take(t, s, id, 50)
	frames := func() (int64, int64) {
		var busy, log, done int64
		if err := s.ck.QueryRow("PRAGMA wal_checkpoint(PASSIVE)").Scan(&busy, &log, &done); err != nil {
			t.Fatal(err)
		}
		return log, done
	}
	// Every commit so far stayed in the WAL: the writer does not
	// checkpoint (it would inside its commits).
	var ac int
	if err := s.w.QueryRow("PRAGMA wal_autocheckpoint").Scan(&ac); err != nil || ac != 0 {
		t.Fatalf("the writer's wal_autocheckpoint is %d (%v), want 0", ac, err)
	}
	if err := s.Checkpoint(ctx); err != nil {
		t.Fatal(err)
	}
	if log, done := frames(); log == 0 || done != log {
		t.Fatalf("after a checkpoint: %d frames, %d copied; want all copied", log, done)
	}
	if b := s.WALStats().Bytes; b == 0 {
		t.Fatal("the WAL is empty below the bound: nothing to test")
	}
	s.truncateAt = 0
	if err := s.Checkpoint(ctx); err != nil {
		t.Fatal(err)
	}
	if b := s.WALStats().Bytes; b != 0 {
		t.Fatalf("the WAL past the bound is %d bytes after a checkpoint, want 0", b)
	}
	take(t, s, id, 10) // and the queue writes on
}
