package dbcopy_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/harvest-hpc/harvest/queue/dbcopy"
	"github.com/harvest-hpc/harvest/queue/store"
)

// Backup copies an open, working database through SQLite: the copy opens
// as a queue database with every job and task, is the owner's only, and
// the original keeps working. A destination that exists and a file that
// is not a queue database are refused, nothing written.
func TestBackupCopiesAnOpenDatabaseConsistently(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "q.db")
	s, id := openWithJob(t, path, 50)
	defer s.Close()
	takeIn(t, s, "local", id, 5) // a hand-out open in the copy
	ctx := context.Background()
	dest := filepath.Join(dir, "copy.db")
	jobs, err := dbcopy.Backup(ctx, path, dest)
	if err != nil || jobs != 1 {
		t.Fatalf("backup: %d jobs, %v", jobs, err)
	}
	if fi, err := os.Stat(dest); err != nil || fi.Mode().Perm()&0o077 != 0 {
		t.Fatalf("the copy: %v, mode %v; want the owner's only", err, fi.Mode())
	}
	c, err := store.Open(dest)
	if err != nil {
		t.Fatal(err)
	}
	j, err := c.Job(ctx, id)
	if err != nil || j.Tasks.Total != 50 || j.Tasks.Running != 5 {
		t.Fatalf("the copy's job: %+v %v; want 50 tasks, 5 handed out", j.Tasks, err)
	}
	c.Close()
	if _, err := dbcopy.Backup(ctx, path, dest); err == nil || !strings.Contains(err.Error(), "exists") {
		t.Fatalf("a second backup onto the copy: %v", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "other.db"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := dbcopy.Backup(ctx, filepath.Join(dir, "other.db"), filepath.Join(dir, "x.db")); err == nil || !strings.Contains(err.Error(), "not a harvest queue database") {
		t.Fatalf("backup of another file: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "x.db")); err == nil {
		t.Fatal("a refused backup wrote its destination")
	}
	takeIn(t, s, "local", id, 5) // the original works on
}
