// Package queue is harvest's job queue service: the rules of job
// submission, fair-share intake with JAliEn's computedPriority, the
// job/task lifecycle, the master lease with epoch fencing, and the
// MiniNode recommendation and demand figures the agent's policy reads. It
// runs inside `harvest agent` (or `harvest queue serve`).
//
// The queue is three layers, in the shape of benbjohnson/wtf:
//
//	queue/store    SQLite: schema, migrations, every SQL statement; each
//	               method one short transaction; master writes fenced by
//	               the lease epoch inside the transaction
//	queue/rules    pure decisions the store applies inside transactions
//	               (task and job transitions, the lease)
//	queue          this package: validation, fair share and usage in
//	               memory, sweeps; no SQL, no HTTP
//	queue/httpapi  the /v1 REST API over this package: routing, roles,
//	               JSON, error codes, listeners
//
//	q, err := queue.Open(cfg)
//	defer q.Close()
//	go httpapi.New(q, httpapi.DefaultConfig()).Serve(ctx, unixListener, tcpListener)
//	demand, _ := q.Demand(ctx)
package queue

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/harvest-hpc/harvest/queue/fairshare"
	"github.com/harvest-hpc/harvest/queue/siteshare"
	"github.com/harvest-hpc/harvest/queue/store"
	"github.com/harvest-hpc/harvest/queue/txstats"
)

// Queue is the queue service. All methods are safe for concurrent use.
//
// Locks, in the only order they are ever taken:
//
//  1. pullMu: one pull at a time (a pull's tie-break counts live in the
//     fair-share order until it ends).
//  2. mu: the in-memory mirror (mirror.go: users' limits, running cores
//     and usage windows, live jobs and their waiting counts, the
//     fair-share order; the sites' reports, pilots and figures). A write that
//     changes what the mirror reflects holds mu from before its
//     transaction until the mirror is updated, so the tables and the
//     mirror change together for every other holder of mu (a pull plans
//     and assigns under mu; the reconciler reads the tables under mu).
//     Writes that change nothing mirrored (lease, heartbeats, a
//     submission's task inserts, tokens, settings) do not take it.
//  3. the store's writer connection (inside the store; it calls nothing
//     back, so no lock is ever taken while a transaction is open).
type Queue struct {
	cfg   Config
	log   *slog.Logger
	st    *store.Store
	roots []string // allowed roots, symlinks resolved

	pullMu sync.Mutex

	// slowLogged counts the slow write transactions logged so far (the
	// slow-log loop's alone).
	slowLogged int64

	mu     sync.Mutex
	users  map[string]*userState
	jobs   map[int64]*liveJob
	order  *fairshare.Index // users with work, in intake order
	window []windowMark     // usage events by arrival, for the sliding window
	// sites holds what each site's agent and master said, the pilots they
	// run, turnaround and yield.
	sites *siteshare.Registry
	// localRec is the local master's last recommendation (min nodes, cap);
	// planMoved gets a token when it changes (PlanMoved).
	localRec  [2]int
	planMoved chan struct{}
	// ends are the pilot ends the agents pulled in (site and pilot id ->
	// Unix s), passed to the pool's master in heartbeat answers until it
	// reports them.
	ends map[pilotKey]int64
	// orphansChecked is, per pool, the newest epoch whose first heartbeat
	// requeued the older epochs' tasks it did not list.
	orphansChecked map[string]int64
	// beats is, per pool, the epoch and time of its master's last
	// heartbeat (sweepUnacknowledged).
	beats map[string]poolBeat
	// peerRounds is, per site, the time of the latest agent round
	// syncPeers took from the database (Config.Shared).
	peerRounds map[string]time.Time
	// peerCancelled is the jobs cancelled in the last CancelNotice, as
	// syncPeers last read them (Config.Shared).
	peerCancelled []int64
	// sweepEpoch is the epoch of the sweep lease while this agent holds it
	// (Config.Shared).
	sweepEpoch int64
	// opened is when this queue process opened the database: tasks handed
	// out before it may have had their answer cut by the restart.
	opened time.Time
	// lostMS sums the run time of interrupted attempts since the queue
	// started (a counter: it restarts at 0 with the process).
	lostMS int64

	// submitMu guards submits, the submissions with an idempotency key
	// being stored. Taken alone (never with mu or pullMu).
	submitMu sync.Mutex
	submits  map[submitKey]*Submission

	// beforeWrite, when set (tests only), runs outside every lock before
	// each fenced write of a master (where a deposed master's write would
	// slip through if the epoch were checked before the transaction) and
	// before a submission stores its tasks ("store").
	beforeWrite func(op string)

	bg     context.Context // ends at Close: background work, submissions
	stop   context.CancelFunc
	wg     sync.WaitGroup
	closed chan struct{}
	once   sync.Once
}

// pilotKey names a pilot: job ids of different clusters collide.
type pilotKey struct{ site, pilot string }

// Open opens (creating or migrating) the database, removes submissions
// that died half way, loads users and usage, and starts the background
// sweeps. Close stops them.
func Open(cfg Config) (*Queue, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	roots := make([]string, 0, len(cfg.AllowedRoots))
	for _, r := range cfg.AllowedRoots {
		rr, err := filepath.EvalSymlinks(r)
		if err != nil {
			return nil, fmt.Errorf("%w: allowed root %s: %w", ErrInvalidConfig, r, err)
		}
		roots = append(roots, rr)
	}
	if cfg.OutputsRoot != "" {
		// Output directories are made without following links: name the
		// outputs root as it resolves.
		if rr, err := filepath.EvalSymlinks(cfg.OutputsRoot); err == nil {
			cfg.OutputsRoot = rr
		}
	}
	st, err := store.Open(cfg.DBPath)
	if err != nil {
		return nil, diskFullError(cfg.DBPath, err)
	}
	fail := func(err error) (*Queue, error) {
		st.Close()
		return nil, diskFullError(cfg.DBPath, err)
	}
	q := &Queue{
		cfg: cfg, log: log.With("component", "queue"), st: st, roots: roots,
		users: map[string]*userState{}, jobs: map[int64]*liveJob{}, order: fairshare.NewIndex(),
		sites: siteshare.NewRegistry(cfg.sitesConfig()), orphansChecked: map[string]int64{}, beats: map[string]poolBeat{}, ends: map[pilotKey]int64{},
		submits: map[submitKey]*Submission{}, closed: make(chan struct{}), peerRounds: map[string]time.Time{},
		planMoved: make(chan struct{}, 1),
	}
	q.opened = q.now()
	if cfg.Shared && q.cfg.SweepHolder == "" {
		host, _ := os.Hostname()
		var b [4]byte
		rand.Read(b[:])
		q.cfg.SweepHolder = fmt.Sprintf("%s@%s:%d:%x", cfg.LocalSite, host, os.Getpid(), b)
	}
	ctx := context.Background()
	if err := st.Claim(ctx, cfg.Shared, cfg.ClaimWait); err != nil {
		return fail(err)
	}
	if cfg.Shared {
		st.Share(q.cfg.SweepHolder) // other agents write it: no read answers from this process's copy
		if err := q.beatAgent(ctx); err != nil {
			return fail(err)
		}
	}
	if !cfg.Shared { // else another agent may be storing them: the sweeps remove stale ones
		if err := q.cleanupPartialSubmits(ctx, time.UnixMilli(math.MaxInt64)); err != nil { // every one
			return fail(err)
		}
	} else if err := q.registerLocalPilots(ctx); err != nil {
		return fail(err)
	}
	if err := q.finishKills(ctx); err != nil {
		return fail(err)
	}
	if err := q.Reconcile(ctx); err != nil {
		return fail(err)
	}
	bg, cancel := context.WithCancel(context.Background())
	q.bg, q.stop = bg, cancel
	q.loop(bg, cfg.SweepInterval, "sweep", q.Sweep)
	q.loop(bg, cfg.FlushInterval, "flush", func(ctx context.Context) error { _, err := q.FlushUsage(ctx); return err })
	q.loop(bg, cfg.ReconcileInterval, "reconcile", q.Reconcile)
	if cfg.Shared {
		q.loop(bg, cfg.ReconcileInterval, "peers", q.syncPeers)
	}
	q.loop(bg, cfg.SlowLogInterval, "slow log", q.logSlowWrites)
	return q, nil
}

// logSlowWrites logs, once each, the write transactions that held the lock
// over 5 ms since the last call: the admin who sees
// harvest_queue_write_transactions_slow_total move finds in the log which
// request made the others wait, and when.
func (q *Queue) logSlowWrites(context.Context) error {
	q.slowLogged = logSlow(q.log, q.st.WriteStats(false), q.slowLogged)
	return nil
}

// logSlow logs the slow transactions of ws after the first logged ones
// and returns how many are logged now.
func logSlow(log *slog.Logger, ws txstats.Stats, logged int64) int64 {
	if ws.Slow < logged { // the figures were reset (benchmarks)
		logged = 0
	}
	n := ws.Slow - logged
	if n == 0 {
		return logged
	}
	if unseen := n - int64(len(ws.Recent)); unseen > 0 {
		log.Warn("slow write transactions not logged one by one", "count", unseen)
	}
	for _, t := range ws.Recent[len(ws.Recent)-int(min(n, int64(len(ws.Recent)))):] {
		log.Warn("slow write transaction", "in", strings.TrimPrefix(t.In, "store.(*Store)."),
			"lock_ms", float64(t.Lock.Microseconds())/1000, "at", t.At.UTC().Format(time.RFC3339Nano))
	}
	return ws.Slow
}

func (q *Queue) loop(ctx context.Context, every time.Duration, name string, fn func(context.Context) error) {
	q.wg.Add(1)
	go func() {
		defer q.wg.Done()
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				if err := fn(ctx); err != nil && !errors.Is(err, context.Canceled) {
					q.log.Error("background task failed", "task", name, "error", err)
				}
			}
		}
	}()
}

// Close stops the background work, flushes usage and closes the database.
func (q *Queue) Close() error {
	var err error
	q.once.Do(func() {
		close(q.closed)
		if q.stop != nil {
			q.stop()
		}
		q.wg.Wait()
		if q.cfg.Shared {
			if rerr := q.st.Leave(context.Background()); rerr != nil {
				q.log.Warn("could not release this agent's leases; they lapse by themselves", "error", rerr)
			}
		}
		if _, ferr := q.FlushUsage(context.Background()); ferr != nil {
			q.log.Warn("final usage flush failed", "error", ferr)
		}
		err = q.st.Close()
		q.logWriteLock()
	})
	return err
}

// logWriteLock logs the write-lock figures of the queue's life at its
// close: what a site admin without a Prometheus server, and `harvest bench
// submit`, read of how long the queue made requests wait.
func (q *Queue) logWriteLock() {
	ws := q.st.WriteStats(false)
	if ws.Transactions == 0 {
		return
	}
	attrs := []any{"transactions", ws.Transactions, "lock_seconds", ws.Total.Seconds(),
		"longest_ms", float64(ws.Longest.Microseconds()) / 1000, "longest_in", ws.LongestIn,
		"over_5ms", ws.Slow}
	q.log.Info("write lock at close", attrs...)
}

// Closing is closed when Close starts: the API answers ErrClosed from then on.
func (q *Queue) Closing() <-chan struct{} { return q.closed }

// Logger is the queue's logger (the API logs through it).
func (q *Queue) Logger() *slog.Logger { return q.log }

// WriteStats returns the write-lock figures since Open (or the last reset).
func (q *Queue) WriteStats(reset bool) txstats.Stats { return q.st.WriteStats(reset) }

// WALBytes is the size of the database's WAL file (0 on PostgreSQL).
func (q *Queue) WALBytes() int64 { return q.st.WALBytes() }

func (q *Queue) now() time.Time { return q.cfg.Now() }

// hook runs the test hook (see beforeWrite).
func (q *Queue) hook(op string) {
	if q.beforeWrite != nil {
		q.beforeWrite(op)
	}
}
