package bench

import (
	"context"
	"sync"
	"time"

	"github.com/harvest-hpc/harvest/pilotproto"
)

// feed is the task source of the benchmark: it hands the bench's tasks
// out once, in order, and counts their results. It is not a queue (no
// fair share, no retries, a lease that never expires): the bench has one
// master and no failures, so what it measures is the master and the
// workers alone. The queue's own rules are tested by pilotproto/queuetest.
type feed struct {
	mu       sync.Mutex
	tasks    []pilotproto.Task
	next     int
	done     map[int64]int // done results by task
	nDone    int
	finished chan struct{} // closed when every task is done
	started  chan struct{} // closed by the first add: pulls wait for it
}

var _ pilotproto.Queue = (*feed)(nil)

func newFeed() *feed {
	return &feed{done: map[int64]int{}, finished: make(chan struct{}), started: make(chan struct{})}
}

// add makes tasks available to the next pulls.
func (f *feed) add(tasks []pilotproto.Task) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.tasks = append(f.tasks, tasks...)
	select {
	case <-f.started:
	default:
		close(f.started)
	}
}

// wait blocks until every task added is done.
func (f *feed) wait(ctx context.Context) error {
	select {
	case <-f.finished:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// counts returns the tasks done, and those done more than once.
func (f *feed) counts() (done, twice int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, n := range f.done {
		if n > 1 {
			twice++
		}
	}
	return f.nDone, twice
}

func (f *feed) Lease(_ context.Context, req pilotproto.LeaseRequest) (pilotproto.Lease, error) {
	return pilotproto.Lease{Granted: true, Epoch: 1, Holder: req.PilotID, Address: req.Address, TTLMS: time.Hour.Milliseconds()}, nil
}

func (f *feed) Pull(ctx context.Context, req pilotproto.PullRequest) (pilotproto.PullResponse, error) {
	select {
	case <-f.started:
	case <-ctx.Done():
		return pilotproto.PullResponse{}, ctx.Err()
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	n := min(req.Max, len(f.tasks)-f.next)
	out := append([]pilotproto.Task(nil), f.tasks[f.next:f.next+n]...)
	f.next += n
	return pilotproto.PullResponse{Tasks: out}, nil
}

func (f *feed) Results(_ context.Context, req pilotproto.ResultsRequest) (pilotproto.ResultsResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var resp pilotproto.ResultsResponse
	for _, r := range req.Results {
		if r.Status != pilotproto.StatusDone {
			continue
		}
		f.done[r.TaskID]++
		if f.done[r.TaskID] > 1 {
			resp.Duplicates++
			continue
		}
		resp.Applied++
		f.nDone++
		if f.nDone == len(f.tasks) {
			close(f.finished)
		}
	}
	return resp, nil
}

func (f *feed) Heartbeat(context.Context, pilotproto.HeartbeatRequest) (pilotproto.HeartbeatResponse, error) {
	return pilotproto.HeartbeatResponse{}, nil
}

func (f *feed) Recommend(context.Context, pilotproto.RecommendationRequest) error { return nil }
