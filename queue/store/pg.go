package store

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
)

// IsURL says whether db names a PostgreSQL database (a postgres:// or
// postgresql:// URL) rather than a SQLite file.
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

// pgConns is how many connections one process opens to PostgreSQL: a
// pull, a batch of results and the reads of the API at once.
const pgConns = 8

// openPG opens (creating or migrating the schema of) the PostgreSQL
// database at the URL dsn, through pgx's database/sql driver. Every agent
// that opens it may write: write transactions are SERIALIZABLE and run
// again when PostgreSQL refuses one (Store.transact).
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
	db.SetMaxOpenConns(pgConns)
	db.SetMaxIdleConns(pgConns)
	ctx, cancel := context.WithTimeout(context.Background(), cfg.ConnectTimeout)
	defer cancel()
	if err := db.PingContext(ctx); err != nil {
		db.Close()
		return nil, fmt.Errorf("queue database %s: cannot connect: %w", name, err)
	}
	st := &Store{w: db, d: &dialect{pg: true}, path: name}
	st.r = &rdb{db, st.d}
	if err := st.migrate(); err != nil {
		db.Close()
		return nil, fmt.Errorf("queue database %s: %w", name, err)
	}
	return st, nil
}

// Scratch makes a new, empty schema in the PostgreSQL database at dsn
// (named prefix and a random suffix) and returns a URL whose search_path
// is that schema, for a run that needs a fresh queue (harvest bench), and
// a function that drops it.
func Scratch(ctx context.Context, dsn, prefix string) (string, func() error, error) {
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		return "", nil, fmt.Errorf("%s: not a PostgreSQL URL: %w", Redact(dsn), err)
	}
	db := stdlib.OpenDB(*cfg)
	var b [4]byte
	rand.Read(b[:])
	schema := prefix + hex.EncodeToString(b[:])
	if _, err := db.ExecContext(ctx, `CREATE SCHEMA `+schema); err != nil {
		db.Close()
		return "", nil, fmt.Errorf("%s: %w", Redact(dsn), err)
	}
	sep := "?"
	if strings.Contains(dsn, "?") {
		sep = "&"
	}
	drop := func() error {
		defer db.Close()
		_, err := db.ExecContext(context.Background(), `DROP SCHEMA `+schema+` CASCADE`)
		return err
	}
	return dsn + sep + "search_path=" + schema, drop, nil
}

// WALPosition is PostgreSQL's WAL insert position in bytes (the whole
// server's: deltas measure a store's writes on an otherwise idle server).
func (s *Store) WALPosition(ctx context.Context) (int64, error) {
	var n int64
	err := s.r.QueryRowContext(ctx, `SELECT pg_wal_lsn_diff(pg_current_wal_insert_lsn(), '0/0')::bigint`).Scan(&n)
	return n, err
}
