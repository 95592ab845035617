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

// Results the queue acknowledged are forgotten without a transaction of
// their own (a crash before the next commit costs a duplicate report, no
// more): they stay in the file until the next commit that must be made,
// here the stop's, takes them along.
func TestAcknowledgedResultsWaitForTheNextCommit(t *testing.T) {
	var once sync.Once
	f := &FakeQueue{PullFunc: func(r pilotproto.PullRequest) (pilotproto.PullResponse, error) {
		var out []pilotproto.Task
		once.Do(func() {
			for id := int64(1); id <= 2; id++ {
				out = append(out, pilotproto.Task{ID: id, Attempt: 1, JobID: 1, Command: []string{"true"}, BatchSize: 2})
			}
		})
		return pilotproto.PullResponse{Tasks: out}, nil
	}}
	cfg := fastMasterConfig(t.TempDir(), "p1", 1)
	cfg.HeartbeatInterval = time.Hour // no capacity ops between the steps
	cfg.ReportDelay = 0
	m, err := master.New(cfg, f)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- m.Run(ctx) }()
	if _, err := m.Register(ctx, workerproto.RegisterRequest{WorkerID: "w", Slots: 1, Capacity: 2}); err != nil {
		t.Fatal(err)
	}
	resp, err := m.Pull(ctx, workerproto.PullRequest{WorkerID: "w", Free: 2, WaitMS: 5000})
	if err != nil || len(resp.Batches) != 1 || len(resp.Batches[0].Tasks) != 2 {
		t.Fatalf("pull: %+v %v", resp, err)
	}
	res := []pilotproto.Result{{TaskID: 1, Attempt: 1, Status: pilotproto.StatusDone}, {TaskID: 2, Attempt: 1, Status: pilotproto.StatusDone}}
	if _, err := m.Results(ctx, workerproto.ResultsRequest{WorkerID: "w", Results: res}); err != nil {
		t.Fatal(err)
	}
	stored := master.Commits(m) // the results are on disk: the worker heard so
	wait, stop := context.WithTimeout(ctx, 10*time.Second)
	defer stop()
	if err := m.WaitFor(wait, func(s master.Stats) bool { return s.Reported == 2 }); err != nil {
		t.Fatal(err)
	}
	if n := master.Commits(m) - stored; n != 0 {
		t.Errorf("the acknowledgement took %d transactions of its own, want none", n)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if _, rows := restore(t, cfg.CheckpointDir, 2); len(rows) != 0 {
		t.Errorf("after the stop the checkpoint holds %d acknowledged results, want none: %+v", len(rows), rows)
	}
}
