package pilot_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/harvest-hpc/harvest/master"
	"github.com/harvest-hpc/harvest/pilot"
	"github.com/harvest-hpc/harvest/pilotproto"
	"github.com/harvest-hpc/harvest/queue"
	"github.com/harvest-hpc/harvest/queue/api"
	"github.com/harvest-hpc/harvest/queue/client"
	"github.com/harvest-hpc/harvest/queue/httpapi"
	"github.com/harvest-hpc/harvest/queue/queuetest"
	"github.com/harvest-hpc/harvest/worker"
)

const pilotToken = "pilot-token-for-tests"

func logger() *slog.Logger {
	if os.Getenv("HARVEST_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, nil))
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

// realQueue is the agent's queue on 127.0.0.1 with a user and a dataset.
type realQueue struct {
	q       *queue.Queue
	srv     *httptest.Server
	cfg     queue.Config
	url     string
	user    *client.Client
	pilot   master.Queue
	data    string
	state   string
	outputs string

	mu      sync.Mutex
	results chan struct{} // closed and replaced when the queue got results
}

// handler is the queue's API, telling r whenever results come in.
func (r *realQueue) handler(q *queue.Queue) http.Handler {
	h := httpapi.New(q, httpapi.DefaultConfig()).Handler()
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		h.ServeHTTP(w, req)
		if req.URL.Path == pilotproto.PathResults {
			r.mu.Lock()
			close(r.results)
			r.results = make(chan struct{})
			r.mu.Unlock()
		}
	})
}

// nextResults is closed when the queue next gets results.
func (r *realQueue) nextResults() <-chan struct{} {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.results
}

// waitDone waits, on the queue's results, until cond holds for the job.
func (r *realQueue) waitDone(t *testing.T, id int64, d time.Duration, what string, cond func(api.Job) bool) api.Job {
	t.Helper()
	deadline := time.After(d)
	for {
		ch := r.nextResults()
		j, err := r.user.Job(context.Background(), id)
		if err == nil && cond(j) {
			return j
		}
		select {
		case <-ch:
		case <-deadline:
			t.Fatalf("%s: not within %s (job %+v, %v)", what, d, j, err)
		}
	}
}

func startQueue(t *testing.T, mods ...func(*queue.Config)) *realQueue {
	t.Helper()
	dir := t.TempDir()
	data := filepath.Join(dir, "data")
	os.MkdirAll(filepath.Join(data, "out"), 0o755)
	state := filepath.Join(dir, "state")
	os.MkdirAll(state, 0o755)
	cfg := queue.DefaultConfig()
	cfg.DBPath = filepath.Join(dir, "queue.db")
	cfg.LookupAccount = queuetest.TestAccount // the test's users, not the machine's
	cfg.AllowedRoots = []string{data}
	cfg.OutputsRoot = filepath.Join(data, "out")
	cfg.PilotToken = pilotToken
	cfg.LeaseTTL = time.Second
	cfg.SweepInterval = 200 * time.Millisecond
	cfg.Logger = logger()
	for _, m := range mods {
		m(&cfg)
	}
	q, err := queue.Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	r := &realQueue{q: q, cfg: cfg, results: make(chan struct{})}
	r.srv = httptest.NewServer(r.handler(q))
	srv := r.srv
	t.Cleanup(func() { r.srv.Close(); r.q.Close() })
	tok, err := q.CreateToken(context.Background(), "alice", api.RoleUser)
	if err != nil {
		t.Fatal(err)
	}
	mk := func(token string) *client.Client {
		c := client.DefaultConfig()
		c.URL, c.Token, c.RetryFor = srv.URL, token, 2*time.Second
		cl, err := client.New(c)
		if err != nil {
			t.Fatal(err)
		}
		return cl
	}
	r.url, r.user, r.pilot = srv.URL, mk(tok.Token), mk(pilotToken)
	r.data, r.state, r.outputs = data, state, filepath.Join(data, "out")
	return r
}

// restart stops the queue (server and database) and starts it again on the
// same database and address, as an agent restart does.
func (r *realQueue) restart(t *testing.T, down time.Duration) {
	t.Helper()
	addr := r.srv.Listener.Addr().String()
	r.srv.CloseClientConnections()
	r.srv.Close()
	if err := r.q.Close(); err != nil {
		t.Fatalf("close queue: %v", err)
	}
	time.Sleep(down)
	q, err := queue.Open(r.cfg)
	if err != nil {
		t.Fatalf("reopen queue: %v", err)
	}
	var l net.Listener
	for i := 0; i < 50; i++ {
		if l, err = net.Listen("tcp", addr); err == nil {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err != nil {
		t.Fatalf("listen again on %s: %v", addr, err)
	}
	srv := httptest.NewUnstartedServer(r.handler(q))
	srv.Listener.Close()
	srv.Listener = l
	srv.Start()
	r.q, r.srv = q, srv
}

func (r *realQueue) submit(t *testing.T, n, batch int, script string) api.Job {
	t.Helper()
	ds := filepath.Join(r.data, fmt.Sprintf("ds%d", time.Now().UnixNano()))
	for i := 0; i < n; i++ {
		os.MkdirAll(filepath.Join(ds, fmt.Sprintf("sub%04d", i)), 0o755)
	}
	j, err := r.user.Submit(context.Background(), api.JobSpec{Dataset: ds, BatchSize: batch,
		Command: []string{"sh", "-c", script, "task", "{input}", "{output}", "{task}"}})
	if err != nil {
		t.Fatal(err)
	}
	return j
}

func (r *realQueue) waitJob(t *testing.T, id int64, d time.Duration) api.Job {
	t.Helper()
	return r.waitDone(t, id, d, fmt.Sprintf("job %d to finish", id), func(j api.Job) bool {
		return j.State == api.JobDone || j.State == api.JobDoneWarn || j.State == api.JobFailed
	})
}

// waitMaster waits until pilot id holds the master lease. It reads the
// sites' figures rather than asking for the lease: a lease request made
// while the lease is free would be granted to the asker.
func (r *realQueue) waitMaster(t *testing.T, id string) {
	t.Helper()
	waitFor(t, "pilot "+id+" to hold the master lease", 10*time.Second, func() bool {
		l, err := r.q.Sites(context.Background())
		if err != nil {
			return false
		}
		for _, s := range l.Sites {
			if s.Master == id {
				return true
			}
		}
		return false
	})
}

func fastPilot(r *realQueue, id string, slots int) pilot.Config {
	c := pilot.DefaultConfig()
	c.PilotID, c.Token, c.StateDir, c.Slots, c.Listen = id, pilotToken, r.state, slots, "127.0.0.1:0"
	c.LeaseRetry = 100 * time.Millisecond
	c.Logger = logger()
	m := &c.Master
	m.PullWait, m.IdlePoll, m.RetryInterval = 300*time.Millisecond, 50*time.Millisecond, 100*time.Millisecond
	m.HeartbeatInterval, m.LeaseRenewInterval = 200*time.Millisecond, 200*time.Millisecond
	m.WorkerTimeout, m.ReconnectGrace, m.SafetyMargin = 2*time.Second, 2*time.Second, 0
	m.Logger = c.Logger
	w := &c.Worker
	w.PullWait, w.HeartbeatInterval, w.MasterGrace, w.RetryInterval = 300*time.Millisecond, 200*time.Millisecond, 500*time.Millisecond, 100*time.Millisecond
	w.ShutdownTimeout = 3 * time.Second
	w.Logger = c.Logger
	r2 := worker.DefaultExecRunner()
	r2.KillGrace = 300 * time.Millisecond
	w.Runner = r2
	return c
}

type runningPilot struct {
	cancel context.CancelFunc
	done   chan error
}

func startPilot(t *testing.T, cfg pilot.Config, q master.Queue) *runningPilot {
	ctx, cancel := context.WithCancel(context.Background())
	rp := &runningPilot{cancel: cancel, done: make(chan error, 1)}
	go func() { rp.done <- pilot.Run(ctx, cfg, q) }()
	t.Cleanup(func() { rp.stop(t) })
	return rp
}

// stop is what SIGTERM does; it must return within seconds.
func (rp *runningPilot) stop(t *testing.T) {
	rp.cancel()
	select {
	case <-rp.done:
		rp.done <- nil
	case <-time.After(10 * time.Second):
		t.Errorf("pilot did not stop within 10 s of SIGTERM")
	}
}

// outputsOnce checks every task wrote its output, and counts re-runs.
func outputsOnce(t *testing.T, dir string, n int) (reruns int) {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	files := 0
	for _, e := range entries {
		if e.IsDir() {
			continue
		}
		files++
		b, _ := os.ReadFile(filepath.Join(dir, e.Name()))
		if lines := strings.Count(string(b), "\n"); lines > 1 {
			reruns += lines - 1
		}
	}
	if files != n {
		t.Fatalf("%d outputs for %d tasks", files, n)
	}
	return reruns
}

func TestPilotsElectOneMasterAndFinishARealQueueJob(t *testing.T) {
	r := startQueue(t)
	j := r.submit(t, 60, 4, `sleep 0.02; echo "$3" >> "$2"`)
	for i := 1; i <= 3; i++ {
		startPilot(t, fastPilot(r, fmt.Sprintf("%d", 100+i), 2), r.pilot)
	}
	got := r.waitJob(t, j.ID, 30*time.Second)
	if got.State != api.JobDone || got.Tasks.Done != 60 {
		t.Fatalf("job ended %s with %+v", got.State, got.Tasks)
	}
	if reruns := outputsOnce(t, got.OutputDir, 60); reruns != 0 {
		t.Errorf("%d tasks ran twice without any failure", reruns)
	}
	if _, err := os.Stat(filepath.Join(got.OutputDir, ".harvest", "logs")); err != nil {
		t.Errorf("no task logs under the output directory: %v", err)
	}
}

func TestAQueueRestartMidRunLosesAndDoublesNothing(t *testing.T) {
	r := startQueue(t)
	j := r.submit(t, 80, 2, `sleep 0.05; echo "$3" >> "$2"`)
	for i := 1; i <= 3; i++ {
		startPilot(t, fastPilot(r, fmt.Sprintf("%d", 300+i), 2), r.pilot)
	}
	r.waitDone(t, j.ID, 10*time.Second, "20 tasks done", func(j api.Job) bool { return j.Tasks.Done >= 20 })
	// Down for longer than the lease TTL, so the master's lease lapses and
	// its successor's first heartbeat requeues what no master holds (a
	// pull answered while the server closed is such a task). A shorter
	// outage (it was 700 ms against a 1 s TTL) let the same master go on
	// under its epoch, and such a task waited for the zombie timeout.
	r.restart(t, r.cfg.LeaseTTL+300*time.Millisecond)
	got := r.waitJob(t, j.ID, 30*time.Second)
	if got.State != api.JobDone || got.Tasks.Done != 80 {
		t.Fatalf("job ended %s with %+v", got.State, got.Tasks)
	}
	if got.Tasks.Done+got.Tasks.Failed+got.Tasks.Killed != got.Tasks.Total {
		t.Fatalf("counts do not add up: %+v", got.Tasks)
	}
	reruns := outputsOnce(t, got.OutputDir, 80)
	t.Logf("%d tasks ran twice across the restart (counted once)", reruns)
}

func TestMasterPilotStoppedMidRunAnotherPilotTakesOver(t *testing.T) {
	r := startQueue(t)
	j := r.submit(t, 80, 2, `sleep 0.1; echo "$3" >> "$2"`)
	first := startPilot(t, fastPilot(r, "200", 2), r.pilot)
	r.waitMaster(t, "200")
	for i := 1; i <= 2; i++ {
		startPilot(t, fastPilot(r, fmt.Sprintf("%d", 200+i), 2), r.pilot)
	}
	r.waitDone(t, j.ID, 10*time.Second, "20 tasks done", func(j api.Job) bool { return j.Tasks.Done >= 20 })
	first.stop(t) // scancel of the master's pilot
	got := r.waitJob(t, j.ID, 30*time.Second)
	if got.State != api.JobDone || got.Tasks.Done != 80 {
		t.Fatalf("job ended %s with %+v", got.State, got.Tasks)
	}
	outputsOnce(t, got.OutputDir, 80)
}

func TestPilotReachingItsDeadlineStopsAndItsTasksRunElsewhere(t *testing.T) {
	r := startQueue(t)
	j := r.submit(t, 60, 2, `sleep 0.1; echo "$3" >> "$2"`)
	startPilot(t, fastPilot(r, "400", 2), r.pilot)
	r.waitMaster(t, "400")
	short := fastPilot(r, "401", 4)
	short.Deadline = time.Now().Add(time.Second)
	short.StopBefore = 0
	sp := startPilot(t, short, r.pilot)
	select {
	case <-sp.done:
		sp.done <- nil
	case <-time.After(6 * time.Second):
		t.Fatal("the pilot ran far past its deadline")
	}
	got := r.waitJob(t, j.ID, 30*time.Second)
	if got.State != api.JobDone || got.Tasks.Done != 60 {
		t.Fatalf("job ended %s with %+v", got.State, got.Tasks)
	}
	outputsOnce(t, got.OutputDir, 60)
}
