package store

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/harvest-hpc/harvest/queue/api"
)

// fixture copies a database of testdata into a temporary directory.
func fixture(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), "queue.db")
	if err := os.WriteFile(p, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// testdata/v6-cut-cancel.db was written by the release before the kill
// intent (commit 5793fc5, schema 006; see the report of issue 35.3): job
// 1 running (1 task done, 1 handed out, 4 waiting), job 2 KILLED by a
// cancel whose task kill a crash cut (2 handed out, 4 waiting). It opens
// and migrates: job 1 as it was, job 2's kill pending and then finished.
func TestADatabaseOfThePreviousReleaseOpensAndItsCutCancelIsFinished(t *testing.T) {
	path := fixture(t, "v6-cut-cancel.db")
	s, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	j, err := s.Job(ctx, 1)
	if err != nil || j.State != api.JobRunning || j.Tasks.Total != 6 || j.Tasks.Done != 1 || j.Tasks.Running != 1 || j.Tasks.Waiting != 4 {
		t.Fatalf("job 1 after the upgrade: %s %+v %v", j.State, j.Tasks, err)
	}
	pending, err := s.PendingKills(ctx)
	if err != nil || len(pending) != 1 || pending[0] != 2 {
		t.Fatalf("pending kills %v %v, want job 2", pending, err)
	}
	if err := s.KillTasks(ctx, 2, time.Now(), 100); err != nil {
		t.Fatal(err)
	}
	var live int
	if err := s.r.QueryRow(`SELECT count(*) FROM tasks WHERE job_id = 2 AND state != 'KILLED'`).Scan(&live); err != nil || live != 0 {
		t.Fatalf("job 2: %d tasks not KILLED (%v)", live, err)
	}
	if pending, _ := s.PendingKills(ctx); len(pending) != 0 {
		t.Fatalf("pending kills after the kill: %v", pending)
	}
}

// A database a newer harvest migrated further is refused with a message
// that says so, and left as it was.
func TestANewerDatabaseIsRefused(t *testing.T) {
	path := filepath.Join(t.TempDir(), "q.db")
	s, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.w.Exec(`INSERT INTO schema_migrations (name, applied_at) VALUES ('migrations/999_future.sql', 0)`); err != nil {
		t.Fatal(err)
	}
	s.Close()
	_, err = Open(path)
	if err == nil || !strings.Contains(err.Error(), "written by a newer harvest") || !strings.Contains(err.Error(), "999_future") {
		t.Fatalf("opening a newer database: %v", err)
	}
}
