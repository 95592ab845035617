// Package dbcopy copies a whole queue database elsewhere, for its admin:
// a backup of a SQLite database into a new file (harvest queue backup),
// and a move of one to PostgreSQL (harvest queue migrate). Both read the
// source in one transaction, through its driver, and write nothing to it.
package dbcopy

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"

	_ "github.com/jackc/pgx/v5/stdlib" // the "pgx" driver
	_ "github.com/mattn/go-sqlite3"

	"github.com/harvest-hpc/harvest/queue/store"
)

// Backup writes a consistent copy of the queue database at path to dest,
// through SQLite (VACUUM INTO: one read transaction, so the copy is the
// database as of one commit, whatever the queue commits meanwhile). The
// queue may be running: a reader does not hold up its writer. dest must
// not exist. The copy is checked (integrity_check) before Backup returns
// its jobs' count. A copy is restored by stopping the queue and putting
// it in place of the database (with no -wal or -shm file beside it).
func Backup(ctx context.Context, path, dest string) (jobs int64, err error) {
	if store.IsURL(path) {
		return 0, fmt.Errorf("backup: %s is a PostgreSQL database: back it up with pg_dump (or the server's own backups)", store.Redact(path))
	}
	if _, err := os.Stat(path); err != nil {
		return 0, fmt.Errorf("backup: %w", err)
	}
	if _, err := os.Lstat(dest); err == nil {
		return 0, fmt.Errorf("backup: %s exists: name a new file", dest)
	}
	db, err := sql.Open("sqlite3", "file:"+path+"?_busy_timeout=5000")
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
	// Every job and command is in the copy: the owner's only.
	if err := os.Chmod(dest, 0o600); err != nil {
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

// Tables are the queue's tables in the order Migrate copies them: all of
// them (the tasks view and schema_migrations are each engine's own).
var Tables = []string{"users", "usage", "tokens", "settings", "sites", "leases", "jobs", "counts", "entries", "grants", "exceptions", "usage_log"}

// identities are the tables whose ids PostgreSQL numbers itself.
var identities = []string{"jobs", "grants", "usage_log"}

// copyRows is how many rows one INSERT of Migrate carries.
const copyRows = 200

// Migrate copies every row of the queue's SQLite database at from into
// the empty PostgreSQL database (or schema) at the URL to, in one
// transaction of the target read from one snapshot of the source, and
// returns the rows copied per table. Both are first opened through the
// store, which brings their schemas to this binary's. A target with any
// row in a queue table is refused and left as it was. The queue must be
// stopped (nothing writes the source meanwhile; harvest queue migrate
// holds its lock).
func Migrate(ctx context.Context, from, to string) (map[string]int64, error) {
	if store.IsURL(from) || !store.IsURL(to) {
		return nil, fmt.Errorf("migrate: from a SQLite file to a postgres:// URL (got %s to %s)", store.Redact(from), store.Redact(to))
	}
	for _, db := range []string{from, to} {
		s, err := store.Open(db)
		if err != nil {
			return nil, err
		}
		if err := s.Close(); err != nil {
			return nil, err
		}
	}
	src, err := sql.Open("sqlite3", "file:"+from+"?_query_only=1")
	if err != nil {
		return nil, fmt.Errorf("migrate: %w", err)
	}
	defer src.Close()
	dst, err := sql.Open("pgx", to)
	if err != nil {
		return nil, fmt.Errorf("migrate: %w", err)
	}
	defer dst.Close()
	for _, t := range Tables {
		var n int64
		if err := dst.QueryRowContext(ctx, `SELECT count(*) FROM `+t).Scan(&n); err != nil {
			return nil, fmt.Errorf("migrate: %w", err)
		}
		if n > 0 {
			return nil, fmt.Errorf("migrate: %s is not empty (%d rows in %s): migrate into a new database", store.Redact(to), n, t)
		}
	}
	rtx, err := src.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		return nil, fmt.Errorf("migrate: %w", err)
	}
	defer rtx.Rollback()
	tx, err := dst.BeginTx(ctx, nil)
	if err != nil {
		return nil, fmt.Errorf("migrate: %w", err)
	}
	defer tx.Rollback()
	copied := map[string]int64{}
	for _, t := range Tables {
		if copied[t], err = copyTable(ctx, rtx, tx, t); err != nil {
			return nil, fmt.Errorf("migrate: copy %s: %w", t, err)
		}
	}
	for _, t := range identities {
		if _, err := tx.ExecContext(ctx, `SELECT setval(pg_get_serial_sequence('`+t+`', 'id'), coalesce(max(id), 0) + 1, false) FROM `+t); err != nil {
			return nil, fmt.Errorf("migrate: number %s: %w", t, err)
		}
	}
	if err := tx.Commit(); err != nil {
		return nil, fmt.Errorf("migrate: %w", err)
	}
	return copied, nil
}

// copyTable copies table from src to dst, copyRows rows an INSERT, and
// counts them.
func copyTable(ctx context.Context, src, dst *sql.Tx, table string) (int64, error) {
	rows, err := src.QueryContext(ctx, `SELECT * FROM `+table)
	if err != nil {
		return 0, err
	}
	defer rows.Close()
	cols, err := rows.Columns()
	if err != nil {
		return 0, err
	}
	head := `INSERT INTO ` + table + ` ("` + strings.Join(cols, `", "`) + `") VALUES `
	var n int64
	var args []any
	flush := func() error {
		if len(args) == 0 {
			return nil
		}
		k := len(args) / len(cols)
		q := []byte(head)
		for i := range args { // ($1, $2), ($3, $4): in order, as SQLite binds them
			switch {
			case i == 0:
				q = append(q, '(')
			case i%len(cols) == 0:
				q = append(q, "), ("...)
			default:
				q = append(q, ", "...)
			}
			q = append(q, '$')
			q = strconv.AppendInt(q, int64(i+1), 10)
		}
		_, err := dst.ExecContext(ctx, string(append(q, ')')), args...)
		n += int64(k)
		args = args[:0]
		return err
	}
	for rows.Next() {
		vals := make([]any, len(cols))
		ptrs := make([]any, len(cols))
		for i := range vals {
			ptrs[i] = &vals[i]
		}
		if err := rows.Scan(ptrs...); err != nil {
			return 0, err
		}
		for _, v := range vals {
			if b, ok := v.([]byte); ok {
				v = string(b)
			}
			args = append(args, v)
		}
		if len(args) >= copyRows*len(cols) {
			if err := flush(); err != nil {
				return 0, err
			}
		}
	}
	if err := rows.Err(); err != nil {
		return 0, err
	}
	return n, flush()
}
