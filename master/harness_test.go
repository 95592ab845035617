package master_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/harvest-hpc/harvest/master"
	"github.com/harvest-hpc/harvest/pilotproto"
	"github.com/harvest-hpc/harvest/worker"
)

const token = "test-token"

func quietLogger() *slog.Logger {
	if os.Getenv("HARVEST_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError + 4}))
}

func fastMasterConfig(dir, pilot string, epoch int64) master.Config {
	c := master.DefaultConfig()
	c.PilotID, c.Epoch, c.Token = pilot, epoch, token
	c.CheckpointPath = filepath.Join(dir, "master.db")
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

// cutQueue wraps a queue; once cut, every call fails like a partition.
type cutQueue struct {
	master.Queue
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
func (c *cutQueue) Report(ctx context.Context, r pilotproto.ResultsRequest) (pilotproto.ResultsResponse, error) {
	if c.cut.Load() {
		return pilotproto.ResultsResponse{}, errCut
	}
	return c.Queue.Report(ctx, r)
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

// startMaster takes the lease as pilot and runs a master on dir's checkpoint.
func startMaster(t *testing.T, q master.Queue, dir, pilot string, tweak func(*master.Config)) *runningMaster {
	t.Helper()
	return startMasterAfter(t, q, dir, pilot, tweak, nil)
}

// startMasterAfter is startMaster with a look at the master before it runs.
func startMasterAfter(t *testing.T, q master.Queue, dir, pilot string, tweak func(*master.Config), before func(*master.Master)) *runningMaster {
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
	ctx, cancel := context.WithCancel(context.Background())
	rm := &runningMaster{m: m, srv: httptest.NewServer(m.Handler()), q: cq, cancel: cancel, done: make(chan error, 1)}
	if before != nil {
		before(m) // sees the master as restored, before it acts
	}
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

func startWorker(t *testing.T, cfg worker.Config, resolve worker.Resolver) *runningWorker {
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

func tasks(job int64, n, batch int) []pilotproto.Task {
	out := make([]pilotproto.Task, n)
	for i := range out {
		out[i] = pilotproto.Task{ID: job*100000 + int64(i) + 1, JobID: job, Name: fmt.Sprintf("t%d", i),
			Command: []string{"true"}, BatchSize: batch}
	}
	return out
}

func waitFinal(t *testing.T, q *master.MemQueue, d time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	if err := q.WaitFinal(ctx); err != nil {
		t.Fatalf("tasks not all final after %s: %+v", d, q.Stats())
	}
}

func checkExactlyOnce(t *testing.T, q *master.MemQueue) {
	t.Helper()
	s := q.Stats()
	if s.Done != s.Tasks || s.DoneTwice != 0 {
		t.Fatalf("want every task done exactly once: %+v", s)
	}
}

// proxy forwards TCP to a master until cut, like a network that fails.
type proxy struct {
	ln    net.Listener
	mu    sync.Mutex
	conns []net.Conn
}

func newProxy(t *testing.T, target string) *proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &proxy{ln: ln}
	addr := strings.TrimPrefix(target, "http://")
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			u, err := net.Dial("tcp", addr)
			if err != nil {
				c.Close()
				continue
			}
			p.mu.Lock()
			p.conns = append(p.conns, c, u)
			p.mu.Unlock()
			go func() { io.Copy(u, c); u.Close() }()
			go func() { io.Copy(c, u); c.Close() }()
		}
	}()
	t.Cleanup(p.cut)
	return p
}

func (p *proxy) url() string { return "http://" + p.ln.Addr().String() }

func (p *proxy) cut() {
	p.ln.Close()
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		c.Close()
	}
}
