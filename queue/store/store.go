// Package store is the queue's storage (SQLite or PostgreSQL): the
// schema, its migrations and every SQL statement of the queue. Each method
// is a short write transaction (or a series, for work in chunks) or a
// read. A pool master's writes are fenced by its lease, checked inside the
// same transaction (fenced). The rules applied are queue/rules' pure
// functions; the store never calls back into the service.
package store

import (
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"runtime/trace"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/cenkalti/backoff/v4"

	"github.com/harvest-hpc/harvest/queue/rules"
	"github.com/harvest-hpc/harvest/queue/store/txstats"
)

//go:embed migrations/*.sql migrations/postgres/*.sql
var migrations embed.FS

// busyTimeout is how long a connection waits for a lock another holds.
const busyTimeout = 5 * time.Second

// Store is the queue's database. All methods are safe for concurrent use.
type Store struct {
	w *sql.DB // SQLite: the one writer connection (its single writer as a Go-level queue); PostgreSQL: the pool
	r *rdb    // readers (SQLite's WAL lets them read while the writer writes); PostgreSQL: the same pool
	d *dialect

	stats txstats.Recorder
	stmts map[string]*sql.Stmt // SQLite: the hot queries, prepared on w; read-only after Open
	path  string               // SQLite: the database file

	closeOnce sync.Once
	closeErr  error

	holder string    // this agent's name among those sharing the database (Share): the storer of its submissions
	claim  *sql.Conn // on PostgreSQL, the session holding this queue's claim (Claim)
}

// Share tells the store that other processes write its database too
// (several agents on one PostgreSQL database or SQLite file), holder
// naming this one. Call it right after Open. The store keeps no copy of
// any row, so nothing else changes: every read asks the database.
func (s *Store) Share(holder string) { s.holder = holder }

// Open opens (creating or migrating) the queue database: a PostgreSQL
// database named by a postgres:// (or postgresql://) URL, else the SQLite
// file at path.
func Open(path string) (*Store, error) {
	if IsURL(path) {
		return openPG(path)
	}
	if strings.Contains(path, "://") {
		return nil, fmt.Errorf("queue database %q: not a postgres:// URL nor a file path", path)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("create database directory: %w", err)
	}
	q := url.Values{}
	q.Set("_busy_timeout", strconv.FormatInt(busyTimeout.Milliseconds(), 10))
	q.Set("_synchronous", "NORMAL") // WAL + NORMAL survives a process kill; see docs/queue.md
	q.Set("_txlock", "immediate")
	q.Set("_foreign_keys", "off")
	q.Set("_cache_size", "-32768") // KiB: the writer's page cache (SQLite's default is 2 MiB)
	w, err := sql.Open("sqlite3", "file:"+path+"?"+q.Encode())
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	w.SetMaxOpenConns(1)
	w.SetMaxIdleConns(1)
	w.SetConnMaxLifetime(0)
	if err := w.Ping(); err != nil {
		w.Close()
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	// Every job and command is in here: the owner's only. SQLite made the
	// file (its WAL and shm files take its mode); see docs/operations.md.
	if err := private(path); err != nil {
		w.Close()
		return nil, fmt.Errorf("database %s: %w", path, err)
	}
	// SQLite checkpoints by itself and truncates the WAL to the limit.
	for _, p := range []string{"PRAGMA journal_mode = WAL", "PRAGMA temp_store = MEMORY",
		fmt.Sprintf("PRAGMA journal_size_limit = %d", walSizeLimit)} {
		if _, err := w.Exec(p); err != nil {
			w.Close()
			return nil, fmt.Errorf("open %s: %s: %w", path, p, err)
		}
	}
	st := &Store{w: w, d: &dialect{}, path: path}
	if err := st.migrate(); err != nil {
		w.Close()
		return nil, err
	}
	rq := url.Values{}
	rq.Set("_busy_timeout", strconv.FormatInt(busyTimeout.Milliseconds(), 10))
	rq.Set("_query_only", "1")
	r, err := sql.Open("sqlite3", "file:"+path+"?"+rq.Encode())
	if err != nil {
		w.Close()
		return nil, fmt.Errorf("open %s for reading: %w", path, err)
	}
	r.SetMaxOpenConns(4)
	st.r = &rdb{r, st.d}
	if err := st.prepare(); err != nil {
		st.Close()
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	return st, nil
}

// walSizeLimit is SQLite's journal_size_limit: the WAL file's size it
// truncates to after a checkpoint.
const walSizeLimit = 64 << 20

// Close closes the database (on SQLite, after checkpointing the WAL into
// the database file). Closing again returns the first Close's error.
func (s *Store) Close() error {
	s.closeOnce.Do(func() { s.closeErr = s.close() })
	return s.closeErr
}

func (s *Store) close() error {
	for _, st := range s.stmts {
		st.Close()
	}
	var cerr error
	if !s.d.pg {
		_, cerr = s.w.Exec("PRAGMA wal_checkpoint(TRUNCATE)")
	}
	if s.claim != nil {
		s.claim.Close() // its session ends with the pool's below: the claim goes with it
	}
	errs := []error{cerr, s.w.Close()}
	if s.r != nil && s.r.DB != s.w {
		errs = append(errs, s.r.Close())
	}
	return errors.Join(errs...)
}

// migrationLock is the PostgreSQL advisory lock that orders the
// migrations of agents opening the same database at once.
const migrationLock = 0x68617276 // "harv"

// migrate applies the engine's embedded migrations in name order, each
// once, in one transaction.
func (s *Store) migrate() error {
	pattern := "migrations/*.sql"
	if s.d.pg {
		pattern = "migrations/postgres/*.sql"
	}
	names, err := fs.Glob(migrations, pattern)
	if err != nil {
		return fmt.Errorf("list migrations: %w", err)
	}
	sort.Strings(names)
	tx, err := s.w.Begin()
	if err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	defer tx.Rollback()
	t := &wtx{tx, s.d}
	ctx := context.Background()
	if s.d.pg {
		if _, err := t.ExecContext(ctx, `SELECT pg_advisory_xact_lock(?)`, migrationLock); err != nil {
			return fmt.Errorf("migrate: %w", err)
		}
	}
	if _, err := t.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS schema_migrations (name TEXT PRIMARY KEY, applied_at BIGINT NOT NULL)`); err != nil {
		return fmt.Errorf("create schema_migrations: %w", err)
	}
	applied := map[string]bool{}
	rows, err := t.QueryContext(ctx, `SELECT name FROM schema_migrations`)
	if err == nil {
		for rows.Next() && err == nil {
			var n string
			err = rows.Scan(&n)
			applied[n] = true
		}
		err = errors.Join(err, rows.Close(), rows.Err())
	}
	if err != nil {
		return fmt.Errorf("read schema_migrations: %w", err)
	}
	// A newer harvest's schema is refused: this binary would write it wrong.
	var unknown []string
	for n := range applied {
		if !slices.Contains(names, n) {
			unknown = append(unknown, n)
		}
	}
	if len(unknown) > 0 {
		sort.Strings(unknown)
		return fmt.Errorf("the queue database was written by a newer harvest (schema %s; this binary knows up to %s): run the newer harvest, or restore a backup this version wrote", strings.Join(unknown, ", "), names[len(names)-1])
	}
	for _, name := range names {
		if applied[name] {
			continue
		}
		body, err := migrations.ReadFile(name)
		if err != nil {
			return fmt.Errorf("read migration %s: %w", name, err)
		}
		if _, err := tx.Exec(string(body)); err != nil {
			return fmt.Errorf("apply migration %s: %w", name, err)
		}
		if _, err := t.ExecContext(ctx, `INSERT INTO schema_migrations (name, applied_at) VALUES (?, ?)`, name, time.Now().Unix()); err != nil {
			return fmt.Errorf("record migration %s: %w", name, err)
		}
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("commit migrations: %w", err)
	}
	return nil
}

// WriteStats returns the write-lock figures since Open (or the last reset).
func (s *Store) WriteStats(reset bool) txstats.Stats { return s.stats.Read(reset) }

// writer names the store method that called write (through fenced or
// not), for the figures' LongestIn and SlowBy.
func writer() string {
	var pcs [16]uintptr
	frames := runtime.CallersFrames(pcs[:runtime.Callers(3, pcs[:])])
	for {
		f, more := frames.Next()
		name := f.Function[strings.LastIndexByte(f.Function, '/')+1:]
		if i := strings.Index(name, ".func"); i > 0 {
			name = name[:i]
		}
		switch {
		case strings.HasPrefix(f.Function, "github.com/cenkalti/backoff/"):
		case name == "store.(*Store).write", name == "store.(*Store).do", name == "store.(*Store).fenced", name == "store.(*Store).transact", name == "store.(*Store).once":
		default:
			return name
		}
		if !more {
			return "?"
		}
	}
}

// write runs fn in one write transaction (SQLite: IMMEDIATE on the
// writer; PostgreSQL: SERIALIZABLE, run again after a serialisation
// failure, so fn must set everything it returns from the start) and
// records how long it held the write lock.
func (s *Store) write(ctx context.Context, fn func(tx *wtx) error) error {
	_, err := s.transact(ctx, fn)
	return err
}

// transact is write that also returns the lock time (for chunkSizer).
func (s *Store) transact(ctx context.Context, fn func(tx *wtx) error) (time.Duration, error) {
	if f, ok := ctx.Value(sweepFenceKey{}).(sweepFence); ok {
		inner := fn
		fn = func(tx *wtx) error {
			if err := s.checkSweep(ctx, tx, f); err != nil {
				return err
			}
			return inner(tx)
		}
	}
	if !s.d.pg {
		return s.once(ctx, nil, fn)
	}
	var d time.Duration
	err := backoff.Retry(func() error {
		var err error
		if d, err = s.once(ctx, &sql.TxOptions{Isolation: sql.LevelSerializable}, fn); err != nil && !retryable(err) {
			return backoff.Permanent(err)
		}
		return err
	}, retries(ctx))
	return d, err
}

// once runs fn in one transaction.
func (s *Store) once(ctx context.Context, opts *sql.TxOptions, fn func(tx *wtx) error) (time.Duration, error) {
	tx, err := s.w.BeginTx(inline(ctx), opts)
	if err != nil {
		return 0, fmt.Errorf("begin: %w", err)
	}
	// BEGIN IMMEDIATE has taken the lock. A "write" trace region.
	defer trace.StartRegion(ctx, "write").End()
	start := time.Now()
	if err := fn(&wtx{tx, s.d}); err != nil {
		tx.Rollback()
		return 0, err
	}
	if err := tx.Commit(); err != nil {
		return 0, fmt.Errorf("commit: %w", err)
	}
	d := time.Since(start)
	s.stats.Add(d, writer)
	return d, nil
}

// fenced is write for a pool's master: inside the transaction, before fn,
// it checks that epoch is the pool's current lease, alive at now. A newer
// grant commits before (the check refuses) or after this write: no window.
// On PostgreSQL the row is read FOR SHARE.
func (s *Store) fenced(ctx context.Context, pool string, epoch int64, now time.Time, fn func(tx *wtx, l rules.Lease) error) error {
	return s.write(ctx, func(tx *wtx) error {
		l, err := s.readLeaseTx(ctx, tx, pool, "FOR SHARE")
		if err != nil {
			return err
		}
		if err := rules.CheckEpoch(l, epoch, now); err != nil {
			return err
		}
		return fn(tx, l)
	})
}

// hotQueries are the master's hot statements (registered by hot), which
// SQLite's writer prepares at Open: parsing each at every call cost more
// than running it. (pgx caches its statements by itself.)
var hotQueries []string

func hot(query string) string {
	hotQueries = append(hotQueries, query)
	return query
}

// prepare prepares every hot query on SQLite's writer connection.
func (s *Store) prepare() error {
	s.stmts = make(map[string]*sql.Stmt, len(hotQueries))
	for _, q := range hotQueries {
		st, err := s.w.Prepare(q)
		if err != nil {
			return fmt.Errorf("prepare %.40q: %w", q, err)
		}
		s.stmts[q] = st
	}
	return nil
}

// inline strips ctx of its cancellation for a statement on the writer:
// go-sqlite3 runs a cancellable statement on a goroutine of its own, a
// scheduler trip per statement with the write lock held.
func inline(ctx context.Context) context.Context { return context.WithoutCancel(ctx) }

// prepared returns the prepared statement of a hot query inside tx.
func (s *Store) prepared(ctx context.Context, tx *wtx, query string) (*sql.Stmt, error) {
	st := s.stmts[query]
	if st == nil {
		return nil, fmt.Errorf("statement %.40q is not registered with hot", query)
	}
	return tx.StmtContext(ctx, st), nil
}

// exec runs a hot statement in tx.
func (s *Store) exec(ctx context.Context, tx *wtx, query string, args ...any) (sql.Result, error) {
	if s.d.pg {
		return tx.ExecContext(inline(ctx), query, args...)
	}
	st, err := s.prepared(ctx, tx, query)
	if err != nil {
		return nil, err
	}
	return st.ExecContext(inline(ctx), args...)
}

// query runs a hot query in tx.
func (s *Store) query(ctx context.Context, tx *wtx, query string, args ...any) (*sql.Rows, error) {
	if s.d.pg {
		return tx.QueryContext(inline(ctx), query, args...)
	}
	st, err := s.prepared(ctx, tx, query)
	if err != nil {
		return nil, err
	}
	return st.QueryContext(inline(ctx), args...)
}

// each runs a read on the readers and calls scan on every row it answers;
// what names the read in its error.
func (s *Store) each(ctx context.Context, what string, scan func(*sql.Rows) error, query string, args ...any) error {
	rows, err := s.r.QueryContext(ctx, query, args...)
	if err == nil {
		for rows.Next() && err == nil {
			err = scan(rows)
		}
		err = errors.Join(err, rows.Close(), rows.Err())
	}
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	return nil
}

// do runs one statement in a write transaction of its own and returns how
// many rows it changed; what names it in its error.
func (s *Store) do(ctx context.Context, what, query string, args ...any) (int64, error) {
	var n int64
	err := s.write(ctx, func(tx *wtx) error {
		res, err := tx.ExecContext(inline(ctx), query, args...)
		if err == nil {
			n, err = res.RowsAffected()
		}
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("%s: %w", what, err)
	}
	return n, nil
}

// ids runs a read whose rows are single ids; what names it in its error.
func (s *Store) ids(ctx context.Context, what, query string, args ...any) ([]int64, error) {
	var out []int64
	err := s.each(ctx, what, func(r *sql.Rows) error {
		var id int64
		err := r.Scan(&id)
		out = append(out, id)
		return err
	}, query, args...)
	return out, err
}

func ms(t time.Time) int64 { return t.UnixMilli() }

func sec(msv int64) int64 {
	if msv == 0 {
		return 0
	}
	return msv / 1000
}
