package store

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/harvest-hpc/harvest/pilotproto"
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
// and migrates: job 1 as it was but its running task requeued (the
// upgrade to grants requeues running tasks without charging an attempt),
// job 2's kill pending and then finished.
func TestADatabaseOfThePreviousReleaseOpensAndItsCutCancelIsFinished(t *testing.T) {
	path := fixture(t, "v6-cut-cancel.db")
	s, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	j, err := s.Job(ctx, 1)
	if err != nil || j.State != api.JobRunning || j.Tasks.Total != 6 || j.Tasks.Done != 1 || j.Tasks.Running != 0 || j.Tasks.Waiting != 5 {
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

// testdata/v7-main-c00398c.db was written by main at c00398c (schema
// 007, the last before grants) through this package's API: users alice
// and bob (priority 2), a usage row and a token of alice, pool local's
// lease (epoch 1, holder p1); job 1 (alice, 6 entries, 2 attempts): a
// done, b failed once and requeued, c interrupted and requeued, d
// running, e and f waiting; job 2 (bob) all 3 done; job 3 (bob, 1
// attempt): p failed for good, q waiting; job 4 (alice) cancelled and
// killed. It opens and migrates with every count, state and failure it
// had, the running entry waiting again without an attempt charged, and
// the queue goes on: the retries are handed out again with their next
// attempt, then the fresh entries.
func TestADatabaseOfTodaysMainUpgradesToGrants(t *testing.T) {
	s, err := Open(fixture(t, "v7-main-c00398c.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	want := map[int64]struct {
		state string
		c     api.TaskCounts
	}{
		1: {api.JobRunning, api.TaskCounts{Total: 6, Waiting: 5, Done: 1}},
		2: {api.JobDone, api.TaskCounts{Total: 3, Done: 3}},
		3: {api.JobRunning, api.TaskCounts{Total: 2, Waiting: 1, Failed: 1}},
		4: {api.JobKilled, api.TaskCounts{Total: 3, Killed: 3}},
	}
	for id, w := range want {
		j, err := s.Job(ctx, id)
		if err != nil || j.State != w.state || j.Tasks != w.c {
			t.Fatalf("job %d after the upgrade: %s %+v %v, want %s %+v", id, j.State, j.Tasks, err, w.state, w.c)
		}
	}
	var states string
	rows, err := s.r.Query(`SELECT name || ':' || state || '/' || attempt || '/' || tries FROM tasks ORDER BY id`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var x string
		rows.Scan(&x)
		states += x + " "
	}
	rows.Close()
	if w := "a:DONE/1/0 b:WAITING/1/1 c:WAITING/1/0 d:WAITING/1/0 e:WAITING/0/0 f:WAITING/0/0 x:DONE/1/0 y:DONE/1/0 z:DONE/1/0 p:ERROR_E/1/1 q:WAITING/0/0 k1:KILLED/1/0 k2:KILLED/0/0 k3:KILLED/0/0 "; states != w {
		t.Fatalf("entries after the upgrade:\n%s\nwant\n%s", states, w)
	}
	users, err := s.Users(ctx)
	if err != nil || len(users) != 2 || users["bob"].Priority != 2 {
		t.Fatalf("users %+v %v", users, err)
	}
	if u, role, _, ok, err := s.TokenIdentity(ctx, "abc123"); err != nil || !ok || u != "alice" || role != "user" {
		t.Fatalf("token: %s %s %v %v", u, role, ok, err)
	}
	var cpu float64
	if err := s.r.QueryRow(`SELECT cpu_24h FROM usage WHERE user = 'alice'`).Scan(&cpu); err != nil || cpu != 30 {
		t.Fatalf("alice's usage row: %v %v", cpu, err)
	}
	ev, err := s.UsageEvents(ctx, time.Date(2026, 11, 26, 0, 0, 0, 0, time.UTC))
	if err != nil || len(ev["alice"]) == 0 || len(ev["bob"]) == 0 {
		t.Fatalf("usage events of the last day: %+v %v", ev, err)
	}
	pools, err := s.JobPools(ctx, 2)
	if err != nil || pools["local"] != [2]int{3, 0} {
		t.Fatalf("job 2 per pool: %v %v", pools, err)
	}
	fs, err := s.Failures(ctx, 3, 0, 10)
	if err != nil || len(fs) != 1 || fs[0].Name != "p" || fs[0].Status != "failed" || fs[0].ExitCode != 7 || fs[0].ErrorTail != "boom failed" || fs[0].Attempt != 1 {
		t.Fatalf("job 3's failures: %+v %v", fs, err)
	}
	l, err := s.Lease(ctx, "local")
	if err != nil || l.Epoch != 1 || l.Holder != "p1" {
		t.Fatalf("lease %+v %v", l, err)
	}
	// The queue goes on: a new master (the old lease expired) is handed
	// job 1's retries first (b, c, d with attempt 2), then e.
	now := time.Date(2026, 11, 27, 0, 0, 0, 0, time.UTC)
	_, d, err := s.DecideLease(ctx, "local", pilotproto.LeaseRequest{PilotID: "p2"}, now, time.Hour)
	if err != nil || d.Next.Epoch != 2 {
		t.Fatalf("lease: %+v %v", d, err)
	}
	got, err := s.Assign(ctx, "local", 2, now, map[int64]int{1: 4})
	if err != nil {
		t.Fatal(err)
	}
	var handed string
	for _, tk := range got.Tasks[1] {
		handed += fmt.Sprintf("%s/%d ", tk.Name, tk.Attempt)
	}
	if handed != "b/2 c/2 d/2 e/1 " {
		t.Fatalf("handed out %q after the upgrade", handed)
	}
}
