package master_test

import (
	"context"
	"net"
	"reflect"
	"sort"
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
	if _, err := a.Register(context.Background(), workerproto.RegisterRequest{WorkerID: "w1", Slots: 6, Capacity: 6}); err != nil {
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
	bctx, bstop := context.WithCancel(context.Background())
	defer bstop()
	go b.Run(bctx)
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
			resp, err := b.Register(context.Background(), s.req)
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

// handOut runs a master of epoch 1 on dir that pulls ts once, registers
// the workers and hands each one batch (of ts's batch size); it is left
// running until the test ends, as a deposed master would (the next
// epoch's master fences it). It returns what each worker holds.
func handOut(t *testing.T, dir string, ts []pilotproto.Task, workers []workerproto.RegisterRequest) map[string][]pilotproto.TaskRef {
	t.Helper()
	pulled := false
	f := &FakeQueue{PullFunc: func(pilotproto.PullRequest) (pilotproto.PullResponse, error) {
		if pulled {
			return pilotproto.PullResponse{}, nil
		}
		pulled = true
		return pilotproto.PullResponse{Tasks: ts}, nil
	}}
	a, err := master.New(fastMasterConfig(dir, "pA", 1), f)
	if err != nil {
		t.Fatal(err)
	}
	actx, astop := context.WithCancel(context.Background())
	t.Cleanup(astop)
	go a.Run(actx)
	held := map[string][]pilotproto.TaskRef{}
	for _, w := range workers {
		if _, err := a.Register(context.Background(), w); err != nil {
			t.Fatal(err)
		}
		resp, err := a.Pull(context.Background(), workerproto.PullRequest{WorkerID: w.WorkerID, Free: w.Slots, WaitMS: 2000})
		if err != nil || len(resp.Batches) != 1 {
			t.Fatalf("%s should get one batch: %+v %v", w.WorkerID, resp, err)
		}
		for _, tk := range resp.Batches[0].Tasks {
			held[w.WorkerID] = append(held[w.WorkerID], pilotproto.TaskRef{TaskID: tk.ID, Attempt: tk.Attempt})
		}
	}
	return held
}

func tasks(job int64, n, batch int) []pilotproto.Task {
	out := make([]pilotproto.Task, n)
	for i := range out {
		out[i] = pilotproto.Task{ID: job*100000 + int64(i) + 1, JobID: job, Attempt: 1, Command: []string{"true"}, BatchSize: batch}
	}
	return out
}

// TestNewMasterRequeuesAtOnceTheBatchesOfAPilotThatIsGone: a new master
// probes where the restored workers' pilots listen. The batch of a worker
// whose pilot's process is gone (nothing listens: the killed master's own
// side worker) goes back to the queue as interrupted at once; the batch
// of a worker whose pilot still listens waits for it, here for a reconnect
// grace of a minute. Without the probe both wait the minute.
func TestNewMasterRequeuesAtOnceTheBatchesOfAPilotThatIsGone(t *testing.T) {
	dir := t.TempDir()
	six := tasks(1, 6, 3)
	alive, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer alive.Close()
	dead, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	deadURL := "http://" + dead.Addr().String()
	dead.Close() // the pilot's process is gone: its port refuses connections
	handOut(t, dir, six, []workerproto.RegisterRequest{
		{WorkerID: "gone", PilotID: "pA", Slots: 3, Capacity: 3, Address: deadURL},
		{WorkerID: "slow", PilotID: "pS", Slots: 3, Capacity: 3, Address: "http://" + alive.Addr().String()},
	})

	// A is killed; B restores its checkpoint with a minute of grace.
	reported := make(chan pilotproto.ResultsRequest, 10)
	cfg := fastMasterConfig(dir, "pB", 2)
	cfg.ReconnectGrace = time.Minute
	b, err := master.New(cfg, &FakeQueue{ResultsFunc: func(r pilotproto.ResultsRequest) (pilotproto.ResultsResponse, error) {
		reported <- r
		return pilotproto.ResultsResponse{Applied: len(r.Results)}, nil
	}})
	if err != nil {
		t.Fatal(err)
	}
	bctx, bstop := context.WithCancel(context.Background())
	defer bstop()
	go b.Run(bctx)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := b.WaitFor(ctx, func(s master.Stats) bool { return s.Assigned == 3 && s.Unreported+s.Reported == 3 }); err != nil {
		t.Fatalf("the gone pilot's batch is still in flight: %v", err)
	}
	select {
	case r := <-reported:
		for _, res := range r.Results {
			if res.Status != pilotproto.StatusInterrupted || res.TaskID > six[2].ID {
				t.Errorf("reported %+v, want the gone worker's tasks 1-3 as interrupted", res)
			}
		}
	case <-ctx.Done():
		t.Fatal("nothing reported to the queue")
	}
	// The slow worker comes back and keeps its batch.
	resp, err := b.Register(context.Background(), workerproto.RegisterRequest{WorkerID: "slow", PilotID: "pS", Slots: 3, Capacity: 3,
		Held: []pilotproto.TaskRef{{TaskID: six[3].ID, Attempt: 1}, {TaskID: six[4].ID, Attempt: 1}, {TaskID: six[5].ID, Attempt: 1}}})
	if err != nil || len(resp.Drop) != 0 {
		t.Fatalf("the slow worker's registration: %+v %v, want its batch kept", resp, err)
	}
	if st := b.Stats(); st.Assigned != 3 {
		t.Errorf("%+v, want the slow worker's 3 tasks in flight", st)
	}
}
