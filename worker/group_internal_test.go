package worker

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/harvest-hpc/harvest/pilotproto"
	"github.com/harvest-hpc/harvest/workerproto"
)

// fakeGroups is a GroupRunner whose tasks end when the test says; it
// records the slots each group is given and the stops it is sent.
type fakeGroups struct {
	mu     sync.Mutex
	groups []*fakeGroup
	made   chan *fakeGroup
}

type fakeGroup struct {
	ts    []pilotproto.Task
	ended func([]int, []Outcome)
	mu    sync.Mutex
	slots int
	stops []int
}

func (f *fakeGroups) Run(context.Context, pilotproto.Task) Outcome {
	panic("a task of a group ran alone")
}

func (f *fakeGroups) GroupKey(t pilotproto.Task) string { return string(rune('a' + t.JobID)) }

func (f *fakeGroups) StartGroup(ts []pilotproto.Task, slots int, ended func([]int, []Outcome)) TaskGroup {
	g := &fakeGroup{ts: ts, ended: ended, slots: slots}
	f.mu.Lock()
	f.groups = append(f.groups, g)
	f.mu.Unlock()
	f.made <- g
	return g
}

func (g *fakeGroup) SetSlots(n int) { g.mu.Lock(); g.slots = n; g.mu.Unlock() }
func (g *fakeGroup) Stop(idx ...int) {
	g.mu.Lock()
	g.stops = append(g.stops, idx...)
	g.mu.Unlock()
	// As a runner does: the stopped tasks end (here before they start).
	outs := make([]Outcome, len(idx))
	for i := range outs {
		outs[i] = Outcome{Status: pilotproto.StatusFailed, ExitCode: -1}
	}
	g.ended(idx, outs)
}

func (g *fakeGroup) slotsNow() int { g.mu.Lock(); defer g.mu.Unlock(); return g.slots }

// A job's queued tasks go to the runner as one group with the free slots;
// the worker counts min(slots, tasks left) busy and the rest held; a
// second job's group gets the slots the first frees at its tail; a
// cancelled job's tasks are stopped in the group and reported killed, each
// once; a result per task.
func TestAJobsTasksRunAsAGroupInTheWorkersSlots(t *testing.T) {
	fg := &fakeGroups{made: make(chan *fakeGroup, 4)}
	w := &Worker{slots: 3, cfg: Config{Prefetch: 0, Runner: fg, StopGrace: time.Second}, running: map[ref]*running{}, unitOf: map[ref]int64{},
		dropped: map[ref]bool{}, changed: make(chan struct{})}
	batch := func(job int64, first int64, n int) workerproto.Batch {
		b := workerproto.Batch{ID: job}
		for i := range n {
			b.Tasks = append(b.Tasks, pilotproto.Task{ID: first + int64(i), Attempt: 1, JobID: job, Command: []string{"true"}})
		}
		return b
	}
	w.accept([]workerproto.Batch{batch(1, 1, 5)})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go w.dispatch(ctx)
	a := <-fg.made
	if len(a.ts) != 5 || a.slotsNow() != 3 {
		t.Fatalf("group of %d tasks with %d slots, want 5 with the 3 free", len(a.ts), a.slotsNow())
	}
	w.mu.Lock()
	if w.busy != 3 || w.held() != 5 {
		t.Errorf("busy %d, held %d; want 3 busy, 5 held", w.busy, w.held())
	}
	w.mu.Unlock()
	done := Outcome{Status: pilotproto.StatusDone}
	a.ended([]int{0, 1, 2}, []Outcome{done, done, done}) // a wave: 2 left
	w.accept([]workerproto.Batch{batch(2, 10, 4)})
	b := <-fg.made
	if b.slotsNow() != 1 || a.slotsNow() != 2 {
		t.Errorf("second group given %d slots, first left %d; want 1 and 2", b.slotsNow(), a.slotsNow())
	}
	w.killJobs([]int64{2})
	deadline := time.Now().Add(10 * time.Second)
	for {
		w.mu.Lock()
		n := len(w.results)
		w.mu.Unlock()
		if n == 7 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d results, want 7", n)
		}
		time.Sleep(time.Millisecond)
	}
	b.mu.Lock()
	if len(b.stops) != 4 {
		t.Errorf("stops sent to the cancelled job's group: %v, want its 4 tasks", b.stops)
	}
	b.mu.Unlock()
	a.ended([]int{3, 4, 4}, []Outcome{done, done, done})
	w.tasks.Wait()
	w.mu.Lock()
	defer w.mu.Unlock()
	status := map[int64]string{}
	for _, r := range w.results {
		if _, twice := status[r.TaskID]; twice {
			t.Errorf("task %d reported twice", r.TaskID)
		}
		status[r.TaskID] = r.Status
	}
	for id := range int64(5) {
		if status[1+id] != pilotproto.StatusDone {
			t.Errorf("task %d: %q, want done", 1+id, status[1+id])
		}
	}
	for id := range int64(4) {
		if status[10+id] != pilotproto.StatusKilled {
			t.Errorf("cancelled job's task %d: %q, want killed", 10+id, status[10+id])
		}
	}
	if w.busy != 0 || len(w.running) != 0 || len(w.groups) != 0 || w.held() != 0 {
		t.Errorf("busy %d, running %d, groups %d, held %d after the end", w.busy, len(w.running), len(w.groups), w.held())
	}
}

// A new master that grants fewer slots than the last: the groups running
// give the excess back (the latest first, each keeping one), and no task
// starts until the worker runs within its new slots.
func TestAGroupGivesSlotsBackWhenANewMasterGrantsFewer(t *testing.T) {
	fg := &fakeGroups{made: make(chan *fakeGroup, 4)}
	w := &Worker{slots: 4, cfg: Config{Prefetch: 0, Runner: fg, StopGrace: time.Second}, running: map[ref]*running{}, unitOf: map[ref]int64{},
		dropped: map[ref]bool{}, changed: make(chan struct{})}
	batch := func(job int64, first int64, n int) workerproto.Batch {
		b := workerproto.Batch{ID: job}
		for i := range n {
			b.Tasks = append(b.Tasks, pilotproto.Task{ID: first + int64(i), Attempt: 1, JobID: job, Command: []string{"true"}})
		}
		return b
	}
	w.accept([]workerproto.Batch{batch(1, 1, 3), batch(2, 10, 6)})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go w.dispatch(ctx)
	a, b := <-fg.made, <-fg.made
	if a.ts[0].JobID != 1 {
		a, b = b, a
	}
	if a.slotsNow() != 3 || b.slotsNow() != 1 {
		t.Fatalf("groups given %d and %d slots, want 3 and 1", a.slotsNow(), b.slotsNow())
	}
	// A new master: 2 slots.
	w.mu.Lock()
	w.slots = 2
	w.notify()
	w.mu.Unlock()
	deadline := time.Now().Add(10 * time.Second)
	for a.slotsNow() != 1 {
		if time.Now().After(deadline) {
			t.Fatalf("after a new master granted 2 slots the groups hold %d and %d, want 1 and 1", a.slotsNow(), b.slotsNow())
		}
		time.Sleep(time.Millisecond)
	}
	w.mu.Lock()
	if w.busy != 2 || b.slotsNow() != 1 {
		t.Errorf("busy %d, groups %d and %d; want 2 busy, 1 and 1", w.busy, a.slotsNow(), b.slotsNow())
	}
	w.mu.Unlock()
	// A third job waits: the worker is at its slots.
	w.accept([]workerproto.Batch{batch(3, 20, 2)})
	select {
	case g := <-fg.made:
		t.Errorf("a third group started with %d slots while the worker was at its 2", g.slots)
	default:
	}
	// The first job's tasks end: its slot goes to the second job, which
	// has tasks waiting, before any new group.
	done := Outcome{Status: pilotproto.StatusDone}
	a.ended([]int{0, 1, 2}, []Outcome{done, done, done})
	for b.slotsNow() != 2 {
		if time.Now().After(deadline) {
			t.Fatalf("the second job holds %d slots after the first ended, want 2", b.slotsNow())
		}
		time.Sleep(time.Millisecond)
	}
	w.mu.Lock()
	if w.busy != w.slots {
		t.Errorf("busy %d, slots %d: want the worker at its slots", w.busy, w.slots)
	}
	w.mu.Unlock()
}
