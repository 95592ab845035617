package master_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/harvest-hpc/harvest/capacity"
	"github.com/harvest-hpc/harvest/master"
	"github.com/harvest-hpc/harvest/pilotproto"
	"github.com/harvest-hpc/harvest/workerproto"
)

// recs records the recommendations a master sends and wakes a waiter on each.
type recs struct {
	mu   sync.Mutex
	got  []pilotproto.RecommendationRequest
	wake chan struct{}
}

func newRecs() *recs { return &recs{wake: make(chan struct{}, 1)} }

func (r *recs) add(q pilotproto.RecommendationRequest) error {
	r.mu.Lock()
	r.got = append(r.got, q)
	r.mu.Unlock()
	select {
	case r.wake <- struct{}{}:
	default:
	}
	return nil
}

func (r *recs) all() []pilotproto.RecommendationRequest {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]pilotproto.RecommendationRequest(nil), r.got...)
}

// await waits until cond holds for the recommendations so far.
func (r *recs) await(t *testing.T, what string, cond func([]pilotproto.RecommendationRequest) bool) {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for !cond(r.all()) {
		select {
		case <-r.wake:
		case <-deadline:
			rs := r.all()
			t.Fatalf("%s: last of %d recommendations %+v", what, len(rs), rs[len(rs)-1:])
		}
	}
}

// TestCapacityRuleContinuesAcrossAHandOver plays a hand-over of the
// master: the first master's capacity rule judges 2 nodes good (cap 4),
// the second master, on the same state directory, must start from that
// cap, not from the initial size, and keep the samples the first one had
// not judged yet.
func TestCapacityRuleContinuesAcrossAHandOver(t *testing.T) {
	dir := t.TempDir()
	capCfg := capacity.Config{Factor: 1.25, MinSamples: 3, HoldRounds: 30, InitialSize: 2, MinSize: 1}
	a, ra := runCapMaster(t, dir, "pA", 1, capCfg, tasks(1, 40, 1), nil)
	register := func(m *master.Master, ws ...string) { registerPilots(t, m, ws...) }
	run := func(m *master.Master, ws ...string) {
		t.Helper()
		for _, w := range ws {
			runTasks(t, m, w, 1, 1000)
		}
	}
	register(a, "w1", "w2")
	run(a, "w1", "w2", "w1", "w2") // 4 samples at size 2: judged good
	ra.await(t, "master A judges 2 nodes good", func(rs []pilotproto.RecommendationRequest) bool {
		return len(rs) > 0 && rs[len(rs)-1].MaxNodes == 4
	})
	// Two samples at size 4, fewer than the 3 that judge a size: A has
	// not judged them when it goes; B must not start them over.
	register(a, "w3", "w4")
	run(a, "w3", "w4")
	n := len(ra.all())
	ra.await(t, "two more heartbeats of A", func(rs []pilotproto.RecommendationRequest) bool { return len(rs) >= n+2 })
	if last := ra.all()[len(ra.all())-1]; last.MaxNodes != 4 {
		t.Fatalf("A judged size 4 on 2 samples: cap %d", last.MaxNodes)
	}

	// Master A is gone; B takes the state directory.
	b, rb := runCapMaster(t, dir, "pB", 2, capCfg, nil, nil)
	rb.await(t, "B's first recommendation", func(rs []pilotproto.RecommendationRequest) bool { return len(rs) > 0 })
	if first := rb.all()[0]; first.MaxNodes != 4 || first.CapacityPhase != string(capacity.Grow) {
		t.Fatalf("B's first recommendation caps the pool at %d (%s), want 4 (grow), where A left it", first.MaxNodes, first.CapacityPhase)
	}
	// The four pilots' workers come back to B; one more task at size 4
	// completes A's two: size 4 is judged good and the cap doubles.
	register(b, "w1", "w2", "w3", "w4")
	run(b, "w1")
	rb.await(t, "B judges 4 nodes good on A's samples and its own", func(rs []pilotproto.RecommendationRequest) bool {
		return rs[len(rs)-1].MaxNodes == 8
	})
}

// registerPilots registers each of ws, a 1-slot worker of pilot "p-"+w.
func registerPilots(t *testing.T, m *master.Master, ws ...string) {
	t.Helper()
	for _, w := range ws {
		if _, err := m.Register(context.Background(), workerproto.RegisterRequest{WorkerID: w, PilotID: "p-" + w, Slots: 1, Capacity: 1}); err != nil {
			t.Fatal(err)
		}
	}
}

// runTasks has worker w pull n tasks one by one from m and report each
// done after ms milliseconds.
func runTasks(t *testing.T, m *master.Master, w string, n int, ms int64) {
	t.Helper()
	ctx := context.Background()
	for i := 0; i < n; i++ {
		resp, err := m.Pull(ctx, workerproto.PullRequest{WorkerID: w, Free: 1, WaitMS: 2000})
		if err != nil || len(resp.Batches) != 1 {
			t.Fatalf("pull of %s: %+v %v", w, resp, err)
		}
		var res []pilotproto.Result
		for _, tk := range resp.Batches[0].Tasks {
			res = append(res, pilotproto.Result{TaskID: tk.ID, JobID: tk.JobID, Attempt: tk.Attempt,
				Status: pilotproto.StatusDone, DurationMS: ms, Pilot: "p-" + w})
		}
		if _, err := m.Results(ctx, workerproto.ResultsRequest{WorkerID: w, Results: res}); err != nil {
			t.Fatal(err)
		}
	}
}

// runCapMaster runs a master of epoch on dir with the capacity rule capCfg,
// which pulls ts once, until the test ends; it returns
// the recommendations it sends.
func runCapMaster(t *testing.T, dir, pilot string, epoch int64, capCfg capacity.Config, ts []pilotproto.Task, tweak func(*master.Config)) (*master.Master, *recs) {
	t.Helper()
	var mu sync.Mutex
	r := newRecs()
	f := &FakeQueue{
		PullFunc: func(pilotproto.PullRequest) (pilotproto.PullResponse, error) {
			mu.Lock()
			defer mu.Unlock()
			out := ts
			ts = nil
			return pilotproto.PullResponse{Tasks: out}, nil
		},
		RecommendFunc: r.add,
	}
	cfg := fastMasterConfig(dir, pilot, epoch)
	cfg.Capacity = &capCfg
	if tweak != nil {
		tweak(&cfg)
	}
	m, err := master.New(cfg, f)
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- m.Run(ctx) }()
	t.Cleanup(func() { stop(); <-done })
	return m, r
}

// TestWorkersComingBackAfterAHandOverAreNotSmallPools: after a hand-over
// the workers re-register one by one while their pilots go on running
// what they held. The first back is not a pool of 1 node: tasks it takes
// then run as slow as in the whole pool, and judged at size 1 they would
// make 1 node look degraded and collapse the cap the new master restored.
func TestWorkersComingBackAfterAHandOverAreNotSmallPools(t *testing.T) {
	dir := t.TempDir()
	capCfg := capacity.Config{Factor: 1.25, MinSamples: 3, HoldRounds: 30, InitialSize: 2, MinSize: 1}
	a, ra := runCapMaster(t, dir, "pA", 1, capCfg, tasks(1, 40, 1), nil)
	ws := []string{"w1", "w2", "w3", "w4"}
	registerPilots(t, a, ws[:2]...)
	for range 2 {
		runTasks(t, a, "w1", 1, 1000)
		runTasks(t, a, "w2", 1, 1000)
	}
	ra.await(t, "master A judges 2 nodes good", func(rs []pilotproto.RecommendationRequest) bool {
		return len(rs) > 0 && rs[len(rs)-1].MaxNodes == 4
	})
	// Four pilots, each running a task when A goes.
	registerPilots(t, a, ws[2:]...)
	held := map[string][]pilotproto.TaskRef{}
	for _, w := range ws {
		resp, err := a.Pull(context.Background(), workerproto.PullRequest{WorkerID: w, Free: 1, WaitMS: 2000})
		if err != nil || len(resp.Batches) != 1 {
			t.Fatalf("pull of %s: %+v %v", w, resp, err)
		}
		for _, tk := range resp.Batches[0].Tasks {
			held[w] = append(held[w], pilotproto.TaskRef{TaskID: tk.ID, Attempt: tk.Attempt})
		}
	}
	n := len(ra.all())
	ra.await(t, "another heartbeat of A", func(rs []pilotproto.RecommendationRequest) bool { return len(rs) >= n+2 })

	b, rb := runCapMaster(t, dir, "pB", 2, capCfg, nil, func(c *master.Config) { c.ReconnectGrace = time.Minute })
	back := func(w string) {
		t.Helper()
		req := workerproto.RegisterRequest{WorkerID: w, PilotID: "p-" + w, Slots: 2, Capacity: 2, Held: held[w]}
		if _, err := b.Register(context.Background(), req); err != nil {
			t.Fatal(err)
		}
	}
	// w1 is back first and runs three tasks while the other three pilots
	// still run theirs: 2 s each, twice A's 1 s baseline (the contention
	// of the whole pool, which the registered count of 1 does not see).
	back("w1")
	runTasks(t, b, "w1", 3, 2000)
	for _, w := range ws[1:] {
		back(w)
	}
	n = len(rb.all())
	rb.await(t, "two heartbeats of B after the pool is back", func(rs []pilotproto.RecommendationRequest) bool { return len(rs) >= n+2 })
	if last := rb.all()[len(rb.all())-1]; last.MaxNodes != 4 {
		t.Fatalf("after the workers came back B caps the pool at %d (%s), want A's 4", last.MaxNodes, last.CapacityPhase)
	}
}
