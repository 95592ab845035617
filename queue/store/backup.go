package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"os"
	"strconv"
)

// Backup writes a consistent copy of the queue database at path to dest,
// through SQLite (VACUUM INTO: one read transaction, so the copy is the
// database as of one commit, whatever the queue commits meanwhile). The
// queue may be running: a reader does not hold up its writer. dest must
// not exist. The copy is checked (integrity_check) before Backup returns
// its jobs' count. A copy is restored by stopping the queue and putting
// it in place of the database (with no -wal or -shm file beside it).
func Backup(ctx context.Context, path, dest string) (jobs int64, err error) {
	if IsURL(path) {
		return 0, fmt.Errorf("backup: %s is a PostgreSQL database: back it up with pg_dump (or the server's own backups)", Redact(path))
	}
	if _, err := os.Stat(path); err != nil {
		return 0, fmt.Errorf("backup: %w", err)
	}
	if _, err := os.Lstat(dest); err == nil {
		return 0, fmt.Errorf("backup: %s exists: name a new file", dest)
	}
	q := url.Values{}
	q.Set("_busy_timeout", strconv.FormatInt(busyTimeout.Milliseconds(), 10))
	db, err := sql.Open("sqlite3", "file:"+path+"?"+q.Encode())
	if err != nil {
		return 0, fmt.Errorf("backup: open %s: %w", path, err)
	}
	defer db.Close()
	var n int
	// A file that is not a queue database is refused before anything is
	// written.
	if err := db.QueryRowContext(ctx, `SELECT count(*) FROM schema_migrations`).Scan(&n); err != nil {
		return 0, fmt.Errorf("backup: %s is not a harvest queue database: %w", path, err)
	}
	if _, err := db.ExecContext(ctx, `VACUUM INTO ?`, dest); err != nil {
		return 0, fmt.Errorf("backup: copy %s to %s: %w", path, dest, err)
	}
	if err := private(dest); err != nil {
		return 0, fmt.Errorf("backup: %w", err)
	}
	c, err := sql.Open("sqlite3", "file:"+dest+"?_query_only=1")
	if err != nil {
		return 0, fmt.Errorf("backup: check %s: %w", dest, err)
	}
	defer c.Close()
	var res string
	if err := c.QueryRowContext(ctx, `PRAGMA integrity_check`).Scan(&res); err != nil || res != "ok" {
		return 0, errors.Join(fmt.Errorf("backup: the copy %s fails its integrity check: %q", dest, res), err)
	}
	if err := c.QueryRowContext(ctx, `SELECT count(*) FROM jobs`).Scan(&jobs); err != nil {
		return 0, fmt.Errorf("backup: check %s: %w", dest, err)
	}
	return jobs, nil
}
