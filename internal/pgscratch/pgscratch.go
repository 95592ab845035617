// Package pgscratch makes throwaway PostgreSQL schemas, for runs that
// need a fresh queue (harvest bench, and the tests through
// internal/pgtest), and reads the server's WAL position for the bench's
// WAL figures. It links no testing code: harvest bench uses it.
package pgscratch

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
)

// New makes an empty schema, named prefix and a random suffix, in the
// PostgreSQL database at dsn, and returns a URL whose search_path is that
// schema and a function that drops it.
func New(ctx context.Context, dsn, prefix string) (string, func() error, error) {
	cfg, err := pgx.ParseConfig(dsn) // its errors hide the password
	if err != nil {
		return "", nil, fmt.Errorf("not a PostgreSQL URL: %w", err)
	}
	db := stdlib.OpenDB(*cfg)
	var b [6]byte
	rand.Read(b[:])
	schema := prefix + hex.EncodeToString(b[:])
	if _, err := db.ExecContext(ctx, `CREATE SCHEMA `+schema); err != nil {
		db.Close()
		return "", nil, fmt.Errorf("create a scratch schema: %w", err)
	}
	drop := func() error {
		defer db.Close()
		_, err := db.ExecContext(context.Background(), `DROP SCHEMA `+schema+` CASCADE`)
		return err
	}
	sep := "?"
	if strings.Contains(dsn, "?") {
		sep = "&"
	}
	return dsn + sep + "search_path=" + schema, drop, nil
}

// WALPosition is the server's WAL insert position in bytes: deltas
// measure what a store wrote on an otherwise idle server.
func WALPosition(ctx context.Context, db *sql.DB) (int64, error) {
	var n int64
	err := db.QueryRowContext(ctx, `SELECT pg_wal_lsn_diff(pg_current_wal_insert_lsn(), '0/0')::bigint`).Scan(&n)
	return n, err
}
