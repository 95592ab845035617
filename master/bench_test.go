package master_test

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/harvest-hpc/harvest/master"
	"github.com/harvest-hpc/harvest/master/core"
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

// BenchmarkCheckpointCommit is the checkpoint's cost per task (one op =
// one task's life), without the master around it: commits of 16 tasks'
// ops each, as the bench's group commits carry them (16 tasks added, the
// 16 added before assigned, the 16 before those finished, the 16 before
// those deleted), each folded and written in its own transaction
// (rollback journal, synchronous FULL); b.N counts tasks. Its tasks look like the queue's: owner, paths, command.
// `go test -run X -bench CheckpointCommit -benchmem ./master/`
func BenchmarkCheckpointCommit(b *testing.B) {
	cp, _, err := master.OpenCheckpoint(b.TempDir(), 1, master.DefaultJournal)
	if err != nil {
		b.Fatal(err)
	}
	defer cp.Close()
	const group = 16
	task := func(id int64) *pilotproto.Task {
		return &pilotproto.Task{ID: id, JobID: id%1000 + 1, Owner: "user42", Attempt: 1, Name: fmt.Sprintf("entry-%d", id),
			Input: fmt.Sprintf("/data/in/entry-%d", id), Output: fmt.Sprintf("/data/out/job-%d/entry-%d.out", id%1000+1, id),
			OutputDir: fmt.Sprintf("/data/out/job-%d", id%1000+1), Command: []string{"/bin/process", "{input}", "{output}"}, BatchSize: 100, Cores: 1}
	}
	// Built before the clock starts: the figure is the checkpoint's alone.
	var commits [][]core.Op
	for first := int64(1); first <= int64(b.N); first += group {
		ops := make([]core.Op, 0, 4*group)
		for id := first; id < first+group; id++ {
			ref := func(back int64) pilotproto.TaskRef { return pilotproto.TaskRef{TaskID: id - back*group, Attempt: 1} }
			ops = append(ops, core.Op{Kind: core.OpAdd, Ref: ref(0), Task: task(id)})
			if id > group {
				ops = append(ops, core.Op{Kind: core.OpAssign, Ref: ref(1), Worker: "worker-3", Batch: id / 2})
			}
			if id > 2*group {
				ops = append(ops, core.Op{Kind: core.OpFinish, Ref: ref(2), Result: &pilotproto.Result{TaskID: id - 2*group, Attempt: 1,
					Status: pilotproto.StatusDone, StartedAt: 1_790_000_000_000 + id, DurationMS: 3, Pilot: "pilot-1"}})
			}
			if id > 3*group {
				ops = append(ops, core.Op{Kind: core.OpDelete, Ref: ref(3)})
			}
		}
		commits = append(commits, ops)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for _, ops := range commits {
		if err := cp.Commit(ops); err != nil {
			b.Fatal(err)
		}
	}
}
