package dbcopy_test

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/harvest-hpc/harvest/internal/pgtest"
	"github.com/harvest-hpc/harvest/pilotproto"
	"github.com/harvest-hpc/harvest/queue/dbcopy"
	"github.com/harvest-hpc/harvest/queue/fairshare"
	"github.com/harvest-hpc/harvest/queue/store"
)

// dump is every row of every queue table of db, in key order, as text.
func dump(t *testing.T, db string) string {
	t.Helper()
	var b strings.Builder
	c := openTables(t, db)
	for _, table := range dbcopy.Tables {
		rows, err := c.Query(`SELECT * FROM ` + table + ` ORDER BY 1, 2`)
		if err != nil {
			t.Fatal(err)
		}
		cols, _ := rows.Columns()
		fmt.Fprintf(&b, "== %s %v\n", table, cols)
		for rows.Next() {
			vals := make([]any, len(cols))
			ptrs := make([]any, len(cols))
			for i := range vals {
				ptrs[i] = &vals[i]
			}
			if err := rows.Scan(ptrs...); err != nil {
				t.Fatal(err)
			}
			for _, v := range vals {
				if bs, ok := v.([]byte); ok {
					v = string(bs)
				}
				fmt.Fprintf(&b, "%v|", v)
			}
			b.WriteByte('\n')
		}
		rows.Close()
	}
	return b.String()
}

// A queue's SQLite database after a run with failures, retries, an
// expiry, a cancel, quotas, tokens, sites and two pools' leases moves to
// PostgreSQL whole: every table's rows are equal after the copy, and the
// copy goes on numbering jobs after the last one.
func TestMigrateToPostgreSQLLosesNothing(t *testing.T) {
	if !pgtest.Enabled() {
		t.Skip("needs PostgreSQL: run with HARVEST_TEST_DB=postgres (scripts/test.sh does)")
	}
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "q.db")
	s, a := openWithJob(t, path, 12)
	if _, d, err := s.DecideLease(ctx, "b", pilotproto.LeaseRequest{PilotID: "pb"}, t0, time.Hour); err != nil || !d.Granted {
		t.Fatal(d, err)
	}
	reportIn(t, s, "local", pilotproto.StatusDone, takeIn(t, s, "local", a, 4)...)
	reportIn(t, s, "local", pilotproto.StatusFailed, takeIn(t, s, "local", a, 2)...)
	retried := takeIn(t, s, "local", a, 2) // the two failed ones again
	reportIn(t, s, "local", pilotproto.StatusTimeout, retried[:1]...)
	takeIn(t, s, "b", a, 3) // left open
	if _, err := s.MarkZombies(ctx, t0.Add(time.Minute), 100); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.ExpireZombies(ctx, t0.Add(time.Minute), t0.Add(2*time.Minute), 100); err != nil {
		t.Fatal(err)
	}
	c := makeJob(t, s, "x", "y", "z")
	takeIn(t, s, "local", c, 2)
	if _, err := s.CancelJob(ctx, c, t0.Add(3*time.Minute)); err != nil {
		t.Fatal(err)
	}
	if err := s.KillTasks(ctx, c, t0.Add(3*time.Minute), 1); err != nil {
		t.Fatal(err)
	}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(s.PutUser(ctx, "alice", fairshare.Limits{Priority: 2, MaxParallelJobs: 7, MaxTotalRunningTime: 1e6, MaxTotalCpuCost: 1e5}, t0))
	must(s.EnsureUser(ctx, "bob", fairshare.Limits{Priority: 1, MaxParallelJobs: 20, MaxTotalRunningTime: 1e7, MaxTotalCpuCost: 1e7}, t0))
	must(s.PutUsage(ctx, []store.UsageRow{{User: "alice", Usage: fairshare.Usage{RunningCores: 3, CPUTime24h: 12.5, Cost24h: 25}, Priority: 0.75}}, t0))
	must(s.PutToken(ctx, "h1", "alice", "user", t0, time.Time{}, 10))
	must(s.AddSite(ctx, "b", "h2", "agent", t0))
	must(s.PutSite(ctx, store.Site{Name: "b", MinNodes: 1, MaxNodes: 4, Paused: true}))
	must(s.PutNodeSettings(ctx, 2, 8, 12))
	before := dump(t, path)
	must(s.Close())

	url := pgtest.URL(t)
	copied, err := dbcopy.Migrate(ctx, path, url)
	if err != nil {
		t.Fatal(err)
	}
	if copied["entries"] != 15 || copied["jobs"] != 2 || copied["exceptions"] == 0 || copied["usage_log"] == 0 || copied["leases"] != 2 {
		t.Fatalf("copied %v", copied)
	}
	p, err := store.Open(url)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if after := dump(t, url); after != before {
		t.Fatalf("PostgreSQL after the migration:\n%s\nSQLite before it:\n%s", after, before)
	}
	// A second migration into it is refused and changes nothing.
	if _, err := dbcopy.Migrate(ctx, path, url); err == nil || !strings.Contains(err.Error(), "not empty") {
		t.Fatalf("a migration into a non-empty database: %v", err)
	}
	if after := dump(t, url); after != before {
		t.Fatal("a refused migration changed the target")
	}
	id := makeJob(t, p, "n")
	if id != c+1 {
		t.Fatalf("the next job after the migration is %d, want %d", id, c+1)
	}
}
