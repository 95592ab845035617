package master_test

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/harvest-hpc/harvest/master"
	"github.com/harvest-hpc/harvest/pilotproto"
	"github.com/harvest-hpc/harvest/workerproto"
)

// BenchmarkMasterCorePerTask is the master's own cost per task without
// HTTP: checkpointed pull, batch hand-out, result, report and delete, for
// the tasks of one job (batches of 100) and of 1,000 jobs interleaved, as
// the queue's fair share hands them out (batches of one).
// `go test -bench MasterCore ./master/` (the HTTP path: harvest bench dispatch).
func BenchmarkMasterCorePerTask(b *testing.B) {
	for _, jobs := range []int64{1, 1000} {
		b.Run(fmt.Sprintf("jobs=%d", jobs), func(b *testing.B) { benchMasterCore(b, jobs) })
	}
}

func benchMasterCore(b *testing.B, jobs int64) {
	var mu sync.Mutex
	next := int64(0)
	f := &FakeQueue{PullFunc: func(r pilotproto.PullRequest) (pilotproto.PullResponse, error) {
		mu.Lock()
		defer mu.Unlock()
		out := make([]pilotproto.Task, r.Max)
		for i := range out {
			next++
			out[i] = pilotproto.Task{ID: next, Attempt: 1, JobID: next%jobs + 1, Command: []string{"true"}, BatchSize: 100}
		}
		return pilotproto.PullResponse{Tasks: out}, nil
	}}
	cfg := fastMasterConfig(b.TempDir(), "p1", 1)
	cfg.CommitDelay = 0 // one client waiting on each answer: nothing to group, the delay would be idle time
	m, err := master.New(cfg, f)
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- m.Run(ctx) }()
	defer func() { cancel(); <-done }()
	if _, err := m.Register(context.Background(), workerproto.RegisterRequest{WorkerID: "w", Slots: 100, Capacity: 200}); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for n := 0; n < b.N; {
		resp, err := m.Pull(ctx, workerproto.PullRequest{WorkerID: "w", Free: 200, WaitMS: 1000})
		if err != nil {
			b.Fatal(err)
		}
		var res []pilotproto.Result
		for _, bt := range resp.Batches {
			for _, t := range bt.Tasks {
				res = append(res, pilotproto.Result{TaskID: t.ID, Attempt: t.Attempt, Status: pilotproto.StatusDone})
			}
		}
		if _, err := m.Results(context.Background(), workerproto.ResultsRequest{WorkerID: "w", Results: res}); err != nil {
			b.Fatal(err)
		}
		n += len(res)
	}
}
