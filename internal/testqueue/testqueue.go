// Package testqueue starts the real queue in process for the tests of its
// users (the master, the pilots, the contract suite): SQLite in a
// temporary directory, a settable clock, the pilot token, and helpers that
// submit datasets and read jobs back. No fake: the rules under test are
// the queue's own.
package testqueue

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/harvest-hpc/harvest/queue"
	"github.com/harvest-hpc/harvest/queue/api"
	"github.com/harvest-hpc/harvest/queue/client"
)

// PilotToken is the pilot token of every test queue.
const PilotToken = "pilot-token-for-tests"

// Owner submits the test jobs.
const Owner = "alice"

// Clock is a settable clock: the queue's time moves only when told, so
// lease expiry and zombie timeouts need no sleeping.
type Clock struct {
	mu sync.Mutex
	t  time.Time
}

// Now returns the clock's time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

// Advance moves the clock on.
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// Env is a running queue.
type Env struct {
	Q     *queue.Queue
	Cfg   queue.Config
	Clock *Clock // nil when the queue runs on the real clock
	Data  string // the allowed root datasets are made under
	seq   atomic.Int64
}

// Option changes the queue's configuration before it opens.
type Option func(*queue.Config)

// WithRealClock runs the queue on time.Now (for tests with real pilot
// processes, whose masters renew the lease in real time).
func WithRealClock() Option { return func(c *queue.Config) { c.Now = nil } }

// Start opens a queue in t's temporary directory; it is closed at the
// end of the test. Background sweeps are off (an hour apart) unless an
// option sets them; the user quota is high enough not to slow tests.
func Start(t testing.TB, opts ...Option) *Env {
	t.Helper()
	dir := t.TempDir()
	data := filepath.Join(dir, "data")
	if err := os.MkdirAll(filepath.Join(data, "out"), 0o755); err != nil {
		t.Fatal(err)
	}
	clock := &Clock{t: time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)}
	cfg := queue.DefaultConfig()
	cfg.DBPath = filepath.Join(dir, "queue.db")
	cfg.AllowedRoots = []string{data}
	cfg.OutputsRoot = filepath.Join(data, "out")
	cfg.PilotToken = PilotToken
	cfg.Now = clock.Now
	cfg.SweepInterval, cfg.FlushInterval, cfg.ReconcileInterval = time.Hour, time.Hour, time.Hour
	cfg.DefaultLimits.MaxParallelJobs = 100_000
	cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	if os.Getenv("HARVEST_TEST_LOG") != "" {
		cfg.Logger = slog.New(slog.NewTextHandler(os.Stderr, nil))
	}
	for _, o := range opts {
		o(&cfg)
	}
	e := &Env{Cfg: cfg, Data: data}
	if cfg.Now == nil {
		cfg.Now = time.Now
		e.Cfg = cfg
	} else {
		e.Clock = clock
	}
	q, err := queue.Open(cfg)
	if err != nil {
		t.Fatalf("open queue: %v", err)
	}
	e.Q = q
	t.Cleanup(func() { q.Close() })
	return e
}

// Serve serves the queue's REST API on 127.0.0.1 until the test ends and
// returns its URL.
func (e *Env) Serve(t testing.TB) string {
	t.Helper()
	srv := httptest.NewServer(e.Q.Handler())
	t.Cleanup(srv.Close)
	return srv.URL
}

// Client is a queue client for url with token (PilotToken for a pilot).
func Client(t testing.TB, url, token string) *client.Client {
	t.Helper()
	c := client.DefaultConfig()
	c.URL, c.Token, c.RetryFor = url, token, 2*time.Second
	cl, err := client.New(c)
	if err != nil {
		t.Fatal(err)
	}
	return cl
}

// Submit makes a dataset of n entries and submits it as Owner with the
// given batch size; mod changes the spec (nil: sh -c true).
func (e *Env) Submit(t testing.TB, n, batch int, mod func(*api.JobSpec)) api.Job {
	t.Helper()
	ds := filepath.Join(e.Data, fmt.Sprintf("ds%d", e.seq.Add(1)))
	for i := 0; i < n; i++ {
		if err := os.MkdirAll(filepath.Join(ds, fmt.Sprintf("sub%04d", i)), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	spec := api.JobSpec{Dataset: ds, BatchSize: batch, Command: []string{"true"}}
	if mod != nil {
		mod(&spec)
	}
	j, err := e.Q.Submit(context.Background(), Owner, spec)
	if err != nil {
		t.Fatalf("submit: %v", err)
	}
	return j
}

// Job reads a job back.
func (e *Env) Job(t testing.TB, id int64) api.Job {
	t.Helper()
	j, err := e.Q.Job(context.Background(), Owner, true, id)
	if err != nil {
		t.Fatalf("job %d: %v", id, err)
	}
	return j
}

// Cancel cancels a job.
func (e *Env) Cancel(t testing.TB, id int64) {
	t.Helper()
	if _, err := e.Q.Cancel(context.Background(), Owner, true, id); err != nil {
		t.Fatalf("cancel job %d: %v", id, err)
	}
}

// Final reports whether a job state is final.
func Final(state string) bool {
	switch state {
	case api.JobDone, api.JobDoneWarn, api.JobFailed, api.JobKilled, api.JobErrorEW:
		return true
	}
	return false
}
