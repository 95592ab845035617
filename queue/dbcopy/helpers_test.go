package dbcopy_test

import (
	"context"
	"database/sql"
	"fmt"
	"testing"
	"time"

	"github.com/harvest-hpc/harvest/pilotproto"
	"github.com/harvest-hpc/harvest/queue/store"
)

// The histories the tests copy, made through the store's API.

var t0 = time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)

// openWithJob opens the store at path with one master of pool "local"
// (epoch 1) and a job of n tasks.
func openWithJob(t *testing.T, path string, n int) (*store.Store, int64) {
	t.Helper()
	s, err := store.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	if _, d, err := s.DecideLease(context.Background(), "local", pilotproto.LeaseRequest{PilotID: "p1"}, t0, time.Hour); err != nil || d.Next.Epoch != 1 {
		t.Fatalf("lease: %+v %v", d, err)
	}
	names := make([]string, n)
	for i := range names {
		names[i] = fmt.Sprintf("t%03d", i)
	}
	return s, makeJob(t, s, names...)
}

// makeJob makes a WAITING job with the named tasks.
func makeJob(t *testing.T, s *store.Store, names ...string) int64 {
	t.Helper()
	ctx := context.Background()
	id, err := s.CreateJob(ctx, store.NewJob{Owner: "alice", Dataset: "/d", Command: []string{"p"}, BatchSize: 1, Price: 1, Cores: 1, MaxAttempts: 3, Submitted: t0, Expires: t0.Add(time.Hour)})
	if err == nil {
		err = s.InsertTasks(ctx, id, names, 100, nil)
	}
	if err == nil {
		err = s.ActivateJob(ctx, id, "/o", len(names))
	}
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// takeIn hands n tasks of job out to the master of pool (epoch 1).
func takeIn(t *testing.T, s *store.Store, pool string, job int64, n int) []store.TakenTask {
	t.Helper()
	got, err := s.Assign(context.Background(), pool, 1, t0, map[int64]int{job: n})
	if err != nil {
		t.Fatal(err)
	}
	return got.Tasks[job]
}

// reportIn reports ts with status from the master of pool (epoch 1).
func reportIn(t *testing.T, s *store.Store, pool, status string, ts ...store.TakenTask) {
	t.Helper()
	var rs []pilotproto.Result
	for _, tk := range ts {
		rs = append(rs, pilotproto.Result{TaskID: tk.ID, Attempt: tk.Attempt, Status: status, StartedAt: 1, DurationMS: 1000, Pilot: "p1"})
	}
	if _, err := s.ApplyResults(context.Background(), pool, 1, t0, rs); err != nil {
		t.Fatal(err)
	}
}

// openTables opens a database's tables for a test's reads (the SQLite
// file read-only).
func openTables(t *testing.T, db string) *sql.DB {
	t.Helper()
	driver, dsn := "sqlite3", "file:"+db+"?_query_only=1"
	if store.IsURL(db) {
		driver, dsn = "pgx", db
	}
	c, err := sql.Open(driver, dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}
