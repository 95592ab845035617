package master_test

import (
	"context"
	"reflect"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/harvest-hpc/harvest/master"
	"github.com/harvest-hpc/harvest/pilotproto"
	"github.com/harvest-hpc/harvest/workerproto"
)

// TestNewMasterKeepsTheBatchesOfWorkersThatComeBack walks the restore
// rules one registration at a time, on the checkpoint a first master left.
func TestNewMasterKeepsTheBatchesOfWorkersThatComeBack(t *testing.T) {
	dir := t.TempDir()
	six := tasks(1, 6, 3)
	for i := range six {
		six[i].Attempt = 1
	}
	pulled := false
	f := &FakeQueue{PullFunc: func(pilotproto.PullRequest) (pilotproto.PullResponse, error) {
		if pulled {
			return pilotproto.PullResponse{}, nil
		}
		pulled = true
		return pilotproto.PullResponse{Tasks: six}, nil
	}}
	a, err := master.New(fastMasterConfig(dir, "pA", 1), f)
	if err != nil {
		t.Fatal(err)
	}
	actx, astop := context.WithCancel(context.Background())
	adone := make(chan error, 1)
	go func() { adone <- a.Run(actx) }()
	if _, err := a.Register(workerproto.RegisterRequest{WorkerID: "w1", Slots: 6, Capacity: 6}); err != nil {
		t.Fatal(err)
	}
	resp, err := a.Pull(context.Background(), workerproto.PullRequest{WorkerID: "w1", Free: 6, WaitMS: 2000})
	if err != nil || len(resp.Batches) != 2 {
		t.Fatalf("w1 should get two batches of 3: %+v %v", resp, err)
	}

	// Master A is gone (its process would be dead); B takes the checkpoint.
	b, err := master.New(fastMasterConfig(dir, "pB", 2), &FakeQueue{})
	if err != nil {
		t.Fatal(err)
	}
	if st := b.Stats(); st.Assigned != 6 || st.Pending != 0 {
		t.Fatalf("restored %+v, want the 6 tasks in flight", st)
	}
	ref := func(i int) pilotproto.TaskRef { return pilotproto.TaskRef{TaskID: six[i].ID, Attempt: 1} }
	steps := []struct {
		name                  string
		req                   workerproto.RegisterRequest
		wantDrop              []pilotproto.TaskRef
		wantAssigned, wantPen int
	}{
		{
			name: "the worker that comes back keeps what it holds or finished; its other tasks are requeued; unknown ones are dropped",
			req: workerproto.RegisterRequest{WorkerID: "w1", Slots: 6, Capacity: 6,
				Held: []pilotproto.TaskRef{ref(0), ref(1), {TaskID: 999, Attempt: 1}}, Finished: []pilotproto.TaskRef{ref(2)}},
			wantDrop: []pilotproto.TaskRef{{TaskID: 999, Attempt: 1}}, wantAssigned: 3, wantPen: 3,
		},
		{
			name:         "a worker still running a task that was requeued keeps it",
			req:          workerproto.RegisterRequest{WorkerID: "w2", Slots: 1, Capacity: 2, Held: []pilotproto.TaskRef{ref(3)}},
			wantAssigned: 4, wantPen: 2,
		},
		{
			name:     "a worker holding a task another worker owns drops it",
			req:      workerproto.RegisterRequest{WorkerID: "w3", Slots: 1, Capacity: 2, Held: []pilotproto.TaskRef{ref(0)}},
			wantDrop: []pilotproto.TaskRef{ref(0)}, wantAssigned: 4, wantPen: 2,
		},
	}
	for _, s := range steps {
		t.Run(s.name, func(t *testing.T) {
			resp, err := b.Register(s.req)
			if err != nil {
				t.Fatal(err)
			}
			if resp.Epoch != 2 {
				t.Errorf("epoch %d, want 2", resp.Epoch)
			}
			sort.Slice(resp.Drop, func(i, j int) bool { return resp.Drop[i].TaskID < resp.Drop[j].TaskID })
			if !reflect.DeepEqual(resp.Drop, s.wantDrop) {
				t.Errorf("drop %v, want %v", resp.Drop, s.wantDrop)
			}
			if st := b.Stats(); st.Assigned != s.wantAssigned || st.Pending != s.wantPen {
				t.Errorf("after registration %+v, want %d assigned and %d pending", st, s.wantAssigned, s.wantPen)
			}
		})
	}

	// A, deposed, can no longer write: its run ends with a fencing error.
	astop()
	select {
	case err := <-adone:
		if err == nil {
			t.Error("the deposed master stopped as if nothing happened")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the deposed master did not stop")
	}
}

// fakeClock is a settable clock.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *fakeClock) Add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

func TestABatchWhoseAnswerNeverReachedTheWorkerIsRequeued(t *testing.T) {
	clock := &fakeClock{t: time.Unix(1_800_000_000, 0)}
	cfg := fastMasterConfig(t.TempDir(), "p1", 1)
	cfg.Now = clock.Now
	m, err := master.New(cfg, &FakeQueue{})
	if err != nil {
		t.Fatal(err)
	}
	// Feed tasks the way the pull loop does, without running the loops:
	// this test drives the master's clock alone.
	six := tasks(1, 6, 3)
	for i := range six {
		six[i].Attempt = 1
	}
	if err := master.AddPulledForTest(m, six); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Register(workerproto.RegisterRequest{WorkerID: "w", Slots: 3, Capacity: 3}); err != nil {
		t.Fatal(err)
	}
	resp, err := m.Pull(context.Background(), workerproto.PullRequest{WorkerID: "w", Free: 3, WaitMS: 100})
	if err != nil || len(resp.Batches) != 1 {
		t.Fatalf("pull: %+v %v", resp, err)
	}
	lost := resp.Batches[0].Tasks // the answer is lost on the way
	steps := []struct {
		name         string
		advance      time.Duration
		held         []pilotproto.TaskRef
		wantAssigned int
	}{
		{"a heartbeat right after the hand-out does not requeue a batch still on its way", time.Second, nil, 3},
		{"a heartbeat long after the hand-out requeues the tasks the worker does not hold",
			cfg.PullWait + cfg.WorkerTimeout + time.Second, []pilotproto.TaskRef{{TaskID: lost[0].ID, Attempt: 1}}, 1},
	}
	for _, s := range steps {
		t.Run(s.name, func(t *testing.T) {
			clock.Add(s.advance)
			if _, err := m.Heartbeat(workerproto.HeartbeatRequest{WorkerID: "w", Held: s.held, Complete: true}); err != nil {
				t.Fatal(err)
			}
			if st := m.Stats(); st.Assigned != s.wantAssigned {
				t.Fatalf("%+v, want %d assigned", st, s.wantAssigned)
			}
		})
	}
}
