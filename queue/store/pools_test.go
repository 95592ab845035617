package store

import (
	"github.com/harvest-hpc/harvest/internal/pgtest"

	"context"
	"database/sql"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/harvest-hpc/harvest/pilotproto"
	"github.com/harvest-hpc/harvest/queue/api"
	"github.com/harvest-hpc/harvest/queue/store/schema"
)

// job makes a WAITING job with the named tasks.
func job(t *testing.T, s *Store, t0 time.Time, names ...string) int64 {
	t.Helper()
	ctx := context.Background()
	id, err := s.CreateJob(ctx, NewJob{Owner: "alice", Dataset: "/d", Command: []string{"p"}, BatchSize: 1, Price: 1, Cores: 1, MaxAttempts: 3, Submitted: t0, Expires: t0.Add(time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.InsertTasks(ctx, id, names, 100, nil); err != nil {
		t.Fatal(err)
	}
	if err := s.ActivateJob(ctx, id, "/o", len(names)); err != nil {
		t.Fatal(err)
	}
	return id
}

// Each site's pilots form a pool with its own lease: epochs count per
// pool, a pool's writes are fenced by its own lease only, and a pool
// cannot touch the tasks handed to another.
func TestPoolsHaveTheirOwnLeasesAndTasks(t *testing.T) {
	s, err := Open(pgtest.DB(t, filepath.Join(t.TempDir(), "q.db")))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	t0 := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	for _, p := range []string{"a", "b"} {
		// Pilot ids collide across clusters (job ids start at 1 on each).
		if _, d, err := s.DecideLease(ctx, p, pilotproto.LeaseRequest{PilotID: "1", Address: "http://" + p}, t0, time.Minute); err != nil || !d.Granted || d.Next.Epoch != 1 {
			t.Fatalf("lease of %s: %+v %v", p, d, err)
		}
	}
	leases, err := s.Leases(ctx)
	if err != nil || len(leases) != 2 || leases["a"].Address != "http://a" || leases["b"].Epoch != 1 {
		t.Fatalf("leases %+v %v", leases, err)
	}
	id := job(t, s, t0, "x", "y", "z")
	ta, err := s.Assign(ctx, "a", 1, t0, map[int64]int{id: 2})
	if err != nil || len(ta.Tasks[id]) != 2 {
		t.Fatalf("assign to a: %+v %v", ta, err)
	}
	tb, err := s.Assign(ctx, "b", 1, t0, map[int64]int{id: 5})
	if err != nil || len(tb.Tasks[id]) != 1 || tb.Tasks[id][0].Name != "z" {
		t.Fatalf("assign to b: %+v %v", tb, err)
	}
	out, err := s.Outstanding(ctx)
	if err != nil || out["a"] != 2 || out["b"] != 1 {
		t.Fatalf("outstanding %v %v", out, err)
	}

	// b's master reports a result for a task handed to a: ignored, and not
	// recorded, so a's real result still counts.
	x := ta.Tasks[id][0]
	res, err := s.ApplyResults(ctx, "b", 1, t0, []pilotproto.Result{{TaskID: x.ID, Attempt: x.Attempt, Status: pilotproto.StatusFailed}})
	if err != nil || res.Ignored != 1 || len(res.Outcomes) != 0 {
		t.Fatalf("b's result for a's task: %+v %v", res, err)
	}
	res, err = s.ApplyResults(ctx, "a", 1, t0.Add(3*time.Second), []pilotproto.Result{{TaskID: x.ID, Attempt: x.Attempt, Status: pilotproto.StatusDone, DurationMS: 2500}})
	if err != nil || len(res.Outcomes) != 1 || res.Outcomes[0].TurnaroundMS != 3000 || res.Outcomes[0].DurationMS != 2500 {
		t.Fatalf("a's result: %+v %v", res, err)
	}
	z := tb.Tasks[id][0]
	if _, err := s.ApplyResults(ctx, "b", 1, t0, []pilotproto.Result{{TaskID: z.ID, Attempt: z.Attempt, Status: pilotproto.StatusDone}}); err != nil {
		t.Fatal(err)
	}
	pools, err := s.JobPools(ctx, id)
	if err != nil || pools["a"] != [2]int{1, 0} || pools["b"] != [2]int{1, 0} {
		t.Fatalf("where the job ran: %v %v", pools, err)
	}

	// A new master of a (epoch 2) is fenced per pool: b's epoch 1 still writes.
	if _, _, err := s.DecideLease(ctx, "a", pilotproto.LeaseRequest{PilotID: "7"}, t0.Add(2*time.Minute), time.Minute); err != nil {
		t.Fatal(err)
	}
	if err := s.CheckEpoch(ctx, "a", 1, t0.Add(2*time.Minute)); !errors.Is(err, api.ErrStaleEpoch) {
		t.Fatalf("a's old epoch: %v", err)
	}
	if _, _, err := s.DecideLease(ctx, "b", pilotproto.LeaseRequest{PilotID: "1", Epoch: 1}, t0.Add(50*time.Second), time.Hour); err != nil {
		t.Fatal(err)
	}
	if err := s.CheckEpoch(ctx, "b", 1, t0.Add(2*time.Minute)); err != nil {
		t.Fatalf("b's epoch after a's takeover: %v", err)
	}
	// The new master of a finds a's older task; b's are not a's business.
	older, err := s.ActiveTasksBefore(ctx, "a", 2, time.Time{})
	if err != nil || len(older) != 1 || older[0].TaskID != ta.Tasks[id][1].ID {
		t.Fatalf("a's tasks of older epochs: %+v %v", older, err)
	}
	// A heartbeat of b does not keep a's task alive.
	y := ta.Tasks[id][1]
	if err := s.Heartbeat(ctx, "b", 1, t0.Add(2*time.Minute), time.Hour, []pilotproto.TaskRange{{First: y.ID, Last: y.ID, Attempt: y.Attempt}}); err != nil {
		t.Fatal(err)
	}
	var state string
	s.r.QueryRow(`SELECT state FROM tasks WHERE id = $1`, y.ID).Scan(&state)
	if state != "ASSIGNED" {
		t.Fatalf("a's task is %s after b's heartbeat listed it", state)
	}
}

// A version-1 database keeps its master: the one lease becomes the local
// pool's, and the tasks handed out under it are the local pool's.
func TestTheV1LeaseBecomesTheLocalPools(t *testing.T) {
	path := filepath.Join(t.TempDir(), "q.db")
	db, err := sql.Open("sqlite3", path)
	if err != nil {
		t.Fatal(err)
	}
	v1, err := schema.FS.ReadFile("migrations/001_init.sql")
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{string(v1),
		`CREATE TABLE schema_migrations (name TEXT PRIMARY KEY, applied_at INTEGER NOT NULL)`,
		`INSERT INTO schema_migrations VALUES ('migrations/001_init.sql', 0)`,
		`UPDATE lease SET epoch = 7, holder = 'p9', address = 'http://m', expires_at = 99`,
		`INSERT INTO jobs (owner, state, dataset, output_dir, command, batch_size, price, cores, max_attempts, timeout_s, submitted_at, expires_at, n_total, n_active, n_done)
			VALUES ('alice', 'RUNNING', '/d', '/o', '["p"]', 1, 1, 1, 3, 0, 0, 0, 3, 1, 1)`,
		`INSERT INTO tasks (job_id, name, state, attempt, epoch, queued_at) VALUES (1, 'a', 'RUNNING', 1, 7, 0), (1, 'b', 'DONE', 1, 6, 0), (1, 'c', 'WAITING', 0, 0, 0)`,
	} {
		if _, err := db.Exec(q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	db.Close()
	s, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	l, err := s.Lease(ctx, api.LocalSite)
	if err != nil || l.Epoch != 7 || l.Holder != "p9" || l.Address != "http://m" {
		t.Fatalf("local lease %+v %v", l, err)
	}
	// The upgrade to grants (schema 008) requeues running tasks, without
	// an attempt charged: nothing is active, task a waits again.
	older, err := s.ActiveTasksBefore(ctx, api.LocalSite, 8, time.Time{})
	if err != nil || len(older) != 0 {
		t.Fatalf("local tasks of older epochs %+v %v", older, err)
	}
	var st string
	var tries int
	if err := s.r.QueryRow(`SELECT state, tries FROM tasks WHERE job_id = 1 AND idx = 0`).Scan(&st, &tries); err != nil || st != "WAITING" || tries != 0 {
		t.Fatalf("the running task after the upgrade: %s, %d tries (%v)", st, tries, err)
	}
	pools, err := s.JobPools(ctx, 1)
	if err != nil || pools[api.LocalSite] != [2]int{1, 0} {
		t.Fatalf("job pools %v %v", pools, err)
	}
}

func TestSites(t *testing.T) {
	s, err := Open(pgtest.DB(t, filepath.Join(t.TempDir(), "q.db")))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	t0 := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	if err := s.AddSite(ctx, "b", "h1", "agent", t0); err != nil {
		t.Fatal(err)
	}
	if err := s.PutSite(ctx, Site{Name: "b", MinNodes: 1, MaxNodes: 5, Paused: true}); err != nil {
		t.Fatal(err)
	}
	// Adding it again replaces the agent token and keeps the settings.
	if err := s.AddSite(ctx, "b", "h2", "agent", t0.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	st, ok, err := s.Site(ctx, "b")
	if err != nil || !ok || st.MaxNodes != 5 || !st.Paused || !st.CreatedAt.Equal(t0) {
		t.Fatalf("site %+v %v %v", st, ok, err)
	}
	if _, _, _, ok, _ := s.TokenIdentity(ctx, "h1"); ok {
		t.Fatal("the replaced agent token still works")
	}
	if u, r, _, ok, _ := s.TokenIdentity(ctx, "h2"); !ok || u != "b" || r != "agent" {
		t.Fatalf("agent token: %s %s %v", u, r, ok)
	}
	if err := s.PutSite(ctx, Site{Name: "nope"}); err == nil {
		t.Fatal("settings of an unregistered site were stored")
	}
	if err := s.PutNodeSettings(ctx, 2, 8, 12); err != nil {
		t.Fatal(err)
	}
	if lo, hi, n, err := s.NodeSettings(ctx); lo != 2 || hi != 8 || n != 12 || err != nil {
		t.Fatalf("node settings %d %d, global max %d %v", lo, hi, n, err)
	}
	sites, err := s.Sites(ctx)
	if err != nil || len(sites) != 1 {
		t.Fatalf("sites %+v %v", sites, err)
	}
}
