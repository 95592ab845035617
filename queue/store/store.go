// Package store is the queue's SQLite storage: the schema and its
// embedded migrations, and every SQL statement of the queue. Each method
// is one short write transaction (or a series of them, for work in
// chunks) or a read on the reader pool. Every site's pilots form a pool
// with a lease of its own. Writes of a pool's master (assign, results,
// heartbeat, recommendation) are fenced: the pool's lease row is read and
// the master's epoch checked inside the same write transaction, so no new
// master can be granted between the check and the write. The rules
// the store applies inside its transactions are pure functions of
// queue/rules; the store never calls back into the service and takes no
// lock of its own but the stats mutex (a leaf).
package store

import (
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"math"
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

	"github.com/harvest-hpc/harvest/queue/rules"

	_ "github.com/harvest-hpc/harvest/internal/sqliteconf" // SQLite without its global allocation mutex
)

//go:embed migrations/*.sql
var migrations embed.FS

// busyTimeout is how long a connection waits for a lock another holds.
const busyTimeout = 5 * time.Second

// Store is the queue's database. All methods are safe for concurrent use.
type Store struct {
	w  *sql.DB // the one writer connection: SQLite's single writer as a Go-level queue
	r  *sql.DB // readers (WAL lets them read while the writer writes)
	ck *sql.DB // checkpoints (wal.go)
	// truncateAt is the WAL file's size past which Checkpoint empties it
	// (walSizeLimit; tests lower it).
	truncateAt int64

	stats struct {
		mu sync.Mutex
		s  WriteStats
	}
	stmts map[string]*sql.Stmt // the hot queries, prepared on w; read-only after Open
	path  string

	closeOnce sync.Once
	closeErr  error

	// leaseWrite orders the lease writes (DecideLease, Heartbeat) with
	// their updates of the cache, so two cannot cross.
	leaseWrite sync.Mutex
	leaseMu    sync.Mutex
	leases     map[string]rules.Lease // as last committed (lease.go)

	cancelMu  sync.Mutex
	cancelled map[int64]int64 // cancelled jobs' times, Unix ms (CancelledSince); nil until read
}

// Open opens (creating or migrating) the database at path.
func Open(path string) (*Store, error) {
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
	// Every job and command is in here: the owner's only (issue 13 item 8).
	// SQLite created the file (the queue never opens it itself: a close of
	// another descriptor of the file would drop SQLite's POSIX locks, see
	// docs/operations.md); its WAL and shared-memory files take the
	// database file's mode.
	if err := private(path); err != nil {
		w.Close()
		return nil, fmt.Errorf("database %s: %w", path, err)
	}
	// The writer does not checkpoint: Checkpoint does, from a connection
	// of its own (wal.go).
	for _, p := range []string{"PRAGMA journal_mode = WAL", "PRAGMA temp_store = MEMORY",
		"PRAGMA wal_autocheckpoint = 0",
		fmt.Sprintf("PRAGMA journal_size_limit = %d", walSizeLimit)} {
		if _, err := w.Exec(p); err != nil {
			w.Close()
			return nil, fmt.Errorf("open %s: %s: %w", path, p, err)
		}
	}
	if err := migrate(w); err != nil {
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
	ck, err := sql.Open("sqlite3", "file:"+path+"?_busy_timeout="+strconv.FormatInt(busyTimeout.Milliseconds(), 10))
	if err != nil {
		w.Close()
		r.Close()
		return nil, fmt.Errorf("open %s for checkpoints: %w", path, err)
	}
	ck.SetMaxOpenConns(1)
	st := &Store{w: w, r: r, ck: ck, truncateAt: walSizeLimit, path: path}
	if err := st.prepare(); err != nil {
		st.Close()
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	if st.leases, err = st.Leases(context.Background()); err != nil {
		st.Close()
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	return st, nil
}

// Close checkpoints the WAL into the database file and closes it. Closing again returns the first Close's error.
func (s *Store) Close() error {
	s.closeOnce.Do(func() { s.closeErr = s.close() })
	return s.closeErr
}

func (s *Store) close() error {
	for _, st := range s.stmts {
		st.Close()
	}
	_, cerr := s.ck.Exec("PRAGMA wal_checkpoint(TRUNCATE)")
	return errors.Join(cerr, s.ck.Close(), s.r.Close(), s.w.Close())
}

// migrate applies the embedded migrations in name order, each once.
func migrate(db *sql.DB) error {
	if _, err := db.Exec(`CREATE TABLE IF NOT EXISTS schema_migrations (name TEXT PRIMARY KEY, applied_at INTEGER NOT NULL)`); err != nil {
		return fmt.Errorf("create schema_migrations: %w", err)
	}
	names, err := fs.Glob(migrations, "migrations/*.sql")
	if err != nil {
		return fmt.Errorf("list migrations: %w", err)
	}
	sort.Strings(names)
	// A database that a newer harvest migrated further is refused: this
	// binary would not know its tables' meaning, and would write them
	// wrong.
	known := map[string]bool{}
	for _, n := range names {
		known[n] = true
	}
	applied, err := db.Query(`SELECT name FROM schema_migrations ORDER BY name`)
	if err != nil {
		return fmt.Errorf("read schema_migrations: %w", err)
	}
	var unknown []string
	for applied.Next() {
		var n string
		if err := applied.Scan(&n); err != nil {
			applied.Close()
			return fmt.Errorf("read schema_migrations: %w", err)
		}
		if !known[n] {
			unknown = append(unknown, n)
		}
	}
	applied.Close()
	if err := applied.Err(); err != nil {
		return fmt.Errorf("read schema_migrations: %w", err)
	}
	if len(unknown) > 0 {
		return fmt.Errorf("the queue database was written by a newer harvest (schema %s; this binary knows up to %s): run the newer harvest, or restore a backup this version wrote", strings.Join(unknown, ", "), names[len(names)-1])
	}
	for _, name := range names {
		var n int
		if err := db.QueryRow(`SELECT count(*) FROM schema_migrations WHERE name = ?`, name).Scan(&n); err != nil {
			return fmt.Errorf("check migration %s: %w", name, err)
		}
		if n > 0 {
			continue
		}
		body, err := migrations.ReadFile(name)
		if err != nil {
			return fmt.Errorf("read migration %s: %w", name, err)
		}
		tx, err := db.Begin()
		if err != nil {
			return fmt.Errorf("migration %s: %w", name, err)
		}
		if _, err := tx.Exec(string(body)); err != nil {
			tx.Rollback()
			return fmt.Errorf("apply migration %s: %w", name, err)
		}
		if _, err := tx.Exec(`INSERT INTO schema_migrations (name, applied_at) VALUES (?, ?)`, name, time.Now().Unix()); err != nil {
			tx.Rollback()
			return fmt.Errorf("record migration %s: %w", name, err)
		}
		if err := tx.Commit(); err != nil {
			return fmt.Errorf("commit migration %s: %w", name, err)
		}
	}
	return nil
}

// WriteStats measures how long the queue holds SQLite's write lock: the
// transactions' count, time and distribution (exported as a Prometheus
// histogram by queue/metrics), and the slow ones by store method.
type WriteStats struct {
	Transactions int64
	Total        time.Duration
	Longest      time.Duration
	LongestIn    string // the store method that ran the longest transaction
	Slow         int64  // transactions longer than SlowTx
	// SlowBy counts the slow transactions by store method (nil until one
	// is slow).
	SlowBy map[string]int64
	// Hist counts the transactions by lock time in buckets of HistBucket
	// (the last one: everything longer).
	Hist [histBuckets]int64
	// Recent are the last RecentSlow slow transactions, oldest first:
	// which one, when and how long, for the queue's log.
	Recent []SlowTransaction
}

// RecentSlow is how many slow transactions WriteStats.Recent keeps.
const RecentSlow = 32

// SlowTransaction is one write transaction that held the lock over
// SlowTx: when it committed, the store method that ran it, the lock time.
type SlowTransaction struct {
	At   time.Time
	In   string
	Lock time.Duration
}

// SlowTx is the write transaction the queue aims to stay under (issue 17):
// WriteStats counts the longer ones, to tell a tail from an outlier.
const SlowTx = 5 * time.Millisecond

// HistBucket is the width of a bucket of WriteStats.Hist.
const (
	HistBucket  = 250 * time.Microsecond
	histBuckets = 4 * 50 // up to 50 ms
)

// Quantile returns the lock time that a fraction q of the transactions
// did not exceed, to a bucket's width (0 without transactions).
func (w WriteStats) Quantile(q float64) time.Duration {
	var n int64
	for _, c := range w.Hist {
		n += c
	}
	if n == 0 {
		return 0
	}
	need := int64(math.Ceil(q * float64(n)))
	var seen int64
	for i, c := range w.Hist {
		if seen += c; seen >= need {
			if i == histBuckets-1 {
				return w.Longest
			}
			return time.Duration(i+1) * HistBucket
		}
	}
	return w.Longest
}

// WriteStats returns the write-lock figures since Open (or the last reset).
func (s *Store) WriteStats(reset bool) WriteStats {
	s.stats.mu.Lock()
	defer s.stats.mu.Unlock()
	st := s.stats.s
	st.SlowBy = maps.Clone(st.SlowBy)
	st.Recent = slices.Clone(st.Recent)
	if reset {
		s.stats.s = WriteStats{}
	}
	return st
}

// addStat records a transaction that held the lock for d.
func (s *Store) addStat(d time.Duration) {
	s.stats.mu.Lock()
	defer s.stats.mu.Unlock()
	st := &s.stats.s
	st.Transactions++
	st.Total += d
	st.Hist[min(int(d/HistBucket), histBuckets-1)]++
	var in string
	if d > SlowTx {
		st.Slow++
		in = writer()
		if st.SlowBy == nil {
			st.SlowBy = map[string]int64{}
		}
		st.SlowBy[in]++
		if len(st.Recent) == RecentSlow {
			st.Recent = append(st.Recent[:0], st.Recent[1:]...)
		}
		st.Recent = append(st.Recent, SlowTransaction{At: time.Now(), In: in, Lock: d})
	}
	if d > st.Longest {
		if in == "" {
			in = writer()
		}
		st.Longest = d
		st.LongestIn = in
	}
}

// writer names the store method that called write (through fenced or
// not), for WriteStats.LongestIn and SlowBy: looked up only for a slow
// transaction or a new longest.
func writer() string {
	var pcs [8]uintptr
	frames := runtime.CallersFrames(pcs[:runtime.Callers(3, pcs[:])])
	for {
		f, more := frames.Next()
		name := f.Function[strings.LastIndexByte(f.Function, '/')+1:]
		if i := strings.Index(name, ".func"); i > 0 {
			name = name[:i]
		}
		switch name {
		case "store.(*Store).write", "store.(*Store).writeTimed", "store.(*Store).fenced", "store.(*Store).transact":
		default:
			return name
		}
		if !more {
			return "?"
		}
	}
}

// write runs fn in one IMMEDIATE transaction on the writer connection and
// records how long the write lock was held (BEGIN to COMMIT). fn must be
// bounded: a batch, a chunk of rows.
func (s *Store) write(ctx context.Context, fn func(tx *sql.Tx) error) error {
	_, err := s.transact(ctx, fn)
	return err
}

// writeTimed is write that also returns how long the transaction held
// the write lock: a long write sizes its next chunk by it (chunkSizer).
func (s *Store) writeTimed(ctx context.Context, fn func(tx *sql.Tx) error) (time.Duration, error) {
	return s.transact(ctx, fn)
}

func (s *Store) transact(ctx context.Context, fn func(tx *sql.Tx) error) (time.Duration, error) {
	tx, err := s.w.BeginTx(inline(ctx), nil)
	if err != nil {
		return 0, fmt.Errorf("begin: %w", err)
	}
	// BEGIN IMMEDIATE has taken the lock: pool waits are not lock time.
	// A region "write" of a Go trace (harvest bench --trace).
	defer trace.StartRegion(ctx, "write").End()
	start := time.Now()
	if err := fn(tx); err != nil {
		tx.Rollback()
		return 0, err
	}
	if err := tx.Commit(); err != nil {
		return 0, fmt.Errorf("commit: %w", err)
	}
	d := time.Since(start)
	s.addStat(d)
	return d, nil
}

// fenced is write for a pool's master: inside the transaction, before fn,
// it reads the pool's lease and checks that epoch is current and alive at
// now. A lease granted to a newer master commits either before this
// transaction (and the check refuses) or after it (and this write was the
// current master's): there is no window between check and write.
func (s *Store) fenced(ctx context.Context, pool string, epoch int64, now time.Time, fn func(tx *sql.Tx, l rules.Lease) error) error {
	return s.write(ctx, func(tx *sql.Tx) error {
		l, err := s.readLeaseTx(ctx, tx, pool)
		if err != nil {
			return err
		}
		if err := rules.CheckEpoch(l, epoch, now); err != nil {
			return err
		}
		return fn(tx, l)
	})
}

// hotQueries are the statements of the master's hot path (a hand-out, a
// batch of results, a heartbeat, the fence), prepared once on the writer
// when the store opens: SQLite would otherwise parse and plan them at
// every call, which costs more than running them. A query is registered
// with hot by the package variable that holds it.
var hotQueries []string

func hot(query string) string {
	hotQueries = append(hotQueries, query)
	return query
}

// prepare prepares every hot query on the writer connection.
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

// inline strips ctx of its cancellation for a statement on the writer.
// go-sqlite3 runs a statement whose context can be cancelled on a
// goroutine of its own and has the caller wait for it (to interrupt it on
// cancellation): every statement of a write transaction cost a goroutine
// and a trip through the Go scheduler, with the write lock held, and the
// writer thread's CPU clock missed the statement's work. The writer's
// statements take milliseconds; none is worth interrupting mid-transaction.
func inline(ctx context.Context) context.Context { return context.WithoutCancel(ctx) }

// prepared returns the prepared statement of a hot query inside tx.
func (s *Store) prepared(ctx context.Context, tx *sql.Tx, query string) (*sql.Stmt, error) {
	st := s.stmts[query]
	if st == nil {
		return nil, fmt.Errorf("statement %.40q is not registered with hot", query)
	}
	return tx.StmtContext(ctx, st), nil
}

// exec runs a prepared statement in tx.
func (s *Store) exec(ctx context.Context, tx *sql.Tx, query string, args ...any) (sql.Result, error) {
	st, err := s.prepared(ctx, tx, query)
	if err != nil {
		return nil, err
	}
	return st.ExecContext(inline(ctx), args...)
}

// query runs a prepared query in tx, or with a nil tx on the writer
// connection outside any transaction: a read that takes no write lock but
// finds the writer's page cache warm (a reader's cache is dropped whenever
// another connection has written, which here is all the time: reading the
// hot path's rows there cost ~13 us a row).
func (s *Store) query(ctx context.Context, tx *sql.Tx, query string, args ...any) (*sql.Rows, error) {
	if tx == nil {
		st := s.stmts[query]
		if st == nil {
			return nil, fmt.Errorf("statement %.40q is not registered with hot", query)
		}
		return st.QueryContext(inline(ctx), args...)
	}
	st, err := s.prepared(ctx, tx, query)
	if err != nil {
		return nil, err
	}
	return st.QueryContext(inline(ctx), args...)
}

// querier is a *sql.DB or a *sql.Tx.
type querier interface {
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// ids runs a read query whose rows are single ids.
func ids(ctx context.Context, db querier, query string, args ...any) ([]int64, error) {
	rows, err := db.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []int64
	for rows.Next() {
		var id int64
		if err := rows.Scan(&id); err != nil {
			return nil, err
		}
		out = append(out, id)
	}
	return out, rows.Err()
}

func ms(t time.Time) int64 { return t.UnixMilli() }

func sec(msv int64) int64 {
	if msv == 0 {
		return 0
	}
	return msv / 1000
}
