package store

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/stdlib"
	sqlite3 "github.com/mattn/go-sqlite3"

	"github.com/harvest-hpc/harvest/queue/store/schema"
)

// Statements number their parameters $1, $2, ... in order of first
// appearance (SQLite binds a $N by where it first appears, not by N:
// TestParametersInOrderOfFirstAppearance); Store.pg and what follows hold
// where the engines differ.

// IsURL says whether db names a PostgreSQL database, not a SQLite file.
func IsURL(db string) bool {
	return strings.HasPrefix(db, "postgres://") || strings.HasPrefix(db, "postgresql://")
}

// Redact is db without its password, for messages and logs.
func Redact(db string) string {
	if u, err := url.Parse(db); err == nil && IsURL(db) {
		return u.Redacted()
	}
	return db
}

// openPG opens (creating or migrating) the PostgreSQL database at dsn.
func openPG(dsn string) (*Store, error) {
	name := Redact(dsn)
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		return nil, fmt.Errorf("queue database %s: not a PostgreSQL URL: %w", name, err)
	}
	if cfg.ConnectTimeout == 0 {
		cfg.ConnectTimeout = 10 * time.Second
	}
	db := stdlib.OpenDB(*cfg)
	db.SetMaxOpenConns(8) // a pull, a batch of results and the API's reads at once
	db.SetMaxIdleConns(8)
	st := &Store{w: db, r: db, pg: true, path: name}
	ctx, cancel := context.WithTimeout(context.Background(), cfg.ConnectTimeout)
	defer cancel()
	if err = db.PingContext(ctx); err != nil {
		err = fmt.Errorf("cannot connect: %w", err)
	} else {
		err = schema.Migrate(context.Background(), db, true)
	}
	if err != nil {
		db.Close()
		return nil, fmt.Errorf("queue database %s: %w", name, err)
	}
	return st, nil
}

// claimKey is the first key of Claim's advisory lock, the schema's hash
// the second.
const claimKey = 0x68617276 // "harv"

// ErrClaimed: another queue runs on the same PostgreSQL schema in a mode
// that cannot run beside this one's.
var ErrClaimed = errors.New("another harvest queue uses this database")

// Claim takes the database for this queue until Close, alone or shared
// (--peer): two queues alone on one database would both sweep and take
// each other's submissions for abandoned. On PostgreSQL it is a session
// advisory lock on the schema, tried for up to wait (a killed process's
// session may outlive it a moment); on SQLite internal/statelock's.
func (s *Store) Claim(ctx context.Context, shared bool, wait time.Duration) error {
	if !s.pg {
		return nil
	}
	conn, err := s.w.Conn(ctx)
	if err != nil {
		return fmt.Errorf("queue database %s: %w", s.path, err)
	}
	fn := "pg_try_advisory_lock"
	if shared {
		fn += "_shared"
	}
	const every = 200 * time.Millisecond
	err = backoff.Retry(func() error {
		var ok bool
		if err := conn.QueryRowContext(ctx, fmt.Sprintf(`SELECT %s(%d, hashtext(current_schema()))`, fn, claimKey)).Scan(&ok); err != nil || ok {
			return backoff.Permanent(err)
		}
		return ErrClaimed
	}, backoff.WithContext(backoff.WithMaxRetries(backoff.NewConstantBackOff(every), uint64(wait/every)), ctx))
	switch {
	case err == nil:
		s.claim = conn
		return nil
	case errors.Is(err, ErrClaimed) && shared:
		err = fmt.Errorf("%w without --peer (alone): stop it, or start it with --peer like this one", err)
	case errors.Is(err, ErrClaimed):
		err = fmt.Errorf("%w: run every agent on it with --peer (docs/multisite.md), or give each its own database", err)
	}
	conn.Close()
	return fmt.Errorf("queue database %s: claim: %w", s.path, err)
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
