// Package queue is harvest's job queue: SQLite storage, the /v1 REST API
// with three roles (user, admin, pilot), fair-share intake with JAliEn's
// computedPriority, the job/task lifecycle, the master lease with epoch
// fencing, and the MiniNode recommendation and demand figures the agent's
// policy reads. It runs inside `harvest agent` (or `harvest queue serve`).
//
//	q, err := queue.Open(cfg)
//	defer q.Close()
//	go q.Serve(ctx, unixListener, tcpListener)
//	demand, _ := q.Demand(ctx)
package queue

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"sync"
	"time"

	"github.com/harvest-hpc/harvest/cluster"
	"github.com/harvest-hpc/harvest/pilotproto"
	"github.com/harvest-hpc/harvest/queue/fairshare"
)

// Queue is the queue service. All methods are safe for concurrent use.
type Queue struct {
	cfg   Config
	log   *slog.Logger
	w, r  *sql.DB
	ck    *sql.DB  // checkpoints only
	roots []string // allowed roots, symlinks resolved

	pullMu sync.Mutex // one pull at a time: the fair order is computed over all users
	// orphansChecked is the newest epoch whose first heartbeat requeued the
	// older epochs' tasks it did not list (under mu).
	orphansChecked int64
	// mut is held across every write that changes usage (commit + the
	// in-memory update), so the reconciler sees the tables and the memory
	// in step. It is not SQLite's write lock and is held for as short.
	mut sync.Mutex

	mu      sync.Mutex // guards the fields below
	users   map[string]*userState
	highest float64 // highest baseline priority of any user
	lease   leaseState
	rec     recommendation
	pilots  map[string]pilotSeen

	wstats writeStats

	stop   context.CancelFunc
	wg     sync.WaitGroup
	closed chan struct{}
	once   sync.Once
}

// userState is a user's limits and live usage, kept in memory; the usage
// table is a flushed copy.
type userState struct {
	limits  fairshare.Limits
	running int          // cores of ASSIGNED/RUNNING/ZOMBIE tasks
	events  []usageEvent // results in the window, oldest first
	dirty   bool         // changed since the last flush
}

type usageEvent struct {
	at        int64 // Unix ms
	cpu, cost float64
}

type recommendation struct {
	minNodes, pending, running, slots int
	at                                time.Time
}

type pilotSeen struct {
	status pilotproto.PilotStatus
	at     time.Time
}

// Open opens (creating or migrating) the database, loads users, usage and
// the lease, and starts the background sweeps. Close stops them.
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
	w, r, ck, err := openDB(cfg.DBPath)
	if err != nil {
		return nil, err
	}
	q := &Queue{
		cfg: cfg, log: log.With("component", "queue"), w: w, r: r, ck: ck, roots: roots,
		users: map[string]*userState{}, pilots: map[string]pilotSeen{}, closed: make(chan struct{}),
	}
	ctx := context.Background()
	if err := q.cleanupPartialSubmits(ctx); err != nil {
		q.closeDB()
		return nil, err
	}
	if err := q.loadLease(ctx); err != nil {
		q.closeDB()
		return nil, err
	}
	if err := q.Reconcile(ctx); err != nil {
		q.closeDB()
		return nil, err
	}
	bg, cancel := context.WithCancel(context.Background())
	q.stop = cancel
	q.loop(bg, cfg.SweepInterval, "sweep", q.Sweep)
	q.loop(bg, cfg.FlushInterval, "flush", func(ctx context.Context) error { _, err := q.FlushUsage(ctx); return err })
	q.loop(bg, cfg.ReconcileInterval, "reconcile", q.Reconcile)
	q.loop(bg, cfg.CheckpointInterval, "checkpoint", q.checkpoint)
	return q, nil
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
		if _, ferr := q.FlushUsage(context.Background()); ferr != nil {
			q.log.Warn("final usage flush failed", "error", ferr)
		}
		err = q.closeDB()
	})
	return err
}

func (q *Queue) closeDB() error {
	_, cerr := q.ck.Exec("PRAGMA wal_checkpoint(TRUNCATE)")
	return errors.Join(cerr, q.ck.Close(), q.r.Close(), q.w.Close())
}

func (q *Queue) now() time.Time { return q.cfg.Now() }

// Demand returns the backlog the agent's policy reads: pending = WAITING
// tasks (requeued ones included) of live jobs, running = ASSIGNED, RUNNING
// or ZOMBIE tasks. SlotsPerNode comes from the master's latest fresh
// recommendation, else the configured default.
func (q *Queue) Demand(ctx context.Context) (cluster.Demand, error) {
	var pending, running sql.NullInt64
	err := q.r.QueryRowContext(ctx, `SELECT sum(n_waiting), sum(n_active) FROM jobs WHERE state IN ('WAITING', 'RUNNING')`).Scan(&pending, &running)
	if err != nil {
		return cluster.Demand{}, fmt.Errorf("demand: %w", err)
	}
	d := cluster.Demand{PendingTasks: int(pending.Int64), RunningTasks: int(running.Int64), SlotsPerNode: q.cfg.DefaultSlotsPerNode}
	q.mu.Lock()
	if q.recFresh() && q.rec.slots > 0 {
		d.SlotsPerNode = q.rec.slots
	}
	q.mu.Unlock()
	return d, nil
}

// Recommendation returns the master's latest MiniNode recommendation, or 0
// when there is none or it is stale (older than RecommendationTTL).
func (q *Queue) Recommendation() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	if !q.recFresh() {
		return 0
	}
	return q.rec.minNodes
}

func (q *Queue) recFresh() bool {
	return !q.rec.at.IsZero() && q.now().Sub(q.rec.at) <= q.cfg.RecommendationTTL
}

// PilotStatus returns the pilots the master reported in its heartbeats
// within the last zombie timeout (busy ones run tasks and are released last).
func (q *Queue) PilotStatus() map[string]pilotproto.PilotStatus {
	q.mu.Lock()
	defer q.mu.Unlock()
	out := make(map[string]pilotproto.PilotStatus, len(q.pilots))
	now := q.now()
	for id, p := range q.pilots {
		if now.Sub(p.at) > q.cfg.ZombieTimeout {
			delete(q.pilots, id)
			continue
		}
		out[id] = p.status
	}
	return out
}

// NodeLimits returns the admin's floor and cap of pilot nodes (0 = no cap).
func (q *Queue) NodeLimits(ctx context.Context) (minNodes, maxNodes int, err error) {
	n, err := q.nodes(ctx)
	return n.MinNodes, n.MaxNodes, err
}
