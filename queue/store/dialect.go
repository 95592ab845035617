package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/jackc/pgx/v5/pgconn"
	sqlite3 "github.com/mattn/go-sqlite3"
)

// Statements number their parameters $1, $2, ... in order of first
// appearance: SQLite binds a $N by where it first appears, not by N. (A ?
// is rebound for PostgreSQL.)
type dialect struct{ pg bool }

// sql spells query for the engine; a $N out of order panics (any test of
// the statement finds it).
func (d *dialect) sql(query string) string {
	if d.pg {
		return Rebind(query)
	}
	n := 0
	for _, m := range dollarN.FindAllStringSubmatch(query, -1) {
		if k, _ := strconv.Atoi(m[1]); k > n+1 {
			panic(fmt.Sprintf("store: $%d before $%d in %.80q", k, n+1, query))
		} else {
			n = max(n, k)
		}
	}
	return query
}

var dollarN = regexp.MustCompile(`\$([0-9]+)`)

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

// retryable is whether a PostgreSQL transaction failed only for another
// (serialization failure, deadlock).
func retryable(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && (pe.Code == "40001" || pe.Code == "40P01")
}

// retries waits growing, jittered times, for at most 10 s.
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
