package httpapi_test

import (
	"github.com/harvest-hpc/harvest/internal/pgtest"

	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/harvest-hpc/harvest/queue/api"
)

// adminRead runs what an admin runs: `sqlite3 queue.db 'select count(*)
// from jobs'`, another process that opens the database with SQLite, reads
// and closes it. At that close SQLite deletes the WAL if it can take the
// database's exclusive lock, that is if no other process holds a lock on
// the file; the queue process holds one for as long as it is open. (The
// sqlite3 shell is one of the CI's packages, scripts/deps.sh.)
func adminRead(t *testing.T, path string) int {
	t.Helper()
	out, err := exec.Command("sqlite3", path, "select count(*) from jobs").CombinedOutput()
	if err != nil {
		t.Fatalf("admin read: sqlite3: %v: %s", err, out)
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(out)))
	if err != nil {
		t.Fatalf("admin read: %q", out)
	}
	return n
}

// TestAnAdminsReadLosesNoAcknowledgedJob is issue 35 item 1: the queue
// runs as a process of its own and takes submissions; between them an
// admin reads the database with SQLite from another process; the queue is
// killed with SIGKILL and started again: every job it acknowledged is
// there, whole. It failed when the queue opened and closed the database
// file itself (an fdatasync after each checkpoint): that close dropped the
// queue's POSIX locks, so the admin's close deleted the live WAL, and the
// commits after it went to a deleted file.
//
// The rounds go on until a checkpoint has copied pages into the database
// file (its size grows: seen with stat, the file is not opened) and 20
// more submissions were acknowledged after it.
func TestAnAdminsReadLosesNoAcknowledgedJob(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	if pgtest.Enabled() {
		t.Skip("an admin's sqlite3 beside a SQLite queue: nothing of the kind on PostgreSQL")
	}
	const entries = 100
	dir, ds, tok := childSetup(t, "entry-with-a-long-name-", entries, map[string]string{"alice": api.RoleUser})
	dbPath := filepath.Join(dir, "queue.db")
	size := func() int64 {
		fi, err := os.Stat(dbPath)
		if err != nil {
			t.Fatal(err)
		}
		return fi.Size()
	}

	ctx := context.Background()
	ch := startChild(t, dir, 0)
	defer func() { ch.kill9() }()
	alice := clientFor(t, ch.url, tok["alice"])
	size0 := size()
	var acked []int64
	after := -1 // submissions acknowledged since the database file grew
	deadline := time.Now().Add(60 * time.Second)
	for after < 20 {
		if time.Now().After(deadline) {
			t.Fatalf("no checkpoint copied pages into the database file after %d submissions", len(acked))
		}
		j, err := alice.Submit(ctx, api.JobSpec{Dataset: ds, Command: []string{"p", "{input}"}, BatchSize: 5})
		if err != nil {
			t.Fatal(err)
		}
		acked = append(acked, j.ID)
		if n := adminRead(t, dbPath); n < 1 {
			t.Fatalf("the admin read %d jobs", n)
		}
		if _, err := os.Stat(dbPath + "-wal"); err != nil {
			t.Fatalf("after %d submissions the admin's read deleted the live WAL: %v", len(acked), err)
		}
		if after >= 0 || size() > size0 {
			after++
		}
	}
	ch.kill9()
	ch = startChild(t, dir, 1)
	alice = clientFor(t, ch.url, tok["alice"])
	for _, id := range acked {
		j, err := alice.Job(ctx, id)
		if err != nil {
			t.Fatalf("job %d of %d acknowledged ones after the admin's reads and a kill -9: %v", id, len(acked), err)
		}
		if j.Tasks.Total != entries {
			t.Fatalf("job %d: %d tasks, want %d", id, j.Tasks.Total, entries)
		}
	}
	t.Logf("%d submissions, each followed by an admin's read; all there after kill -9", len(acked))
}
