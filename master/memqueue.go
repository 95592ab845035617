package master

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/harvest-hpc/harvest/pilotproto"
)

// MemQueue is an in-memory Queue: the task source of `harvest bench
// dispatch` and the reference queue of the failover tests. It follows the
// queue's rules that matter to the master (same as package queue): lease
// with TTL and epochs,
// fencing of stale epochs, results applied once per (task, attempt),
// failed attempts retried up to MaxAttempts, interrupted tasks requeued at
// once with a new attempt number that does not count as a failure.
type MemQueue struct {
	// TTL of the lease; MaxAttempts of a task (counting failures only).
	TTL         time.Duration
	MaxAttempts int
	// ZombieTimeout requeues assigned tasks not heartbeated for that long
	// (0 = never): the queue's safety net for tasks a dead master pulled
	// but never checkpointed.
	ZombieTimeout time.Duration
	Now           func() time.Time
	// Releases counts leases given up by a stopping master.
	Releases int

	mu        sync.Mutex
	epoch     int64
	holder    string
	address   string
	expires   time.Time
	order     []int64 // waiting task ids, FIFO
	tasks     map[int64]*memTask
	applied   map[pilotproto.TaskRef]bool
	cancelled []int64
	sentCanc  map[int64]int // epoch -> number of cancelled jobs already sent
	lastRec   pilotproto.RecommendationRequest
	dups      int
	open      int // tasks not final
	changed   chan struct{}
}

type memTask struct {
	t         pilotproto.Task
	state     string // waiting, assigned, final
	status    string // final status
	failures  int
	doneCount int
	lastBeat  time.Time
}

var _ Queue = (*MemQueue)(nil)

// NewMemQueue returns an empty queue with a 30 s lease TTL and 3 attempts.
func NewMemQueue() *MemQueue {
	return &MemQueue{
		TTL: 30 * time.Second, MaxAttempts: 3, Now: time.Now,
		tasks: map[int64]*memTask{}, applied: map[pilotproto.TaskRef]bool{},
		sentCanc: map[int64]int{}, changed: make(chan struct{}),
	}
}

// Add makes tasks waiting; Attempt 0 is set to 1.
func (q *MemQueue) Add(tasks ...pilotproto.Task) {
	q.mu.Lock()
	defer q.mu.Unlock()
	for _, t := range tasks {
		if t.Attempt == 0 {
			t.Attempt = 1
		}
		q.tasks[t.ID] = &memTask{t: t, state: "waiting"}
		q.open++
		q.order = append(q.order, t.ID)
	}
	q.notify()
}

// Cancel kills a job: waiting tasks become final, masters are told.
func (q *MemQueue) Cancel(jobID int64) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.cancelled = append(q.cancelled, jobID)
	for _, mt := range q.tasks {
		if mt.t.JobID == jobID && mt.state != "final" {
			mt.state, mt.status = "final", pilotproto.StatusKilled
			q.open--
		}
	}
	q.notify()
}

func (q *MemQueue) notify() {
	close(q.changed)
	q.changed = make(chan struct{})
}

func (q *MemQueue) fence(epoch int64) error {
	if epoch != q.epoch {
		return fmt.Errorf("memqueue: epoch %d, current %d: %w", epoch, q.epoch, ErrStaleEpoch)
	}
	if q.Now().After(q.expires) {
		return fmt.Errorf("memqueue: lease of epoch %d expired: %w", epoch, ErrLeaseExpired)
	}
	return nil
}

// Lease implements Queue.
func (q *MemQueue) Lease(_ context.Context, req pilotproto.LeaseRequest) (pilotproto.Lease, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	now := q.Now()
	if req.Epoch != 0 && (req.Epoch != q.epoch || req.PilotID != q.holder) {
		return pilotproto.Lease{}, fmt.Errorf("memqueue: lease epoch %d (current %d held by %s): %w", req.Epoch, q.epoch, q.holder, ErrStaleEpoch)
	}
	if req.Release {
		if req.Epoch == 0 {
			return pilotproto.Lease{}, fmt.Errorf("memqueue: release without an epoch: %w", ErrStaleEpoch)
		}
		q.expires = now
		q.Releases++
		return q.lease(false), nil
	}
	// The holder renews with its epoch, even after expiry if nobody took
	// the lease; asking again with 0 before expiry is idempotent.
	renew := req.PilotID == q.holder && (req.Epoch != 0 || !now.After(q.expires))
	free := q.holder == "" || now.After(q.expires)
	if renew || free {
		if !renew {
			q.epoch++
			q.holder, q.address = req.PilotID, req.Address
		}
		q.expires = now.Add(q.TTL)
		return q.lease(true), nil
	}
	return q.lease(false), nil
}

func (q *MemQueue) lease(granted bool) pilotproto.Lease {
	return pilotproto.Lease{Granted: granted, Epoch: q.epoch, Holder: q.holder, Address: q.address,
		ExpiresAt: q.expires.Unix(), TTLSecond: int64(q.TTL / time.Second)}
}

// Pull implements Queue.
func (q *MemQueue) Pull(_ context.Context, req pilotproto.PullRequest) (pilotproto.PullResponse, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if err := q.fence(req.Epoch); err != nil {
		return pilotproto.PullResponse{}, err
	}
	q.reapZombies()
	var resp pilotproto.PullResponse
	now := q.Now()
	n := 0
	for n < len(q.order) && len(resp.Tasks) < req.Max {
		mt := q.tasks[q.order[n]]
		n++
		if mt.state != "waiting" {
			continue
		}
		mt.state, mt.lastBeat = "assigned", now
		resp.Tasks = append(resp.Tasks, mt.t)
	}
	q.order = q.order[n:]
	resp.CancelledJobs = q.newCancelled(req.Epoch)
	return resp, nil
}

func (q *MemQueue) newCancelled(epoch int64) []int64 {
	sent := q.sentCanc[epoch]
	q.sentCanc[epoch] = len(q.cancelled)
	return append([]int64(nil), q.cancelled[sent:]...)
}

func (q *MemQueue) reapZombies() {
	if q.ZombieTimeout <= 0 {
		return
	}
	now := q.Now()
	for id, mt := range q.tasks {
		if mt.state == "assigned" && now.Sub(mt.lastBeat) > q.ZombieTimeout {
			mt.state = "waiting"
			mt.t.Attempt++
			q.order = append(q.order, id)
		}
	}
}

// Report implements Queue.
func (q *MemQueue) Report(_ context.Context, req pilotproto.ResultsRequest) (pilotproto.ResultsResponse, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if err := q.fence(req.Epoch); err != nil {
		return pilotproto.ResultsResponse{}, err
	}
	var resp pilotproto.ResultsResponse
	for _, r := range req.Results {
		ref := pilotproto.TaskRef{TaskID: r.TaskID, Attempt: r.Attempt}
		mt := q.tasks[r.TaskID]
		if q.applied[ref] || mt == nil || mt.t.Attempt != r.Attempt || mt.state == "final" {
			resp.Duplicates++
			q.dups++
			continue
		}
		q.applied[ref] = true
		resp.Applied++
		switch r.Status {
		case pilotproto.StatusDone:
			mt.doneCount++
			mt.state, mt.status = "final", r.Status
			q.open--
		case pilotproto.StatusInterrupted:
			mt.t.Attempt++
			mt.state = "waiting"
			q.order = append(q.order, r.TaskID)
		case pilotproto.StatusFailed, pilotproto.StatusTimeout:
			mt.failures++
			if mt.failures >= q.MaxAttempts {
				mt.state, mt.status = "final", r.Status
				q.open--
				break
			}
			mt.t.Attempt++
			mt.state = "waiting"
			q.order = append(q.order, r.TaskID)
		default:
			mt.state, mt.status = "final", r.Status
			q.open--
		}
	}
	q.notify()
	return resp, nil
}

// Heartbeat implements Queue.
func (q *MemQueue) Heartbeat(_ context.Context, req pilotproto.HeartbeatRequest) (pilotproto.HeartbeatResponse, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if err := q.fence(req.Epoch); err != nil {
		return pilotproto.HeartbeatResponse{}, err
	}
	now := q.Now()
	for _, ref := range req.Running {
		if mt := q.tasks[ref.TaskID]; mt != nil && mt.t.Attempt == ref.Attempt && mt.state == "assigned" {
			mt.lastBeat = now
		}
	}
	return pilotproto.HeartbeatResponse{CancelledJobs: q.newCancelled(req.Epoch), LeaseExpires: q.expires.Unix()}, nil
}

// Recommend implements Queue.
func (q *MemQueue) Recommend(_ context.Context, req pilotproto.RecommendationRequest) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	if err := q.fence(req.Epoch); err != nil {
		return err
	}
	q.lastRec = req
	return nil
}

// MemStats is what the tests check: every task final, none done twice.
type MemStats struct {
	Tasks, Final, Done, DoneTwice, Waiting, Assigned, Duplicates int
	Recommendation                                               pilotproto.RecommendationRequest
}

// Stats returns the current counts.
func (q *MemQueue) Stats() MemStats {
	q.mu.Lock()
	defer q.mu.Unlock()
	s := MemStats{Tasks: len(q.tasks), Duplicates: q.dups, Recommendation: q.lastRec}
	for _, mt := range q.tasks {
		switch mt.state {
		case "final":
			s.Final++
		case "waiting":
			s.Waiting++
		case "assigned":
			s.Assigned++
		}
		if mt.doneCount > 0 {
			s.Done++
		}
		if mt.doneCount > 1 {
			s.DoneTwice++
		}
	}
	return s
}

// WaitFinal blocks until every task is final or ctx ends.
func (q *MemQueue) WaitFinal(ctx context.Context) error {
	for {
		q.mu.Lock()
		final := q.open == 0
		ch := q.changed
		q.mu.Unlock()
		if final {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}
