package master_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
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
// (rollback journal, synchronous FULL); b.N counts tasks. Its tasks look
// like the queue's (id job<<32|entry, owner, paths, command). grant=16:
// each commit's 16 tasks are one job's grant (a range of 16 entries);
// grant=1: each task is another job's (1,000 users, one entry each).
// Besides the time it reports what the process handed to write(2) and
// pwrite(2) per task (file and journal: /proc/self/io's wchar and syscw;
// Linux only).
// `go test -run X -bench CheckpointCommit -benchmem ./master/`
func BenchmarkCheckpointCommit(b *testing.B) {
	for _, per := range []int64{16, 1} {
		b.Run(fmt.Sprintf("grant=%d", per), func(b *testing.B) { benchCommit(b, per) })
	}
}

// benchTask is the id'th task of the bench, per entries to a grant.
func benchTask(id, per int64) *pilotproto.Task {
	job := (id-1)/per + 1
	entry := (id - 1) % per
	tid := job<<32 | entry
	name := fmt.Sprintf("entry-%d", entry)
	out := fmt.Sprintf("/data/out/job-%d", job)
	return &pilotproto.Task{ID: tid, JobID: job, Owner: fmt.Sprintf("user%d", job%1000), Attempt: 1, Name: name,
		Input: "/data/in/" + name, Output: out + "/" + name, OutputDir: out, Command: []string{"/bin/process", "{input}", "{output}"},
		Env: pilotproto.TaskEnv(job, tid), BatchSize: 100, Cores: 1}
}

// lifeOps are the ops of tasks first..first+group-1 as the bench commits
// them: their adds, and the assign, finish and delete of the groups
// before.
func lifeOps(first, group, per int64) []core.Op {
	ops := make([]core.Op, 0, 4*group)
	for id := first; id < first+group; id++ {
		ref := func(back int64) pilotproto.TaskRef {
			return pilotproto.TaskRef{TaskID: benchTask(id-back*group, per).ID, Attempt: 1}
		}
		ops = append(ops, core.Op{Kind: core.OpAdd, Ref: ref(0), Task: benchTask(id, per)})
		if id > group {
			ops = append(ops, core.Op{Kind: core.OpAssign, Ref: ref(1), Worker: "worker-3", Batch: (id - group + group - 1) / group})
		}
		if id > 2*group {
			r := ref(2)
			ops = append(ops, core.Op{Kind: core.OpFinish, Ref: r, Result: &pilotproto.Result{TaskID: r.TaskID, Attempt: 1,
				Status: pilotproto.StatusDone, StartedAt: 1_790_000_000_000 + id, DurationMS: 3, Pilot: "pilot-1"}})
		}
		if id > 3*group {
			ops = append(ops, core.Op{Kind: core.OpDelete, Ref: ref(3)})
		}
	}
	return ops
}

// procIO reads the process's write counters (bytes, calls) from
// /proc/self/io.
func procIO(b *testing.B) (wchar, syscw int64) {
	raw, err := os.ReadFile("/proc/self/io")
	if err != nil {
		b.Skipf("no /proc/self/io: %v", err)
	}
	for _, line := range strings.Split(string(raw), "\n") {
		k, v, _ := strings.Cut(line, ": ")
		n, _ := strconv.ParseInt(v, 10, 64)
		switch k {
		case "wchar":
			wchar = n
		case "syscw":
			syscw = n
		}
	}
	return wchar, syscw
}

func benchCommit(b *testing.B, per int64) {
	cp, _, err := master.OpenCheckpoint(b.TempDir(), 1, master.DefaultJournal)
	if err != nil {
		b.Fatal(err)
	}
	defer cp.Close()
	const group = 16
	// Built before the clock starts: the figure is the checkpoint's alone.
	var commits [][]core.Op
	for first := int64(1); first <= int64(b.N); first += group {
		commits = append(commits, lifeOps(first, group, per))
	}
	b.ReportAllocs()
	w0, c0 := procIO(b)
	b.ResetTimer()
	for _, ops := range commits {
		if err := cp.Commit(ops); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	w1, c1 := procIO(b)
	b.ReportMetric(float64(w1-w0)/float64(b.N), "wbytes/task")
	b.ReportMetric(float64(c1-c0)/float64(b.N), "writes/task")
}

// BenchmarkCheckpointSize is the checkpoint file's size with 100,000
// tasks held: pending (just pulled), in flight (handed to workers in
// batches of 100), or done (results not yet acknowledged by the queue),
// in grants of 100 entries or of one (every task another job's). It is a
// size, not a time: run it with -benchtime 1x.
// `go test -run X -bench CheckpointSize -benchtime 1x ./master/`
func BenchmarkCheckpointSize(b *testing.B) {
	const n = 100_000
	for _, per := range []int64{100, 1} {
		for _, st := range []string{"pending", "in-flight", "done"} {
			b.Run(fmt.Sprintf("grant=%d/%s", per, st), func(b *testing.B) {
				for range b.N {
					dir := b.TempDir()
					cp, _, err := master.OpenCheckpoint(dir, 1, master.DefaultJournal)
					if err != nil {
						b.Fatal(err)
					}
					for first := int64(1); first <= n; first += 1000 {
						var ops []core.Op
						for id := first; id < first+1000; id++ {
							t := benchTask(id, per)
							r := pilotproto.TaskRef{TaskID: t.ID, Attempt: 1}
							ops = append(ops, core.Op{Kind: core.OpAdd, Ref: r, Task: t})
							if st != "pending" {
								ops = append(ops, core.Op{Kind: core.OpAssign, Ref: r, Worker: fmt.Sprintf("worker-%d", id/1000), Batch: (id-1)/100 + 1})
							}
							if st == "done" {
								ops = append(ops, core.Op{Kind: core.OpFinish, Ref: r, Result: &pilotproto.Result{TaskID: t.ID, Attempt: 1,
									Status: pilotproto.StatusDone, StartedAt: 1_790_000_000_000 + id*7, DurationMS: 3000 + id%100, Pilot: fmt.Sprintf("pilot-%d", id/1000)}})
							}
						}
						if err := cp.Commit(ops); err != nil {
							b.Fatal(err)
						}
					}
					cp.Close()
					fi, err := os.Stat(filepath.Join(dir, master.FileName(1)))
					if err != nil {
						b.Fatal(err)
					}
					b.ReportMetric(float64(fi.Size()), "bytes")
					b.ReportMetric(float64(fi.Size())/n, "bytes/task")
				}
			})
		}
	}
}
