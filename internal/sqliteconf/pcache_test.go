package sqliteconf

import (
	"database/sql"
	"fmt"
	"path/filepath"
	"testing"
)

func openDB(t *testing.T, pageSize int) *sql.DB {
	t.Helper()
	db, err := sql.Open("sqlite3", filepath.Join(t.TempDir(), "t.db"))
	if err != nil {
		t.Fatal(err)
	}
	db.SetMaxOpenConns(1) // one connection, one page cache: what a rollback leaves in it is what the next statement reads
	t.Cleanup(func() { db.Close() })
	for _, q := range []string{
		fmt.Sprintf("PRAGMA page_size = %d", pageSize),
		"PRAGMA journal_mode = WAL",
		"PRAGMA cache_size = -32768",
		"CREATE TABLE t (k INTEGER PRIMARY KEY, v TEXT)",
		"CREATE INDEX t_v ON t (v)",
	} {
		if _, err := db.Exec(q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	return db
}

// series is a WITH clause of s(value): 1 to n.
func series(n int) string {
	return fmt.Sprintf("WITH RECURSIVE s(value) AS (SELECT 1 UNION ALL SELECT value + 1 FROM s WHERE value < %d) ", n)
}

func mustExec(t *testing.T, db interface {
	Exec(string, ...any) (sql.Result, error)
}, q string, args ...any) {
	t.Helper()
	if _, err := db.Exec(q, args...); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
}

func checkIntegrity(t *testing.T, db *sql.DB) {
	t.Helper()
	var res string
	if err := db.QueryRow("PRAGMA integrity_check").Scan(&res); err != nil || res != "ok" {
		t.Fatalf("integrity_check: %q, %v", res, err)
	}
}

// Rows inserted at scattered keys split pages whose new numbers come out
// of order, and SQLite renumbers them through a page past the lock byte:
// without the shim every commit after such a split walked the writer's
// whole page cache. With it, those truncates are skipped.
func TestCommitsAfterSplitsSkipTheCacheWalk(t *testing.T) {
	if Err != nil {
		t.Fatal(Err)
	}
	db := openDB(t, 1024)
	passed0, avoided0 := Truncates()
	for i := range 200 {
		tx, err := db.Begin()
		if err != nil {
			t.Fatal(err)
		}
		// 50 rows spread over the key space; every 3rd round deletes some,
		// so the freelist hands pages back in no particular order.
		mustExec(t, tx, series(50)+`INSERT INTO t (k, v) SELECT (value * 7919 + ?1 * 104729) % 1000003, hex(randomblob(40)) FROM s WHERE true
			ON CONFLICT(k) DO UPDATE SET v = excluded.v`, i)
		if i%3 == 2 {
			mustExec(t, tx, `DELETE FROM t WHERE k % 5 = ?`, i%5)
		}
		if err := tx.Commit(); err != nil {
			t.Fatal(err)
		}
	}
	passed, avoided := Truncates()
	passed, avoided = passed-passed0, avoided-avoided0
	t.Logf("truncates passed on %d, walks avoided %d", passed, avoided)
	if avoided < 20 {
		t.Fatalf("%d walks of the page cache avoided in 200 commits with splits: commits still walk it", avoided)
	}
	checkIntegrity(t, db)
}

// A transaction that grows the database and rolls back leaves pages past
// the database's end in the cache, which the truncate at its end drops
// (TestTruncateDropsEveryPageFromItsLimitOn checks that page by page):
// through SQLite, the database stays whole and holds what was committed.
func TestRollbackOfAGrowingTransactionDropsItsPages(t *testing.T) {
	for _, mode := range []string{"rollback", "savepoint"} {
		t.Run(mode, func(t *testing.T) {
			db := openDB(t, 1024)
			mustExec(t, db, series(2000)+`INSERT INTO t (k, v) SELECT value, 'base' || value FROM s`)
			for round := range 5 {
				tx, err := db.Begin()
				if err != nil {
					t.Fatal(err)
				}
				if mode == "savepoint" {
					mustExec(t, tx, "SAVEPOINT s")
				}
				// Grows the file by hundreds of pages, then is undone.
				mustExec(t, tx, series(3000)+`INSERT INTO t (k, v) SELECT 100000 + value, 'gone' || hex(randomblob(100)) FROM s`)
				if mode == "savepoint" {
					mustExec(t, tx, "ROLLBACK TO s")
					mustExec(t, tx, series(3000)+`INSERT INTO t (k, v) SELECT 200000 + ?1 * 10000 + value, 'kept' FROM s`, round)
					if err := tx.Commit(); err != nil {
						t.Fatal(err)
					}
				} else {
					if err := tx.Rollback(); err != nil {
						t.Fatal(err)
					}
					mustExec(t, db, series(3000)+`INSERT INTO t (k, v) SELECT 200000 + ?1 * 10000 + value, 'kept' FROM s`, round)
				}
				checkIntegrity(t, db)
			}
			var gone, kept int
			if err := db.QueryRow(`SELECT count(*) FILTER (WHERE v LIKE 'gone%'), count(*) FILTER (WHERE v = 'kept') FROM t`).Scan(&gone, &kept); err != nil {
				t.Fatal(err)
			}
			if gone != 0 || kept != 5*3000 {
				t.Fatalf("rows: %d rolled back ones, %d kept (want 0, %d)", gone, kept, 5*3000)
			}
		})
	}
}

// VACUUM shrinks the file, and the pages past its new end leave the
// cache: the database stays whole when it grows again.
func TestVacuumShrinksTheCache(t *testing.T) {
	db := openDB(t, 1024)
	mustExec(t, db, series(5000)+`INSERT INTO t (k, v) SELECT value, hex(randomblob(200)) FROM s`)
	mustExec(t, db, `DELETE FROM t WHERE k > 100`)
	mustExec(t, db, "VACUUM")
	mustExec(t, db, series(5000)+`INSERT INTO t (k, v) SELECT 10000 + value, 'new' FROM s`)
	checkIntegrity(t, db)
	var n int
	if err := db.QueryRow(`SELECT count(*) FROM t WHERE v = 'new'`).Scan(&n); err != nil || n != 5000 {
		t.Fatalf("new rows: %d, %v", n, err)
	}
}

// The shim's own rule, page by page: after a truncate at limit, no page
// numbered limit or above is in the cache, whatever renumbering came
// before; and a truncate with nothing to drop leaves every page.
func TestTruncateDropsEveryPageFromItsLimitOn(t *testing.T) {
	const temp = 1<<30/1024 + 1 // balance_nonroot's temporary number with 1 KiB pages
	c := newTestCache()
	if c == nil {
		t.Fatal("no page cache")
	}
	defer c.destroy()
	holds := func(want int, keys ...uint32) {
		t.Helper()
		for _, k := range keys {
			if !c.fetch(k, false) {
				t.Fatalf("page %d is gone", k)
			}
		}
		if n := c.pages(); n != want {
			t.Fatalf("%d pages, want %d", n, want)
		}
	}
	gone := func(keys ...uint32) {
		t.Helper()
		for _, k := range keys {
			if c.fetch(k, false) {
				t.Fatalf("page %d is still in the cache", k)
			}
		}
	}
	for k := uint32(1); k <= 100; k++ {
		c.fetch(k, true)
	}
	c.truncate(51) // a rollback that had grown the file by 50 pages
	gone(51, 75, 100)
	holds(50, 1, 50)

	// balance_nonroot swaps 10 and 20 through the temporary number.
	_, avoided0 := Truncates()
	if !c.rekey(10, temp) || !c.rekey(20, 10) || !c.rekey(temp, 20) {
		t.Fatal("rekey failed")
	}
	c.truncate(51) // the commit: nothing to drop
	holds(50, 10, 20, 50)
	gone(temp)
	if _, avoided := Truncates(); avoided != avoided0+1 {
		t.Fatalf("walks avoided: %d, want %d", avoided, avoided0+1)
	}

	// A page renumbered past the end (and not back) is dropped.
	if !c.rekey(30, 200) {
		t.Fatal("rekey failed")
	}
	c.truncate(51)
	gone(200, 30)
	holds(49, 1, 50)

	// More renumberings past the end than the shim lists one by one,
	// highest first.
	for i, k := range []uint32{2, 3, 4, 5, 6, 7} {
		if !c.rekey(k, 1005-uint32(i)) {
			t.Fatal("rekey failed")
		}
	}
	c.truncate(1002)
	gone(1002, 1005)
	holds(45, 1000, 1001)
	c.truncate(51)
	gone(1000, 1001, 2, 7)
	holds(43, 1, 8, 50)

	// Pages created past the end (a transaction that grew the file).
	for k := uint32(51); k <= 60; k++ {
		c.fetch(k, true)
	}
	c.truncate(56)
	gone(56, 60)
	holds(48, 51, 55)

	c.truncate(1) // what SQLite does to drop every page
	gone(1, 8, 55)
	holds(0)
}
