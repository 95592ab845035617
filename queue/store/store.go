// Package store holds every SQL statement of the queue (SQLite or
// PostgreSQL). Each method is a read or a short write transaction (or a
// series, in chunks) applying queue/rules; a master's writes check its lease
// in their transaction (fenced). The store never calls the service back.
package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"runtime/trace"
	"strings"
	"time"
	"unicode"

	"github.com/cenkalti/backoff/v4"

	"github.com/harvest-hpc/harvest/queue/rules"
	"github.com/harvest-hpc/harvest/queue/store/schema"
	"github.com/harvest-hpc/harvest/queue/txstats"
)

// Store is the queue's database. All methods are safe for concurrent use.
type Store struct {
	w  *sql.DB // SQLite: the one writer connection; PostgreSQL: the pool
	r  *sql.DB // SQLite: the readers (WAL lets them read beside the writer); PostgreSQL: the pool
	pg bool    // PostgreSQL, not SQLite

	stats txstats.Recorder
	path  string // SQLite: the database file

	holder string    // this agent's name among those sharing the database (Share)
	claim  *sql.Conn // PostgreSQL: the session holding this queue's claim (Claim)
}

// Share, right after Open, names this agent (holder) among others writing the database.
func (s *Store) Share(holder string) { s.holder = holder }

// Open opens, creating or migrating, the PostgreSQL database of a
// postgres:// (or postgresql://) URL, else the SQLite file at path.
func Open(path string) (_ *Store, err error) {
	if IsURL(path) {
		return openPG(path)
	}
	if strings.Contains(path, "://") {
		return nil, fmt.Errorf("queue database %q: not a postgres:// URL nor a file path", path)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("create database directory: %w", err)
	}
	// WAL with synchronous NORMAL survives a process kill (docs/queue.md);
	// SQLite checkpoints by itself, truncating the WAL to 64 MiB. Parsing a
	// hot statement cost more than running it: the driver caches them, all
	// the store has (rowsSQL's 5 sizes of some 15, and about 60 more).
	opts := "?_busy_timeout=5000&_stmt_cache_size=256"
	w, _ := sql.Open("sqlite3", "file:"+path+opts+"&_synchronous=NORMAL&_txlock=immediate&_cache_size=-32768&_journal_mode=WAL")
	w.SetMaxOpenConns(1)
	r, _ := sql.Open("sqlite3", "file:"+path+opts+"&_query_only=1")
	r.SetMaxOpenConns(4)
	st := &Store{w: w, r: r, path: path}
	_, err = w.Exec("PRAGMA temp_store = MEMORY; PRAGMA journal_size_limit = 67108864")
	if err == nil {
		err = private(path) // every job and command is in here
	}
	if err == nil {
		err = schema.Migrate(context.Background(), w, false)
	}
	if err != nil {
		st.Close()
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	return st, nil
}

// Close closes the database (SQLite's writer last: it checkpoints the
// WAL). Closing again does nothing.
func (s *Store) Close() error {
	if s.claim != nil {
		s.claim.Close() // the claim ends with its session
	}
	return errors.Join(s.r.Close(), s.w.Close()) // on PostgreSQL one pool: the second does nothing
}

// WALBytes is the WAL file's size now (0 on PostgreSQL). It stats the
// file, never opens it: closing a descriptor of the database drops
// SQLite's POSIX locks, and another process could delete the live WAL.
func (s *Store) WALBytes() int64 {
	fi, err := os.Stat(s.path + "-wal")
	if err != nil || s.pg {
		return 0
	}
	return fi.Size()
}

// private makes the database's files readable by the owner only, without
// opening them.
func private(path string) error {
	for _, p := range []string{path, path + "-wal", path + "-shm", path + "-journal"} {
		if fi, err := os.Stat(p); err == nil && fi.Mode().Perm()&0o077 != 0 {
			if err := os.Chmod(p, fi.Mode().Perm()&0o600); err != nil {
				return err
			}
		}
	}
	return nil
}

// WriteStats returns the write-lock figures since Open (or the last reset).
func (s *Store) WriteStats(reset bool) txstats.Stats { return s.stats.Read(reset) }

// writer names the exported method that ran a write (txstats' SlowBy).
func writer() string {
	var pcs [16]uintptr
	frames := runtime.CallersFrames(pcs[:runtime.Callers(3, pcs[:])])
	for f, more := frames.Next(); more; f, more = frames.Next() {
		name := f.Function[strings.LastIndexByte(f.Function, '/')+1:]
		if m, ok := strings.CutPrefix(name, "store.(*Store)."); ok && unicode.IsUpper(rune(m[0])) {
			return strings.Split(name, ".func")[0]
		}
	}
	return "store"
}

// write runs fn in one write transaction (SQLite: IMMEDIATE; PostgreSQL:
// SERIALIZABLE, run again after a serialisation failure, so fn sets all it
// returns afresh) and records how long it held the lock. Under
// SweepFenced, fn runs after the sweep lease's check.
func (s *Store) write(ctx context.Context, fn func(tx *sql.Tx) error) error {
	_, err := s.transact(ctx, fn)
	return err
}

// transact is write that also returns the lock time (for chunkSizer).
func (s *Store) transact(ctx context.Context, fn func(tx *sql.Tx) error) (d time.Duration, err error) {
	sweepEpoch, fenced := ctx.Value(sweepEpochKey{}).(int64)
	opts := &sql.TxOptions{Isolation: sql.LevelSerializable} // SQLite's are anyway
	wait := backoff.NewExponentialBackOff()                  // growing, jittered, for at most 10 s
	wait.InitialInterval, wait.MaxInterval, wait.MaxElapsedTime = time.Millisecond, 100*time.Millisecond, 10*time.Second
	return d, backoff.Retry(func() error {
		tx, err := s.w.BeginTx(inline(ctx), opts)
		if err != nil {
			return backoff.Permanent(fmt.Errorf("begin: %w", err))
		}
		defer trace.StartRegion(ctx, "write").End() // BEGIN IMMEDIATE has taken the lock
		start := time.Now()
		if fenced {
			err = s.checkSweep(ctx, tx, sweepEpoch)
		}
		if err == nil {
			err = fn(tx)
		}
		if err != nil {
			tx.Rollback()
		} else if err = wrap(tx.Commit(), "commit"); err == nil {
			d = time.Since(start)
			s.stats.Add(d, writer)
			return nil
		}
		if !retryable(err) { // only PostgreSQL's errors are
			return backoff.Permanent(err)
		}
		return err
	}, backoff.WithContext(wait, ctx))
}

// fenced is write for a pool's master: before fn it checks, in the
// transaction, that epoch is the pool's lease alive at now. A newer grant
// commits before (refused) or after this write: no window.
func (s *Store) fenced(ctx context.Context, pool string, epoch int64, now time.Time, fn func(tx *sql.Tx, l rules.Lease) error) error {
	return s.write(ctx, func(tx *sql.Tx) error {
		l, err := s.readLeaseTx(ctx, tx, pool, "FOR SHARE")
		if err == nil {
			err = rules.CheckEpoch(l, epoch, now)
		}
		if err == nil {
			err = fn(tx, l)
		}
		return err
	})
}

// inline strips ctx's cancellation for the writer: go-sqlite3 runs a
// cancellable statement on a goroutine of its own, with the lock held.
func inline(ctx context.Context) context.Context { return context.WithoutCancel(ctx) }

// each runs a read and calls scan on each row; what names it in errors.
func (s *Store) each(ctx context.Context, what string, scan func(*sql.Rows) error, query string, args ...any) error {
	rows, err := s.r.QueryContext(ctx, query, args...)
	if err == nil {
		for rows.Next() && err == nil {
			err = scan(rows)
		}
		err = errors.Join(err, rows.Close(), rows.Err())
	}
	return wrap(err, "%s", what)
}

// do runs one statement in a write transaction and counts the rows it changed.
func (s *Store) do(ctx context.Context, what, query string, args ...any) (n int64, err error) {
	err = s.write(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(inline(ctx), query, args...)
		if err == nil {
			n, err = res.RowsAffected()
		}
		return err
	})
	return n, wrap(err, "%s", what)
}

// execs runs statements in tx, in order, each its SQL and then its arguments.
func execs(ctx context.Context, tx *sql.Tx, stmts ...[]any) error {
	for _, st := range stmts {
		if _, err := tx.ExecContext(inline(ctx), st[0].(string), st[1:]...); err != nil {
			return err
		}
	}
	return nil
}

// scanner is a row to scan: *sql.Row or *sql.Rows.
type scanner interface{ Scan(...any) error }

// list runs a read and makes a value of each row with scan.
func list[T any](ctx context.Context, s *Store, what string, scan func(scanner) (T, error), query string, args ...any) ([]T, error) {
	out := []T{}
	err := s.each(ctx, what, func(r *sql.Rows) error {
		v, err := scan(r)
		out = append(out, v)
		return err
	}, query, args...)
	return out, err
}

// byKey runs a read and maps the key of each row scan makes to its value.
func byKey[K comparable, V any](ctx context.Context, s *Store, what string, scan func(scanner) (K, V, error), query string, args ...any) (map[K]V, error) {
	out := map[K]V{}
	return out, s.each(ctx, what, func(r *sql.Rows) error {
		k, v, err := scan(r)
		out[k] = v
		return err
	}, query, args...)
}

// ids runs a read whose rows are single ids.
func (s *Store) ids(ctx context.Context, what, query string, args ...any) ([]int64, error) {
	return list(ctx, s, what, func(r scanner) (id int64, err error) {
		err = r.Scan(&id)
		return id, err
	}, query, args...)
}

// found is whether a one-row read found its row; none is no error.
func found(err error) (bool, error) {
	if errors.Is(err, sql.ErrNoRows) {
		return false, nil
	}
	return err == nil, err
}

// wrap is err after what (formatted with args), or nil without err.
func wrap(err error, what string, args ...any) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf(what+": %w", append(args, err)...)
}

func ms(t time.Time) int64 { return t.UnixMilli() }
