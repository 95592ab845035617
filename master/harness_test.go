package master_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http/httptest"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/harvest-hpc/harvest/master"
	"github.com/harvest-hpc/harvest/pilotproto"
	"github.com/harvest-hpc/harvest/queue"
	"github.com/harvest-hpc/harvest/queue/api"
	"github.com/harvest-hpc/harvest/queue/queuetest"
	"github.com/harvest-hpc/harvest/worker"
)

// These tests drive the master (the driver around master/core) with the
// real queue in process, real HTTP and in-process workers. They wait on
// events with deadlines, never on sleeps: the master's counters (WaitFor),
// the queue's answers (watchQueue), the queue's own clock for lease
// expiry. The rules themselves are pinned by core's scenario files.

const token = "test-token"

func quietLogger() *slog.Logger {
	if os.Getenv("HARVEST_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

func fastMasterConfig(dir, pilot string, epoch int64) master.Config {
	c := master.DefaultConfig()
	c.PilotID, c.Epoch, c.Token = pilot, epoch, token
	c.CheckpointDir = dir
	c.PullWait = 200 * time.Millisecond
	c.IdlePoll = 20 * time.Millisecond
	c.RetryInterval = 50 * time.Millisecond
	c.HeartbeatInterval = 100 * time.Millisecond
	c.LeaseRenewInterval = 100 * time.Millisecond
	c.WorkerTimeout = time.Second
	c.ReconnectGrace = time.Second
	c.SafetyMargin = 0
	c.Logger = quietLogger()
	return c
}

func fastWorkerConfig(id string, slots int, r worker.Runner) worker.Config {
	c := worker.DefaultConfig()
	c.ID, c.PilotID, c.Token, c.Slots, c.Runner = id, "pilot-"+id, token, slots, r
	c.PullWait = 200 * time.Millisecond
	c.HeartbeatInterval = 100 * time.Millisecond
	c.MasterGrace = 300 * time.Millisecond
	c.RetryInterval = 50 * time.Millisecond
	c.ShutdownTimeout = 2 * time.Second
	c.Logger = quietLogger()
	return c
}

// env is the real queue in process (queue/queuetest) with the few
// helpers these tests need.
type env struct {
	*queuetest.Env
	datasets int
}

// startQueue opens a queue on its own settable clock; alice's quota is
// high enough not to slow the tests down.
func startQueue(t testing.TB, mods ...func(*queue.Config)) *env {
	t.Helper()
	mods = append([]func(*queue.Config){func(c *queue.Config) { c.DefaultLimits.MaxParallelJobs = 100_000 }}, mods...)
	return &env{Env: queuetest.New(t, mods...)}
}

func withTTL(d time.Duration) func(*queue.Config) { return func(c *queue.Config) { c.LeaseTTL = d } }

// withRealClock: the queue's lease runs on real time (the master renews in real time).
func withRealClock(c *queue.Config) { c.Now = time.Now }

func (e *env) submit(t testing.TB, n, batch int, mod func(*api.JobSpec)) api.Job {
	t.Helper()
	e.datasets++
	spec := api.JobSpec{Dataset: e.Dataset(fmt.Sprintf("ds%d", e.datasets), n), BatchSize: batch, Command: []string{"true"}}
	if mod != nil {
		mod(&spec)
	}
	j, err := e.Q.Submit(context.Background(), "alice", spec)
	if err != nil {
		t.Fatalf("submit: %v", err)
	}
	return j
}

func (e *env) job(t *testing.T, id int64) api.Job {
	t.Helper()
	j, err := e.Q.Job(context.Background(), "alice", false, id)
	if err != nil {
		t.Fatalf("job %d: %v", id, err)
	}
	return j
}

func (e *env) cancel(t *testing.T, id int64) {
	t.Helper()
	if _, err := e.Q.Cancel(context.Background(), "alice", false, id); err != nil {
		t.Fatalf("cancel job %d: %v", id, err)
	}
}

func final(state string) bool {
	switch state {
	case api.JobDone, api.JobDoneWarn, api.JobFailed, api.JobKilled, api.JobErrorEW:
		return true
	}
	return false
}

// watchQueue tells the test when the queue applied results.
type watchQueue struct {
	pilotproto.Queue
	mu         sync.Mutex
	changed    chan struct{}
	duplicates int
}

func watch(q pilotproto.Queue) *watchQueue {
	return &watchQueue{Queue: q, changed: make(chan struct{})}
}

func (w *watchQueue) Results(ctx context.Context, r pilotproto.ResultsRequest) (pilotproto.ResultsResponse, error) {
	resp, err := w.Queue.Results(ctx, r)
	w.mu.Lock()
	defer w.mu.Unlock()
	w.duplicates += resp.Duplicates
	close(w.changed)
	w.changed = make(chan struct{})
	return resp, err
}

// dups is how many duplicate results the queue reported (the master's
// report calls may still run when the job is DONE).
func (w *watchQueue) dups() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.duplicates
}

func (w *watchQueue) next() <-chan struct{} {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.changed
}

// waitJob waits until the job is final, on the queue's results.
func waitJob(t *testing.T, e *env, w *watchQueue, id int64, d time.Duration) api.Job {
	t.Helper()
	j, _ := waitJobOrStop(t, e, w, nil, id, d)
	return j
}

// waitJobOrStop is waitJob that also ends when stopped is closed (a
// master that stopped) with the job not final: ok false then.
func waitJobOrStop(t *testing.T, e *env, w *watchQueue, stopped <-chan struct{}, id int64, d time.Duration) (j api.Job, ok bool) {
	t.Helper()
	deadline := time.After(d)
	for {
		ch := w.next()
		if j := e.job(t, id); final(j.State) {
			return j, true
		}
		select {
		case <-ch:
		case <-stopped:
			j := e.job(t, id)
			return j, final(j.State)
		case <-deadline:
			t.Fatalf("job %d not final after %s: %+v", id, d, e.job(t, id))
		}
	}
}

// checkDone: the job ended DONE with every task done once.
func checkDone(t *testing.T, j api.Job, n int) {
	t.Helper()
	if j.State != api.JobDone || j.Tasks.Done != n || j.Tasks.Total != n {
		t.Fatalf("job %d ended %s with %+v, want DONE with %d tasks done", j.ID, j.State, j.Tasks, n)
	}
}

func waitFor(t *testing.T, m *master.Master, what string, d time.Duration, cond func(master.Stats) bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	if err := m.WaitFor(ctx, cond); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// cutQueue wraps a queue; once cut, every call fails like a partition.
type cutQueue struct {
	pilotproto.Queue
	cut atomic.Bool
}

var errCut = errors.New("network cut")

func (c *cutQueue) Lease(ctx context.Context, r pilotproto.LeaseRequest) (pilotproto.Lease, error) {
	if c.cut.Load() {
		return pilotproto.Lease{}, errCut
	}
	return c.Queue.Lease(ctx, r)
}
func (c *cutQueue) Pull(ctx context.Context, r pilotproto.PullRequest) (pilotproto.PullResponse, error) {
	if c.cut.Load() {
		return pilotproto.PullResponse{}, errCut
	}
	return c.Queue.Pull(ctx, r)
}
func (c *cutQueue) Results(ctx context.Context, r pilotproto.ResultsRequest) (pilotproto.ResultsResponse, error) {
	if c.cut.Load() {
		return pilotproto.ResultsResponse{}, errCut
	}
	return c.Queue.Results(ctx, r)
}
func (c *cutQueue) Heartbeat(ctx context.Context, r pilotproto.HeartbeatRequest) (pilotproto.HeartbeatResponse, error) {
	if c.cut.Load() {
		return pilotproto.HeartbeatResponse{}, errCut
	}
	return c.Queue.Heartbeat(ctx, r)
}
func (c *cutQueue) Recommend(ctx context.Context, r pilotproto.RecommendationRequest) error {
	if c.cut.Load() {
		return errCut
	}
	return c.Queue.Recommend(ctx, r)
}

// runningMaster is a master served on 127.0.0.1.
type runningMaster struct {
	m      *master.Master
	srv    *httptest.Server
	q      *cutQueue
	cancel context.CancelFunc
	done   chan error
}

// startMaster takes the lease as pilot and runs a master on dir's
// checkpoint; before, if set, sees the master as restored, before it acts.
func startMaster(t testing.TB, q pilotproto.Queue, dir, pilot string, tweak func(*master.Config), before func(*master.Master)) *runningMaster {
	t.Helper()
	cq := &cutQueue{Queue: q}
	lease, err := q.Lease(context.Background(), pilotproto.LeaseRequest{PilotID: pilot, Address: "http://" + pilot})
	if err != nil || !lease.Granted {
		t.Fatalf("lease for %s: %+v, %v", pilot, lease, err)
	}
	cfg := fastMasterConfig(dir, pilot, lease.Epoch)
	cfg.Address = "http://" + pilot
	if tweak != nil {
		tweak(&cfg)
	}
	m, err := master.New(cfg, cq)
	if err != nil {
		t.Fatalf("master.New: %v", err)
	}
	if before != nil {
		before(m)
	}
	ctx, cancel := context.WithCancel(context.Background())
	rm := &runningMaster{m: m, srv: httptest.NewServer(m.Handler()), q: cq, cancel: cancel, done: make(chan error, 1)}
	go func() { rm.done <- m.Run(ctx) }()
	t.Cleanup(func() { rm.stop() })
	return rm
}

// crash makes the master unreachable for workers and the queue at once,
// as a kill -9 would; its memory stays but it can no longer act.
func (rm *runningMaster) crash() {
	rm.q.cut.Store(true)
	rm.srv.CloseClientConnections()
	rm.srv.Close()
}

func (rm *runningMaster) stop() error {
	rm.cancel()
	err := <-rm.done
	rm.done <- err
	rm.srv.Close()
	return err
}

// endpoint is the master the test's workers are sent to.
type endpoint struct {
	mu  sync.Mutex
	url string
}

func (e *endpoint) set(u string) { e.mu.Lock(); e.url = u; e.mu.Unlock() }
func (e *endpoint) resolve(ctx context.Context) (worker.Endpoint, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.url == "" {
		return worker.Endpoint{}, errors.New("no master")
	}
	return worker.Endpoint{URL: e.url}, nil
}

type runningWorker struct {
	w      *worker.Worker
	cancel context.CancelFunc
	done   chan struct{}
}

func startWorker(t testing.TB, cfg worker.Config, resolve worker.Resolver) *runningWorker {
	t.Helper()
	w, err := worker.New(cfg, resolve)
	if err != nil {
		t.Fatalf("worker.New: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	rw := &runningWorker{w: w, cancel: cancel, done: make(chan struct{})}
	go func() { w.Run(ctx); close(rw.done) }()
	t.Cleanup(rw.stop)
	return rw
}

func (rw *runningWorker) stop() { rw.cancel(); <-rw.done }
