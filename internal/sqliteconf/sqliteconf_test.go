package sqliteconf

import (
	"database/sql"
	"path/filepath"
	"testing"
)

// With the statistics on, SQLite counts every allocation of every
// connection under one process-wide mutex: after a connection has worked,
// sqlite3_memory_used is its page cache and statements (hundreds of KiB).
func TestMemoryStatisticsAreOff(t *testing.T) {
	if Err != nil {
		t.Fatal(Err)
	}
	db, err := sql.Open("sqlite3", filepath.Join(t.TempDir(), "t.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	for _, q := range []string{
		"CREATE TABLE t (x TEXT)",
		"WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 5000) INSERT INTO t SELECT hex(randomblob(64)) FROM n",
	} {
		if _, err := db.Exec(q); err != nil {
			t.Fatal(err)
		}
	}
	var n int
	if err := db.QueryRow("SELECT count(*) FROM t WHERE x > ''").Scan(&n); err != nil || n != 5000 {
		t.Fatalf("count: %d, %v", n, err)
	}
	if used := memoryUsed(); used != 0 {
		t.Fatalf("sqlite3_memory_used() = %d with a connection open: SQLite still counts its allocations (under its global mutex)", used)
	}
}
