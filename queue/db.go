package queue

import (
	"context"
	"database/sql"
	"embed"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"time"

	sqlite3 "github.com/mattn/go-sqlite3"
)

// The writer's driver turns off automatic checkpoints: a checkpoint run
// by a committing writer would count against its write lock (tens of ms).
// The queue checkpoints from a connection of its own instead (PASSIVE,
// which does not take the write lock).
func init() {
	sql.Register("sqlite3_harvest_writer", &sqlite3.SQLiteDriver{
		ConnectHook: func(c *sqlite3.SQLiteConn) error {
			_, err := c.Exec("PRAGMA wal_autocheckpoint = 0", nil)
			return err
		},
	})
}

//go:embed migrations/*.sql
var migrations embed.FS

// openDB opens the writer (one connection, so SQLite's single writer is a
// Go-level queue rather than SQLITE_BUSY retries) and a reader pool; WAL
// lets readers run while the writer writes.
func openDB(path string) (w, r, ck *sql.DB, err error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o750); err != nil {
		return nil, nil, nil, fmt.Errorf("create database directory: %w", err)
	}
	q := url.Values{}
	q.Set("_journal_mode", "WAL")
	q.Set("_busy_timeout", "5000")
	q.Set("_synchronous", "NORMAL") // WAL + NORMAL survives a process kill; see docs/queue.md
	q.Set("_txlock", "immediate")
	q.Set("_foreign_keys", "off")
	w, err = sql.Open("sqlite3_harvest_writer", "file:"+path+"?"+q.Encode())
	if err != nil {
		return nil, nil, nil, fmt.Errorf("open %s: %w", path, err)
	}
	w.SetMaxOpenConns(1)
	w.SetMaxIdleConns(1)
	w.SetConnMaxLifetime(0)
	if err := w.Ping(); err != nil {
		w.Close()
		return nil, nil, nil, fmt.Errorf("open %s: %w", path, err)
	}
	if err := migrate(w); err != nil {
		w.Close()
		return nil, nil, nil, err
	}
	rq := url.Values{}
	rq.Set("_busy_timeout", "5000")
	rq.Set("_query_only", "1")
	r, err = sql.Open("sqlite3", "file:"+path+"?"+rq.Encode())
	if err != nil {
		w.Close()
		return nil, nil, nil, fmt.Errorf("open %s for reading: %w", path, err)
	}
	r.SetMaxOpenConns(4)
	cq := url.Values{}
	cq.Set("_busy_timeout", "5000")
	ck, err = sql.Open("sqlite3", "file:"+path+"?"+cq.Encode())
	if err != nil {
		w.Close()
		r.Close()
		return nil, nil, nil, fmt.Errorf("open %s for checkpoints: %w", path, err)
	}
	ck.SetMaxOpenConns(1)
	return w, r, ck, nil
}

// checkpoint copies the WAL into the database file without blocking the
// writer (PASSIVE); SQLite then restarts the WAL from its beginning.
func (q *Queue) checkpoint(ctx context.Context) error {
	if _, err := q.ck.ExecContext(ctx, "PRAGMA wal_checkpoint(PASSIVE)"); err != nil {
		return fmt.Errorf("checkpoint: %w", err)
	}
	return nil
}

// migrate applies the embedded migrations in name order, each once.
func migrate(db *sql.DB) error {
	if _, err := db.Exec(`CREATE TABLE IF NOT EXISTS schema_migrations (name TEXT PRIMARY KEY, applied_at INTEGER NOT NULL)`); err != nil {
		return fmt.Errorf("create schema_migrations: %w", err)
	}
	names, err := fs.Glob(migrations, "migrations/*.sql")
	if err != nil {
		return fmt.Errorf("list migrations: %w", err)
	}
	sort.Strings(names)
	for _, name := range names {
		var n int
		if err := db.QueryRow(`SELECT count(*) FROM schema_migrations WHERE name = ?`, name).Scan(&n); err != nil {
			return fmt.Errorf("check migration %s: %w", name, err)
		}
		if n > 0 {
			continue
		}
		body, err := migrations.ReadFile(name)
		if err != nil {
			return fmt.Errorf("read migration %s: %w", name, err)
		}
		tx, err := db.Begin()
		if err != nil {
			return fmt.Errorf("migration %s: %w", name, err)
		}
		if _, err := tx.Exec(string(body)); err != nil {
			tx.Rollback()
			return fmt.Errorf("apply migration %s: %w", name, err)
		}
		if _, err := tx.Exec(`INSERT INTO schema_migrations (name, applied_at) VALUES (?, ?)`, name, time.Now().Unix()); err != nil {
			tx.Rollback()
			return fmt.Errorf("record migration %s: %w", name, err)
		}
		if err := tx.Commit(); err != nil {
			return fmt.Errorf("commit migration %s: %w", name, err)
		}
	}
	return nil
}

// WriteStats measures how long the queue holds SQLite's write lock.
type WriteStats struct {
	Transactions int64
	Total        time.Duration
	Longest      time.Duration
}

type writeStats struct {
	mu sync.Mutex
	s  WriteStats
}

func (w *writeStats) add(d time.Duration) {
	w.mu.Lock()
	w.s.Transactions++
	w.s.Total += d
	if d > w.s.Longest {
		w.s.Longest = d
	}
	w.mu.Unlock()
}

// WriteStats returns the write-lock figures since Open (or the last reset).
func (q *Queue) WriteStats(reset bool) WriteStats {
	q.wstats.mu.Lock()
	defer q.wstats.mu.Unlock()
	s := q.wstats.s
	if reset {
		q.wstats.s = WriteStats{}
	}
	return s
}

// write runs fn in one IMMEDIATE transaction on the writer connection and
// records how long the write lock was held (BEGIN to COMMIT).
func (q *Queue) write(ctx context.Context, fn func(tx *sql.Tx) error) error {
	tx, err := q.w.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("begin: %w", err)
	}
	start := time.Now() // BEGIN IMMEDIATE has taken the lock; pool waits are not lock time
	if err := fn(tx); err != nil {
		tx.Rollback()
		return err
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("commit: %w", err)
	}
	q.wstats.add(time.Since(start))
	return nil
}

func ms(t time.Time) int64 { return t.UnixMilli() }

func sec(msv int64) int64 {
	if msv == 0 {
		return 0
	}
	return msv / 1000
}
