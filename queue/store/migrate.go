package store

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
)

// copyTables are the queue's tables in the order Migrate copies them: all
// of them (the tasks view and schema_migrations are each engine's own).
var copyTables = []string{"users", "usage", "tokens", "settings", "sites", "leases", "jobs", "counts", "entries", "grants", "exceptions", "usage_log"}

// identities are the tables whose ids PostgreSQL numbers itself.
var identities = []string{"jobs", "grants", "usage_log"}

// copyRows is how many rows one INSERT of Migrate carries.
const copyRows = 200

// Migrate copies every row of the queue's SQLite database at from into
// the empty PostgreSQL database (or schema) at the URL to, in one
// transaction of the target read from one snapshot of the source, and
// returns the rows copied per table. A target with any row in a queue
// table is refused and left as it was. The queue must be stopped (nothing
// writes the source meanwhile; harvest queue migrate holds its lock).
func Migrate(ctx context.Context, from, to string) (map[string]int64, error) {
	if IsURL(from) || !IsURL(to) {
		return nil, fmt.Errorf("migrate: from a SQLite file to a postgres:// URL (got %s to %s)", Redact(from), Redact(to))
	}
	src, err := Open(from)
	if err != nil {
		return nil, err
	}
	defer src.Close()
	dst, err := Open(to)
	if err != nil {
		return nil, err
	}
	defer dst.Close()
	for _, t := range copyTables {
		var n int64
		if err := dst.r.QueryRowContext(ctx, `SELECT count(*) FROM `+t).Scan(&n); err != nil {
			return nil, fmt.Errorf("migrate: %w", err)
		}
		if n > 0 {
			return nil, fmt.Errorf("migrate: %s is not empty (%d rows in %s): migrate into a new database", Redact(to), n, t)
		}
	}
	rtx, err := src.r.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		return nil, fmt.Errorf("migrate: %w", err)
	}
	defer rtx.Rollback()
	read := &wtx{rtx, src.d}
	copied := map[string]int64{}
	err = dst.write(ctx, func(tx *wtx) error {
		for _, t := range copyTables {
			n, err := copyTable(ctx, read, tx, t)
			if err != nil {
				return fmt.Errorf("copy %s: %w", t, err)
			}
			copied[t] = n
		}
		for _, t := range identities {
			if _, err := tx.ExecContext(ctx, `SELECT setval(pg_get_serial_sequence('`+t+`', 'id'), coalesce(max(id), 0) + 1, false) FROM `+t); err != nil {
				return fmt.Errorf("number %s: %w", t, err)
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("migrate: %w", err)
	}
	return copied, nil
}

// copyTable copies table from src to dst, copyRows rows an INSERT, and
// counts them.
func copyTable(ctx context.Context, src, dst *wtx, table string) (int64, error) {
	rows, err := src.QueryContext(ctx, `SELECT * FROM `+table)
	if err != nil {
		return 0, err
	}
	defer rows.Close()
	cols, err := rows.Columns()
	if err != nil {
		return 0, err
	}
	row := "(?" + strings.Repeat(", ?", len(cols)-1) + ")"
	head := `INSERT INTO ` + table + ` ("` + strings.Join(cols, `", "`) + `") VALUES `
	var n int64
	var args []any
	flush := func() error {
		if len(args) == 0 {
			return nil
		}
		k := len(args) / len(cols)
		_, err := dst.ExecContext(ctx, head+strings.TrimSuffix(strings.Repeat(row+", ", k), ", "), args...)
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
