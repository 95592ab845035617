package store

import (
	"database/sql"

	"github.com/harvest-hpc/harvest/internal/pgtest"

	"context"
	"errors"
	"io/fs"
	"math"
	"path/filepath"
	"testing"
	"time"

	"github.com/harvest-hpc/harvest/pilotproto"
	"github.com/harvest-hpc/harvest/queue/api"
	"github.com/harvest-hpc/harvest/queue/fairshare"
	"github.com/harvest-hpc/harvest/queue/store/schema"
	"github.com/harvest-hpc/harvest/queue/txstats"
)

func TestReopeningAppliesEachMigrationOnce(t *testing.T) {
	path := pgtest.DB(t, filepath.Join(t.TempDir(), "q.db"))
	files, _ := fs.Glob(schema.FS, "migrations/*.sql")
	if pgtest.Enabled() {
		files, _ = fs.Glob(schema.FS, "migrations/postgres/*.sql")
	}
	for i := 0; i < 2; i++ {
		s, err := Open(path)
		if err != nil {
			t.Fatalf("open #%d: %v", i+1, err)
		}
		var n int
		if err := s.r.QueryRow(`SELECT count(*) FROM schema_migrations`).Scan(&n); err != nil || n != len(files) || n < 1 {
			t.Fatalf("open #%d: %d migrations recorded (%v), want %d", i+1, n, err, len(files))
		}
		s.Close()
	}
}

func TestAFencedWriteChecksTheLeaseInsideItsTransaction(t *testing.T) {
	s, err := Open(pgtest.DB(t, filepath.Join(t.TempDir(), "q.db")))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	t0 := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	if _, d, err := s.DecideLease(ctx, "local", pilotproto.LeaseRequest{PilotID: "p1"}, t0, 30*time.Second); err != nil || !d.Granted || d.Next.Epoch != 1 {
		t.Fatalf("lease: %+v %v", d, err)
	}
	id, err := s.CreateJob(ctx, NewJob{Owner: "alice", Dataset: "/d", Command: []string{"p"}, BatchSize: 1, Price: 1, Cores: 1, MaxAttempts: 1, Submitted: t0, Expires: t0.Add(time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.InsertTasks(ctx, id, []string{"a", "b", "c"}, 2, nil); err != nil {
		t.Fatal(err)
	}
	if err := s.ActivateJob(ctx, id, "/o", 3); err != nil {
		t.Fatal(err)
	}
	taken, err := s.Assign(ctx, "local", 1, t0, map[int64]int{id: 2})
	if err != nil || len(taken.Tasks[id]) != 2 || taken.Tasks[id][0].Name != "a" || taken.Tasks[id][1].Name != "b" {
		t.Fatalf("assign: %+v %v, want a and b (FIFO)", taken, err)
	}
	if _, err := s.Assign(ctx, "local", 1, t0.Add(30*time.Second), map[int64]int{id: 1}); !errors.Is(err, api.ErrLeaseExpired) {
		t.Fatalf("assign after expiry: %v, want api.ErrLeaseExpired", err)
	}
	if _, err := s.ApplyResults(ctx, "local", 2, t0, []pilotproto.Result{{TaskID: taken.Tasks[id][0].ID, Attempt: 1, Status: pilotproto.StatusDone}}); !errors.Is(err, api.ErrStaleEpoch) {
		t.Fatalf("results of an epoch never granted: %v, want api.ErrStaleEpoch", err)
	}
	j, err := s.Job(ctx, id)
	if err != nil || j.Tasks.Waiting != 1 || j.Tasks.Running != 2 || j.Tasks.Done != 0 {
		t.Fatalf("job after refused writes: %+v %v", j.Tasks, err)
	}
	var results int
	s.r.QueryRow(`SELECT count(*) FROM results`).Scan(&results)
	if results != 0 {
		t.Fatalf("%d results stored by refused writes", results)
	}
}

func TestKillTasksWalksTheJobOnceInChunksAndLeavesFinalTasksAlone(t *testing.T) {
	s, err := Open(pgtest.DB(t, filepath.Join(t.TempDir(), "q.db")))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	t0 := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	if _, d, err := s.DecideLease(ctx, "local", pilotproto.LeaseRequest{PilotID: "p1"}, t0, time.Hour); err != nil || !d.Granted {
		t.Fatalf("lease: %+v %v", d, err)
	}
	newJob := func() int64 {
		id, err := s.CreateJob(ctx, NewJob{Owner: "alice", Dataset: "/d", Command: []string{"p"}, BatchSize: 1, Price: 1, Cores: 1, MaxAttempts: 1, Submitted: t0, Expires: t0.Add(time.Hour)})
		if err != nil {
			t.Fatal(err)
		}
		if err := s.InsertTasks(ctx, id, []string{"a", "b", "c", "d", "e", "f", "g"}, 100, nil); err != nil {
			t.Fatal(err)
		}
		if err := s.ActivateJob(ctx, id, "/o", 7); err != nil {
			t.Fatal(err)
		}
		return id
	}
	job, other := newJob(), newJob()
	// a, b done; c, d handed out; e, f, g waiting.
	taken, err := s.Assign(ctx, "local", 1, t0, map[int64]int{job: 4})
	if err != nil || len(taken.Tasks[job]) != 4 {
		t.Fatalf("assign: %+v %v", taken, err)
	}
	var done []pilotproto.Result
	for _, tk := range taken.Tasks[job][:2] {
		done = append(done, pilotproto.Result{TaskID: tk.ID, Attempt: tk.Attempt, Status: pilotproto.StatusDone})
	}
	if _, err := s.ApplyResults(ctx, "local", 1, t0, done); err != nil {
		t.Fatal(err)
	}
	if _, err := s.CancelJob(ctx, job, t0); err != nil {
		t.Fatal(err)
	}
	if err := s.KillTasks(ctx, job, t0, 2); err != nil {
		t.Fatal(err)
	}
	states := func(id int64) string {
		rows, err := s.r.Query(`SELECT state FROM tasks WHERE job_id = $1 ORDER BY id`, id)
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		out := ""
		for rows.Next() {
			var st string
			rows.Scan(&st)
			out += st[:1]
		}
		return out
	}
	if got := states(job); got != "DDKKKKK" {
		t.Fatalf("task states after the kill %s, want DDKKKKK (done ones kept, every other killed)", got)
	}
	if got := states(other); got != "WWWWWWW" {
		t.Fatalf("the other job's tasks became %s", got)
	}
}

// CancelledSince answers from memory: a cancel after the first read is
// listed, a dropped job no more, and since cuts by the cancel's time.
func TestCancelledSinceFollowsCancelsAndDrops(t *testing.T) {
	s, a := openWithJob(t, pgtest.DB(t, filepath.Join(t.TempDir(), "q.db")), 2)
	defer s.Close()
	ctx := context.Background()
	if got, err := s.CancelledSince(ctx, t0.Add(-time.Hour)); err != nil || len(got) != 0 {
		t.Fatalf("before any cancel: %v %v", got, err)
	}
	if _, err := s.CancelJob(ctx, a, t0); err != nil {
		t.Fatal(err)
	}
	if got, _ := s.CancelledSince(ctx, t0.Add(-time.Second)); len(got) != 1 || got[0] != a {
		t.Fatalf("after the cancel: %v, want [%d]", got, a)
	}
	if got, _ := s.CancelledSince(ctx, t0); len(got) != 0 {
		t.Fatalf("since the cancel's own time: %v, want none", got)
	}
	if err := s.DropJob(ctx, a, 100); err != nil {
		t.Fatal(err)
	}
	if got, _ := s.CancelledSince(ctx, t0.Add(-time.Second)); len(got) != 0 {
		t.Fatalf("after the drop: %v, want none", got)
	}
}

// WriteStats counts the transactions over txstats.SlowTx per store method, and a
// reset starts the counts again.
func TestWriteStatsCountSlowTransactionsPerMethod(t *testing.T) {
	s, _ := openWithJob(t, pgtest.DB(t, filepath.Join(t.TempDir(), "q.db")), 1)
	defer s.Close()
	s.WriteStats(true)
	add := func(d time.Duration) { s.stats.Add(d, writer) }
	add(txstats.SlowTx + time.Millisecond)
	add(txstats.SlowTx / 2)
	add(3 * txstats.SlowTx)
	ws := s.WriteStats(true)
	if ws.Transactions != 3 || ws.Slow != 2 || ws.Longest != 3*txstats.SlowTx || len(ws.SlowBy) != 1 || ws.SlowBy[ws.LongestIn] != 2 {
		t.Fatalf("stats %+v, want 3 transactions, 2 slow in one method, the longest 3 x txstats.SlowTx", ws)
	}
	// The slow ones, oldest first.
	if r := ws.Recent; len(r) != 2 || r[0].Lock != txstats.SlowTx+time.Millisecond || r[1].Lock != 3*txstats.SlowTx || r[1].In != ws.LongestIn || r[1].At.Before(r[0].At) {
		t.Fatalf("recent slow transactions %+v", r)
	}
	for i := range txstats.RecentSlow + 3 {
		add(txstats.SlowTx + time.Duration(i)*time.Microsecond)
	}
	if r := s.WriteStats(true).Recent; len(r) != txstats.RecentSlow || r[0].Lock != txstats.SlowTx+3*time.Microsecond || r[txstats.RecentSlow-1].Lock != txstats.SlowTx+time.Duration(txstats.RecentSlow+2)*time.Microsecond {
		t.Fatalf("after %d slow ones: %d kept, from %v to %v; want the last %d", txstats.RecentSlow+3, len(r), r[0].Lock, r[len(r)-1].Lock, txstats.RecentSlow)
	}
	add(2500 * time.Microsecond)
	add(6 * time.Millisecond)
	add(15 * time.Millisecond)
	ws = s.WriteStats(true)
	// 2.5 ms, 6 ms, 15 ms: the median's bucket ends at 6.25 ms, the
	// longest is the top quantile.
	if q := ws.Quantile(0.5); q != 6*time.Millisecond+txstats.HistBucket {
		t.Fatalf("median %v, want 6.25 ms", q)
	}
	if q := ws.Quantile(1); q != 15*time.Millisecond+txstats.HistBucket {
		t.Fatalf("top quantile %v, want the 15 ms bucket's end", q)
	}
	if q := (txstats.Stats{}).Quantile(0.99); q != 0 {
		t.Fatalf("no transactions: quantile %v", q)
	}
	if ws := s.WriteStats(false); ws.Transactions != 0 || ws.SlowBy != nil {
		t.Fatalf("after a reset: %+v", ws)
	}
	// A real transaction is counted, its lock time positive.
	if err := s.write(context.Background(), func(tx *sql.Tx) error {
		_, err := tx.Exec(`UPDATE counts SET n_waiting = n_waiting`)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if ws := s.WriteStats(false); ws.Transactions != 1 || ws.Total <= 0 {
		t.Fatalf("one transaction: %+v", ws)
	}
}

// PutUsage writes every row with its values as given (names needing JSON
// escapes, an infinite priority) and updates the rows already there.
func TestPutUsageWritesAndUpdatesEveryRow(t *testing.T) {
	s, _ := openWithJob(t, pgtest.DB(t, filepath.Join(t.TempDir(), "q.db")), 1)
	defer s.Close()
	ctx := context.Background()
	t0 := time.UnixMilli(1_700_000_000_123)
	rows := []UsageRow{
		{User: "alice", Usage: fairshare.Usage{RunningCores: 3, CPUTime24h: 1234.5, Cost24h: 0.1}, Priority: 0.25},
		{User: `b"o\b` + "\u00e9\u65e5\t", Usage: fairshare.Usage{CPUTime24h: 1e300}, Priority: math.Inf(1)},
		{User: "carol", Priority: -1},
	}
	if err := s.PutUsage(ctx, rows, t0); err != nil {
		t.Fatal(err)
	}
	rows[0].Usage.RunningCores, rows[0].Priority = 5, 3.5 // an update
	if err := s.PutUsage(ctx, rows[:1], t0.Add(time.Second)); err != nil {
		t.Fatal(err)
	}
	got := map[string]UsageRow{}
	r, err := s.r.Query(`SELECT "user", running_cores, cpu_24h, cost_24h, computed_priority, updated_at FROM usage`)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	stamps := map[string]int64{}
	for r.Next() {
		var u UsageRow
		var at int64
		if err := r.Scan(&u.User, &u.Usage.RunningCores, &u.Usage.CPUTime24h, &u.Usage.Cost24h, &u.Priority, &at); err != nil {
			t.Fatal(err)
		}
		got[u.User], stamps[u.User] = u, at
	}
	if len(got) != len(rows) {
		t.Fatalf("rows %v, want %d", got, len(rows))
	}
	for _, w := range rows {
		if got[w.User] != w {
			t.Fatalf("row %q: %+v, want %+v", w.User, got[w.User], w)
		}
	}
	if stamps["alice"] != t0.Add(time.Second).UnixMilli() || stamps["carol"] != t0.UnixMilli() {
		t.Fatalf("updated_at %v", stamps)
	}
	if err := s.PutUsage(ctx, []UsageRow{{User: "dave", Priority: math.NaN()}}, t0); err == nil {
		t.Fatal("a NaN priority was written")
	}
}

// A kill in chunks closes every live grant of the job, the last one too
// when the grants before it filled the chunks exactly.
func TestKillTasksInChunksClosesTheLastGrant(t *testing.T) {
	s, job := openWithJob(t, pgtest.DB(t, filepath.Join(t.TempDir(), "q.db")), 7)
	defer s.Close()
	ctx := context.Background()
	for range 3 {
		take(t, s, job, 2) // three grants of two open entries
	}
	if _, err := s.CancelJob(ctx, job, t0); err != nil {
		t.Fatal(err)
	}
	if err := s.KillTasks(ctx, job, t0, 2); err != nil {
		t.Fatal(err)
	}
	var live int
	if err := s.r.QueryRow(`SELECT count(*) FROM grants WHERE job_id = $1 AND state != 'CLOSED'`, job).Scan(&live); err != nil || live != 0 {
		t.Fatalf("%d grants still live after the kill (%v), want 0", live, err)
	}
	if n, err := s.Outstanding(ctx); err != nil || len(n) != 0 {
		t.Fatalf("outstanding %v %v, want none", n, err)
	}
}
