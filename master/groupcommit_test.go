package master_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/harvest-hpc/harvest/master"
	"github.com/harvest-hpc/harvest/master/core"
	"github.com/harvest-hpc/harvest/pilotproto"
	"github.com/harvest-hpc/harvest/workerproto"
)

// Results that arrive together share one checkpoint transaction (group
// commit), and still every worker hears of its results only once they
// are in the checkpoint.
func TestGroupedCommitsStoreResultsBeforeTheWorkersHearOfThem(t *testing.T) {
	const workers = 8
	var mu sync.Mutex
	next := int64(0)
	f := &FakeQueue{
		PullFunc: func(r pilotproto.PullRequest) (pilotproto.PullResponse, error) {
			mu.Lock()
			defer mu.Unlock()
			var out []pilotproto.Task
			for ; next < workers && len(out) < r.Max; next++ {
				out = append(out, pilotproto.Task{ID: next + 1, Attempt: 1, JobID: next%3 + 1, Command: []string{"true"}, BatchSize: 1})
			}
			return pilotproto.PullResponse{Tasks: out}, nil
		},
		// The queue is down: acknowledged results stay in the checkpoint.
		ResultsFunc: func(pilotproto.ResultsRequest) (pilotproto.ResultsResponse, error) {
			return pilotproto.ResultsResponse{}, errors.New("queue down")
		},
	}
	cfg := fastMasterConfig(t.TempDir(), "p1", 1)
	cfg.HeartbeatInterval = time.Hour // no capacity ops between the results
	cfg.CommitDelay = 200 * time.Millisecond
	cfg.WorkerTimeout = time.Minute // the workers here never beat: not lost while the lock is held
	m, err := master.New(cfg, f)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- m.Run(ctx) }()
	defer func() { cancel(); <-done }()
	held := map[string][]pilotproto.Task{}
	for i := range workers {
		id := fmt.Sprintf("w%d", i)
		if _, err := m.Register(ctx, workerproto.RegisterRequest{WorkerID: id, Slots: 1, Capacity: 1}); err != nil {
			t.Fatal(err)
		}
		resp, err := m.Pull(ctx, workerproto.PullRequest{WorkerID: id, Free: 1, WaitMS: 5000})
		if err != nil || len(resp.Batches) != 1 || len(resp.Batches[0].Tasks) != 1 {
			t.Fatalf("pull of %s: %+v %v", id, resp, err)
		}
		held[id] = resp.Batches[0].Tasks
	}
	// The checkpoint is slow (a shared file system): the master's commit
	// waits, and so must the answers.
	open := master.Gate(m)
	before := master.Commits(m)
	answered := make(chan error, workers)
	for id, tasks := range held {
		go func() {
			res := []pilotproto.Result{{TaskID: tasks[0].ID, Attempt: 1, Status: pilotproto.StatusDone}}
			_, err := m.Results(ctx, workerproto.ResultsRequest{WorkerID: id, Results: res})
			answered <- err
		}()
	}
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	deadline := time.After(10 * time.Second)
	for master.Commits(m) == before { // the commit of the results has begun, and waits
		select {
		case <-tick.C:
		case <-deadline:
			t.Fatal("the master never committed the results")
		}
	}
	if n := len(answered); n > 0 {
		t.Fatalf("%d workers heard of their results while the checkpoint could not be written", n)
	}
	open()
	for range workers {
		if err := <-answered; err != nil {
			t.Fatal(err)
		}
	}
	if n := master.Commits(m) - before; n >= workers {
		t.Errorf("%d results sent together took %d transactions: not grouped", workers, n)
	}
	// Every worker has its answer: its result must be in the checkpoint,
	// as the next master finds it.
	_, rows := restore(t, cfg.CheckpointDir, 2)
	final := 0
	for _, r := range rows {
		if r.State == core.StateFinal && r.Result != nil && r.Result.Status == pilotproto.StatusDone {
			final++
		}
	}
	if final != workers {
		t.Fatalf("%d results acknowledged to workers, %d in the checkpoint (%d rows)", workers, final, len(rows))
	}
}
