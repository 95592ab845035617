// Package schema holds the queue database's migrations, SQL files for
// SQLite (migrations/) and PostgreSQL (migrations/postgres/), and Migrate.
package schema

import (
	"context"
	"database/sql"
	"embed"
	"fmt"
	"io/fs"
	"time"
)

// FS holds the migrations.
//
//go:embed migrations/*.sql migrations/postgres/*.sql
var FS embed.FS

// Migrate applies the engine's migrations to db in one transaction, in
// name order, each once (schema_migrations). A database with a migration
// numbered after this binary's last, a newer harvest's, is refused: this
// one would write it wrong. On PostgreSQL an advisory lock makes agents
// migrate in turn.
func Migrate(ctx context.Context, db *sql.DB, pg bool) error {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	defer tx.Rollback()
	dir := "migrations"
	if pg {
		dir = "migrations/postgres"
		if _, err := tx.ExecContext(ctx, `SELECT pg_advisory_xact_lock($1)`, 0x68617276); err != nil { // "harv"
			return fmt.Errorf("migrate: %w", err)
		}
	}
	names, _ := fs.Glob(FS, dir+"/*.sql") // in name order
	if _, err := tx.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS schema_migrations (name TEXT PRIMARY KEY, applied_at BIGINT NOT NULL)`); err != nil {
		return fmt.Errorf("create schema_migrations: %w", err)
	}
	var newest string // migrations are numbered: a newer harvest's sorts after this one's
	if err := tx.QueryRowContext(ctx, `SELECT coalesce(max(name), '') FROM schema_migrations`).Scan(&newest); err != nil {
		return fmt.Errorf("read schema_migrations: %w", err)
	}
	if newest > names[len(names)-1] {
		return fmt.Errorf("the queue database was written by a newer harvest (schema up to %s; this binary knows up to %s): run the newer harvest, or restore a backup this version wrote", newest, names[len(names)-1])
	}
	for _, name := range names {
		res, err := tx.ExecContext(ctx, `INSERT INTO schema_migrations (name, applied_at) VALUES ($1, $2) ON CONFLICT (name) DO NOTHING`, name, time.Now().Unix())
		if err != nil {
			return fmt.Errorf("record migration %s: %w", name, err)
		}
		if n, _ := res.RowsAffected(); n == 0 {
			continue // applied before
		}
		body, _ := FS.ReadFile(name)
		if _, err := tx.ExecContext(ctx, string(body)); err != nil {
			return fmt.Errorf("apply migration %s: %w", name, err)
		}
	}
	return tx.Commit()
}
