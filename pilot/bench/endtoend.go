package bench

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/harvest-hpc/harvest/internal/pgscratch"
	"github.com/harvest-hpc/harvest/pilotproto"
	"github.com/harvest-hpc/harvest/queue"
	"github.com/harvest-hpc/harvest/queue/api"
	"github.com/harvest-hpc/harvest/queue/client"
	"github.com/harvest-hpc/harvest/queue/httpapi"
	"github.com/harvest-hpc/harvest/queue/store"
)

// The end-to-end bench: the real queue (SQLite, its HTTP API on
// 127.0.0.1, the fair-share order over Users users with one job each,
// results applied with their usage) feeds the master over HTTP, as a
// pilot's master is fed by the agent's queue, and the master feeds the
// worker processes. Makespan runs from the moment the master may pull
// (the jobs are stored, the workers registered) until the queue has
// acknowledged every result.

// Breakdown is where the time of an end-to-end run went. Wall times are
// summed over concurrent calls, CPU times are the processes' own.
type Breakdown struct {
	// The queue's HTTP handlers (decode, rules, SQLite, encode), by
	// endpoint: calls and total wall time.
	PullCalls      int     `json:"pull_calls"`
	EmptyPulls     int64   `json:"empty_pulls"` // of them, pulls that brought no task
	PullMS         float64 `json:"pull_ms"`
	ResultsCalls   int     `json:"results_calls"`
	ResultsMS      float64 `json:"results_ms"`
	HeartbeatCalls int     `json:"heartbeat_calls"`
	HeartbeatMS    float64 `json:"heartbeat_ms"`
	// Time the queue held SQLite's write lock, its transactions, the
	// longest one.
	WriteLockMS  float64          `json:"write_lock_ms"`
	LongestTxMS  float64          `json:"longest_tx_ms"`
	LongestTxIn  string           `json:"longest_tx_in"` // the queue store's method that ran it
	Transactions int64            `json:"transactions"`
	SlowTx       int64            `json:"slow_transactions"`              // longer than txstats.SlowTx (5 ms)
	SlowTxIn     map[string]int64 `json:"slow_transactions_in,omitempty"` // per store method
	P99TxMS      float64          `json:"p99_tx_ms"`                      // to txstats.HistBucket
	// The WAL file's size at the end of the run.
	WALMB float64 `json:"wal_mb"`
	// CPU: this process (queue, master, both ends of their HTTP) and the
	// worker processes (their HTTP to the master, their bookkeeping).
	ProcessCPUS float64 `json:"process_cpu_s"`
	WorkersCPUS float64 `json:"workers_cpu_s"`
}

// realQueue is a queue with its API on a loopback port and a pilot client.
type realQueue struct {
	drop  func() error // drops a PostgreSQL run's schema
	q     *queue.Queue
	srv   *http.Server
	pilot *client.Client
	timer *timing
	jobs  int
	data  string // the allowed root: datasets and outputs
}

const pilotToken = "bench-token"

// openRealQueue opens a fresh queue in cfg.Dir and stores cfg.Users jobs
// sharing cfg.Tasks tasks (one dataset per task count, shared by users).
func openRealQueue(ctx context.Context, cfg Config) (*realQueue, error) {
	dir, err := os.MkdirTemp(cfg.Dir, "queue-") // a fresh queue for every run
	if err != nil {
		return nil, err
	}
	data := filepath.Join(dir, "data")
	qc := queue.DefaultConfig()
	qc.DBPath = filepath.Join(dir, "queue.db")
	var drop func() error
	if store.IsURL(cfg.DB) {
		if qc.DBPath, drop, err = pgscratch.New(ctx, cfg.DB, "harvest_bench_"); err != nil {
			return nil, err
		}
	}
	qc.AllowedRoots = []string{data}
	qc.OutputsRoot = filepath.Join(data, "out")
	qc.PilotToken = pilotToken
	qc.Logger = cfg.Logger
	// The bench measures dispatch, not the cores quota: lift it (the fair
	// order still alternates the users by batches, their standing equal).
	qc.DefaultLimits.MaxParallelJobs = 1 << 30
	per, extra := cfg.Tasks/cfg.Users, cfg.Tasks%cfg.Users
	datasets := map[int]string{}
	for _, n := range []int{per, per + 1} {
		if n == 0 || (n == per+1 && extra == 0) {
			continue
		}
		ds := filepath.Join(data, fmt.Sprintf("ds%d", n))
		for i := 0; i < n; i++ {
			if err := os.MkdirAll(filepath.Join(ds, fmt.Sprintf("t%06d", i)), 0o755); err != nil {
				return nil, err
			}
		}
		datasets[n] = ds
	}
	if err := os.MkdirAll(qc.OutputsRoot, 0o755); err != nil {
		return nil, err
	}
	q, err := queue.Open(qc)
	if err != nil {
		if drop != nil {
			drop()
		}
		return nil, err
	}
	r := &realQueue{q: q, timer: newTiming(), data: data, drop: drop}
	argv := taskArgv(cfg)
	for u := 0; u < cfg.Users; u++ {
		n := per
		if u < extra {
			n = per + 1
		}
		if n == 0 {
			continue
		}
		if _, err := q.Submit(ctx, fmt.Sprintf("u%05d", u), api.JobSpec{Dataset: datasets[n], Command: argv, BatchSize: cfg.BatchSize}); err != nil {
			q.Close()
			return nil, fmt.Errorf("bench: submit: %w", err)
		}
		r.jobs++
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		q.Close()
		return nil, err
	}
	r.srv = &http.Server{Handler: r.timer.wrap(httpapi.New(q, httpapi.DefaultConfig()).Handler())}
	go r.srv.Serve(ln)
	cc := client.DefaultConfig()
	cc.URL, cc.Token = "http://"+ln.Addr().String(), pilotToken
	if r.pilot, err = client.New(cc); err != nil {
		r.close()
		return nil, err
	}
	return r, nil
}

func (r *realQueue) close() {
	r.srv.Close()
	r.q.Close()
	if r.drop != nil {
		r.drop()
	}
}

// check reads back what the queue recorded: every job DONE, every task
// done once.
func (r *realQueue) check(ctx context.Context, tasks int) error {
	st, err := r.q.Stats(ctx)
	if err != nil {
		return err
	}
	done := 0
	for _, t := range st.ByUser {
		done += t.Done
		if t.Waiting+t.Running+t.Failed+t.Killed > 0 {
			return fmt.Errorf("bench: the queue holds unfinished or failed tasks: %+v", t)
		}
	}
	if done != tasks || st.Requeued != 0 {
		return fmt.Errorf("bench: the queue has %d of %d tasks done, %d handed out again", done, tasks, st.Requeued)
	}
	return nil
}

// gate holds the master's pulls until the run starts, so the makespan
// counts every task the master pulls, and the first pull goes on as soon
// as it starts (the master's idle poll does not delay it).
type gate struct {
	pilotproto.Queue
	opened chan struct{} // closed when the run starts
	empty  atomic.Int64  // pulls that brought nothing
}

func newGate(q pilotproto.Queue) *gate { return &gate{Queue: q, opened: make(chan struct{})} }

func (g *gate) Pull(ctx context.Context, req pilotproto.PullRequest) (pilotproto.PullResponse, error) {
	select {
	case <-g.opened:
	case <-ctx.Done():
		return pilotproto.PullResponse{}, ctx.Err()
	}
	resp, err := g.Queue.Pull(ctx, req)
	if err == nil && len(resp.Tasks) == 0 {
		g.empty.Add(1)
	}
	return resp, err
}

// timing sums the wall time of the queue's handlers per path.
type timing struct {
	mu    sync.Mutex
	calls map[string]int
	total map[string]time.Duration
}

func newTiming() *timing { return &timing{calls: map[string]int{}, total: map[string]time.Duration{}} }

func (t *timing) wrap(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		h.ServeHTTP(w, r)
		d := time.Since(start)
		t.mu.Lock()
		t.calls[r.URL.Path]++
		t.total[r.URL.Path] += d
		t.mu.Unlock()
	})
}

func (t *timing) reset() {
	t.mu.Lock()
	clear(t.calls)
	clear(t.total)
	t.mu.Unlock()
}

func (t *timing) get(path string) (int, float64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.calls[path], float64(t.total[path].Microseconds()) / 1000
}

// cpu returns the CPU time (user + system) of this process or, with
// children, of its waited-for children.
func cpu(who int) time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(who, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
