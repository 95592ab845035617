package master_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/harvest-hpc/harvest/master"
	"github.com/harvest-hpc/harvest/pilotproto"
	"github.com/harvest-hpc/harvest/workerproto"
)

// A lease renewal waited behind checkpoint commits: it was taken into the
// group of effects committed next, and went out only once the commit in
// flight and that group's own had ended. On a slow shared file system
// (FUSE) two commits outlasted the lease, and the master lost it under
// load. A renewal promises nothing about the checkpoint, so it goes out
// at once; the commit here is held open by the test and the lease must
// still be renewed, while the worker waiting on the commit hears nothing.
func TestLeaseIsRenewedWhileACheckpointCommitIsHeld(t *testing.T) {
	renewed := make(chan pilotproto.LeaseRequest, 64)
	f := &FakeQueue{
		LeaseFunc: func(r pilotproto.LeaseRequest) (pilotproto.Lease, error) {
			select {
			case renewed <- r:
			default:
			}
			return pilotproto.Lease{Granted: true, Epoch: r.Epoch, TTLMS: 4000}, nil
		},
		PullFunc: func(r pilotproto.PullRequest) (pilotproto.PullResponse, error) {
			return pilotproto.PullResponse{Tasks: []pilotproto.Task{{ID: 1, Attempt: 1, JobID: 1, Command: []string{"true"}, BatchSize: 1}}}, nil
		},
	}
	cfg := fastMasterConfig(t.TempDir(), "p1", 1)
	cfg.WorkerTimeout = time.Minute // the worker never beats while the commit is held
	m, err := master.New(cfg, f)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- m.Run(ctx) }()
	if _, err := m.Register(ctx, workerproto.RegisterRequest{WorkerID: "w", Slots: 1, Capacity: 1}); err != nil {
		t.Fatal(err)
	}
	resp, err := m.Pull(ctx, workerproto.PullRequest{WorkerID: "w", Free: 1, WaitMS: 5000})
	if err != nil || len(resp.Batches) != 1 {
		t.Fatalf("pull: %+v %v", resp, err)
	}
	open := sync.OnceFunc(master.Gate(m))
	defer func() { open(); cancel(); <-done }()
	before := master.Commits(m)
	answered := make(chan error, 1)
	go func() {
		res := []pilotproto.Result{{TaskID: resp.Batches[0].Tasks[0].ID, Attempt: 1, Status: pilotproto.StatusDone}}
		_, err := m.Results(ctx, workerproto.ResultsRequest{WorkerID: "w", Results: res})
		answered <- err
	}()
	deadline := time.After(20 * time.Second)
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	for master.Commits(m) == before { // the results' commit has begun and is held
		select {
		case <-tick.C:
		case <-deadline:
			t.Fatal("the master never committed the results")
		}
	}
	for len(renewed) > 0 { // renewals sent before the commit began
		<-renewed
	}
	const want = 3 // a TTL's worth: renewals go every TTL/3 at most
	for n := 0; n < want; {
		select {
		case r := <-renewed:
			if r.Release {
				t.Fatalf("the lease was released during the commit: %+v", r)
			}
			n++
		case err := <-answered:
			t.Fatalf("the worker heard of its result (%v) while its commit was held", err)
		case <-deadline:
			t.Fatalf("%d lease renewals while a checkpoint commit was held, want %d: renewals wait behind commits", n, want)
		}
	}
	if len(answered) > 0 {
		t.Fatal("the worker heard of its result while its commit was held")
	}
	open()
	if err := <-answered; err != nil {
		t.Fatal(err)
	}
}
