package store

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
)

// SQLite checkpoints the WAL by itself (wal_autocheckpoint) and truncates
// it to journal_size_limit: a store that writes many times the
// autocheckpoint's pages keeps a WAL of about that size, not all it wrote.
func TestSQLiteCheckpointsTheWALByItself(t *testing.T) {
	s, id := openWithJob(t, filepath.Join(t.TempDir(), "q.db"), 1)
	defer s.Close()
	ctx := context.Background()
	var ac, page, limit int64
	if err := s.w.QueryRow("PRAGMA wal_autocheckpoint").Scan(&ac); err != nil || ac <= 0 {
		t.Fatalf("wal_autocheckpoint %d (%v), want SQLite's own", ac, err)
	}
	s.w.QueryRow("PRAGMA page_size").Scan(&page)
	if err := s.w.QueryRow("PRAGMA journal_size_limit").Scan(&limit); err != nil || limit != 64<<20 {
		t.Fatalf("journal_size_limit %d (%v), want 64 MiB", limit, err)
	}
	names := make([]string, 20000)
	for i := range names {
		names[i] = fmt.Sprintf("%0200d", i)
	}
	for range 3 { // ~4 MB each, ~3 times the autocheckpoint's pages in all
		if err := s.InsertTasks(ctx, id, names, 2000, nil); err != nil {
			t.Fatal(err)
		}
	}
	written := int64(3 * len(names) * 200)
	if b := s.WALBytes(); b == 0 || b > 2*ac*page || b >= written {
		t.Fatalf("WAL of %d bytes after writing %d bytes of names: want it checkpointed, at most about %d pages of %d bytes", b, written, ac, page)
	}
}
