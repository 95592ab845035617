package worker

import (
	"context"
	"sync"
	"testing"

	"github.com/harvest-hpc/harvest/pilotproto"
	"github.com/harvest-hpc/harvest/workerproto"
)

// recordRunner records the runs it is given and holds them until release.
type recordRunner struct {
	mu      sync.Mutex
	runs    [][]int64
	started chan struct{}
	release chan struct{}
}

func (r *recordRunner) Run(ctx context.Context, t pilotproto.Task) Outcome {
	return r.RunBatch(ctx, []pilotproto.Task{t})
}

func (r *recordRunner) RunBatch(ctx context.Context, ts []pilotproto.Task) Outcome {
	var ids []int64
	for _, t := range ts {
		ids = append(ids, t.ID)
	}
	r.mu.Lock()
	r.runs = append(r.runs, ids)
	r.mu.Unlock()
	r.started <- struct{}{}
	<-r.release
	return Outcome{Status: pilotproto.StatusDone}
}

// A batched command's batch runs once, in one slot, and counts as one
// slot's worth of held work (so the other slots get work of their own);
// a plain job's tasks run one per slot.
func TestABatchedBatchRunsOnceInOneSlot(t *testing.T) {
	rr := &recordRunner{started: make(chan struct{}, 8), release: make(chan struct{})}
	w := &Worker{slots: 2, cfg: Config{Prefetch: 2, Runner: rr}, running: map[ref]*running{}, unitOf: map[ref]int64{},
		dropped: map[ref]bool{}, changed: make(chan struct{})}
	batch := func(id int64, first int64, n int, argv ...string) workerproto.Batch {
		b := workerproto.Batch{ID: id}
		for i := range n {
			b.Tasks = append(b.Tasks, pilotproto.Task{ID: first + int64(i), Attempt: 1, JobID: id, Command: argv})
		}
		return b
	}
	w.accept([]workerproto.Batch{batch(1, 1, 3, "prog", "{inputs}"), batch(2, 10, 3, "prog", "{inputs}"), batch(3, 20, 2, "prog", "{input}")})
	w.mu.Lock()
	if got := w.held(); got != 4 { // two batched runs, two plain tasks
		t.Errorf("held %d slots' worth, want 4", got)
	}
	w.mu.Unlock()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go w.dispatch(ctx)
	<-rr.started
	<-rr.started
	w.mu.Lock()
	if w.busy != 2 || len(w.running) != 6 || w.held() != 4 {
		t.Errorf("busy %d, running %d tasks, held %d; want both slots on the two batched runs (6 tasks), 4 held", w.busy, len(w.running), w.held())
	}
	w.mu.Unlock()
	for range 4 - 2 {
		rr.release <- struct{}{}
		<-rr.started
	}
	rr.release <- struct{}{}
	rr.release <- struct{}{}
	w.tasks.Wait()
	want := [][]int64{{1, 2, 3}, {10, 11, 12}, {20}, {21}}
	got := map[int64]int{}
	for _, r := range rr.runs {
		got[r[0]] = len(r)
	}
	for _, r := range want {
		if got[r[0]] != len(r) {
			t.Errorf("runs %v, want %v", rr.runs, want)
			break
		}
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.results) != 8 || w.busy != 0 || len(w.unitOf) != 0 {
		t.Errorf("%d results (want 8, one per task), busy %d, %d queued batched tasks left", len(w.results), w.busy, len(w.unitOf))
	}
}
