package store

import (
	"context"
	"database/sql"
	"errors"
	"strconv"
	"strings"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/jackc/pgx/v5/pgconn"
	sqlite3 "github.com/mattn/go-sqlite3"
)

// The store's statements are written once, with ? placeholders, in SQL
// both engines run; the dialect holds where they differ.
type dialect struct{ pg bool }

// sql spells query for the engine.
func (d *dialect) sql(query string) string {
	if d.pg {
		return Rebind(query)
	}
	return query
}

// Rebind numbers the ? placeholders of query outside string literals and
// quoted names: the statement as PostgreSQL spells it.
func Rebind(query string) string {
	var b strings.Builder
	n, quote := 0, byte(0)
	for _, c := range []byte(query) {
		switch {
		case quote == 0 && c == '?':
			n++
			b.WriteString("$" + strconv.Itoa(n))
			continue
		case quote == 0 && (c == '\'' || c == '"'):
			quote = c
		case c == quote:
			quote = 0
		}
		b.WriteByte(c)
	}
	return b.String()
}

// duplicate is whether err is a unique-constraint violation.
func duplicate(err error) bool {
	var se sqlite3.Error
	var pe *pgconn.PgError
	return errors.As(err, &se) && se.ExtendedCode == sqlite3.ErrConstraintUnique ||
		errors.As(err, &pe) && pe.Code == "23505"
}

// retryable is whether a PostgreSQL transaction failed only because
// another committed first (serialization failure, deadlock).
func retryable(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && (pe.Code == "40001" || pe.Code == "40P01")
}

// retries runs a PostgreSQL transaction again at once, then after
// growing, jittered waits, for at most 10 s.
func retries(ctx context.Context) backoff.BackOff {
	b := backoff.NewExponentialBackOff()
	b.InitialInterval, b.MaxInterval, b.MaxElapsedTime = time.Millisecond, 100*time.Millisecond, 10*time.Second
	return backoff.WithContext(b, ctx)
}

// wtx is a write transaction and rdb the readers' pool, both spelling
// their statements for the engine.
type wtx struct {
	*sql.Tx
	d *dialect
}

func (t *wtx) ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error) {
	return t.Tx.ExecContext(ctx, t.d.sql(query), args...)
}

func (t *wtx) QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error) {
	return t.Tx.QueryContext(ctx, t.d.sql(query), args...)
}

func (t *wtx) QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row {
	return t.Tx.QueryRowContext(ctx, t.d.sql(query), args...)
}

type rdb struct {
	*sql.DB
	d *dialect
}

func (r *rdb) QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error) {
	return r.DB.QueryContext(ctx, r.d.sql(query), args...)
}

func (r *rdb) QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row {
	return r.DB.QueryRowContext(ctx, r.d.sql(query), args...)
}
