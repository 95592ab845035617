// Package master is the elected master of a harvest pool: it pulls tasks
// from the agent's queue ahead of demand, hands batches to workers that
// ask for work, stores every state change in a SQLite checkpoint before
// acting on it, and reports results to the queue idempotently.
package master

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/harvest-hpc/harvest/agent/policy"
	"github.com/harvest-hpc/harvest/pilotproto"
	"github.com/harvest-hpc/harvest/workerproto"
)

type ref = pilotproto.TaskRef

func refOf(t pilotproto.Task) ref { return ref{TaskID: t.ID, Attempt: t.Attempt} }

type mtask struct {
	t        pilotproto.Task
	state    string
	worker   string
	batch    int64
	handedAt time.Time // when it was assigned to its worker (or restored)
	result   *pilotproto.Result
}

type mworker struct {
	id, pilot       string
	slots, capacity int
	deadline        time.Time // zero: none
	lastSeen        time.Time
	registered      bool // false: restored from the checkpoint, not back yet
	polling         int  // long-polls in progress
	out             map[ref]struct{}
	kill            []int64
}

// Master is one master epoch. Create it with New, run it with Run, serve
// its workers with Handler.
type Master struct {
	cfg Config
	q   Queue
	cp  *Checkpoint
	log *slog.Logger

	mu        sync.Mutex
	tasks     map[ref]*mtask
	pending   []ref // FIFO with lazy deletion: entries whose task is not pending are skipped
	npending  int
	nassigned int
	workers   map[string]*mworker
	outbox    []ref // final results not yet acknowledged by the queue, in order
	est       map[int64]*Estimator
	cancelled map[int64]bool
	nextBatch int64
	changed   chan struct{} // closed and replaced when work appears
	stopping  bool

	pullKick, reportKick, leaseKick chan struct{}
	failOnce                        sync.Once
	failed                          chan struct{}
	failErr                         error
}

// New opens the checkpoint, claims it for cfg.Epoch (fencing older
// masters) and restores what a previous master left: pending tasks,
// batches in flight (kept for ReconnectGrace) and unacknowledged results.
func New(cfg Config, q Queue) (*Master, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cp, err := OpenCheckpoint(cfg.CheckpointPath, cfg.JournalMode)
	if err != nil {
		return nil, err
	}
	if err := cp.Claim(cfg.Epoch); err != nil {
		cp.Close()
		return nil, err
	}
	m := &Master{
		cfg: cfg, q: q, cp: cp, log: cfg.Logger.With("component", "master", "epoch", cfg.Epoch),
		tasks: map[ref]*mtask{}, workers: map[string]*mworker{}, est: map[int64]*Estimator{},
		cancelled: map[int64]bool{}, changed: make(chan struct{}),
		pullKick: make(chan struct{}, 1), reportKick: make(chan struct{}, 1), leaseKick: make(chan struct{}, 1), failed: make(chan struct{}),
	}
	if err := m.restore(); err != nil {
		cp.Close()
		return nil, err
	}
	return m, nil
}

func (m *Master) restore() error {
	rows, err := m.cp.Load()
	if err != nil {
		return err
	}
	now := m.cfg.Now()
	for _, r := range rows {
		t := &mtask{t: r.Task, state: r.State, worker: r.Worker, batch: r.Batch, result: r.Result, handedAt: now}
		k := refOf(r.Task)
		m.tasks[k] = t
		if r.Batch >= m.nextBatch {
			m.nextBatch = r.Batch
		}
		switch r.State {
		case statePending:
			m.pending = append(m.pending, k)
			m.npending++
		case stateAssigned:
			w := m.workers[r.Worker]
			if w == nil {
				w = &mworker{id: r.Worker, lastSeen: now, out: map[ref]struct{}{}}
				m.workers[r.Worker] = w
			}
			w.out[k] = struct{}{}
			m.nassigned++
		case stateFinal:
			m.outbox = append(m.outbox, k)
		}
	}
	if len(rows) > 0 {
		m.log.Info("restored checkpoint", "pending", m.npending, "in_flight", m.nassigned,
			"unreported", len(m.outbox), "workers", len(m.workers))
	}
	return nil
}

// Run drives the master until ctx ends (graceful stop: tasks never handed
// out go back to the queue, results are flushed) or the master is fenced
// (a newer master exists: it stops writing at once). The error says which.
func (m *Master) Run(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for _, loop := range []func(context.Context){m.pullLoop, m.reportLoop, m.tickLoop} {
		wg.Add(1)
		go func() { defer wg.Done(); loop(ctx) }()
	}
	kick(m.pullKick)
	kick(m.reportKick)
	select {
	case <-ctx.Done():
	case <-m.failed:
	}
	cancel()
	wg.Wait()
	defer func() {
		// Under mu, so no request handler is in the middle of a write.
		m.mu.Lock()
		m.stopping = true
		m.cp.Close()
		m.mu.Unlock()
	}()
	if err := m.failure(); err != nil {
		m.broadcast()
		return err
	}
	return m.shutdown()
}

// shutdown hands the tasks no worker holds back to the queue (interrupted:
// requeued at once) and flushes results. Batches held by workers stay in
// the checkpoint: those workers keep running and report to the next master.
func (m *Master) shutdown() error {
	m.mu.Lock()
	m.stopping = true
	var ops []op
	for _, k := range m.livePending() {
		ops = append(ops, op{kind: opFinish, k: k, res: m.resultFor(m.tasks[k], pilotproto.StatusInterrupted)})
	}
	err := m.commit(ops)
	if len(ops) == 0 {
		// Nothing to write, but say so if a newer master owns the state.
		err = m.cp.Tx(func(*CTx) error { return nil })
	}
	m.mu.Unlock()
	m.broadcast()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), m.cfg.ShutdownTimeout)
	defer cancel()
	for {
		n, err := m.reportOnce(ctx)
		if err != nil {
			m.log.Warn("results not flushed at stop; the next master sends them", "error", err)
			break
		}
		if n == 0 {
			break
		}
	}
	// Give the lease up so a worker becomes master now, not after the TTL.
	// Workers already hear "not the master" from us and go back to the lease.
	if _, err := m.q.Lease(ctx, pilotproto.LeaseRequest{PilotID: m.cfg.PilotID, Address: m.cfg.Address, Epoch: m.cfg.Epoch, Release: true}); err != nil {
		m.log.Warn("could not release the lease; the next master waits for its TTL", "error", err)
	} else {
		m.log.Info("released the master lease", "epoch", m.cfg.Epoch)
	}
	return nil
}

func (m *Master) resultFor(t *mtask, status string) *pilotproto.Result {
	return &pilotproto.Result{TaskID: t.t.ID, Attempt: t.t.Attempt, Status: status, Pilot: m.cfg.PilotID,
		StartedAt: m.cfg.Now().UnixMilli()}
}

func (m *Master) fail(err error) {
	m.failOnce.Do(func() {
		m.mu.Lock()
		m.failErr = err
		m.mu.Unlock()
		m.log.Warn("master stops", "error", err)
		close(m.failed)
	})
}

func (m *Master) failure() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.failErr
}

// Done is closed when the master was fenced or failed.
func (m *Master) Done() <-chan struct{} { return m.failed }

func kick(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

// broadcast wakes the long-polls. Callers must not hold mu.
func (m *Master) broadcast() {
	m.mu.Lock()
	close(m.changed)
	m.changed = make(chan struct{})
	m.mu.Unlock()
}

// ---- state changes: planned, committed, then applied (under mu) ----

type opKind int

const (
	opAdd opKind = iota
	opAssign
	opRequeue
	opFinish
	opDelete
)

type op struct {
	kind   opKind
	k      ref
	task   pilotproto.Task
	worker string
	batch  int64
	res    *pilotproto.Result
}

// commit stores ops in one checkpoint transaction, then applies them to
// memory. Called with mu held. A fenced checkpoint stops the master.
func (m *Master) commit(ops []op) error {
	if len(ops) == 0 {
		return nil
	}
	err := m.cp.Tx(func(tx *CTx) error {
		for _, o := range ops {
			var err error
			switch o.kind {
			case opAdd:
				err = tx.Add(o.task)
			case opAssign:
				err = tx.Assign(o.k, o.worker, o.batch)
			case opRequeue:
				err = tx.Requeue(o.k)
			case opFinish:
				err = tx.Finish(*o.res)
			case opDelete:
				err = tx.Delete(o.k)
			}
			if err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		if errors.Is(err, ErrFenced) {
			go m.fail(err)
		}
		return err
	}
	for _, o := range ops {
		m.apply(o)
	}
	return nil
}

func (m *Master) apply(o op) {
	t := m.tasks[o.k]
	m.leave(t)
	switch o.kind {
	case opAdd:
		t = &mtask{t: o.task}
		m.tasks[o.k] = t
		m.toPending(o.k, t)
	case opAssign:
		t.state, t.worker, t.batch, t.handedAt = stateAssigned, o.worker, o.batch, m.cfg.Now()
		m.nassigned++
		m.worker(o.worker).out[o.k] = struct{}{}
	case opRequeue:
		m.toPending(o.k, t)
	case opFinish:
		t.state, t.result = stateFinal, o.res
		m.outbox = append(m.outbox, o.k)
	case opDelete:
		delete(m.tasks, o.k)
	}
}

// leave takes a task out of its current state's counters.
func (m *Master) leave(t *mtask) {
	if t == nil {
		return
	}
	switch t.state {
	case statePending:
		m.npending--
	case stateAssigned:
		m.nassigned--
		if w := m.workers[t.worker]; w != nil {
			delete(w.out, refOf(t.t))
		}
	}
	t.state, t.worker, t.batch = "", "", 0
}

func (m *Master) toPending(k ref, t *mtask) {
	t.state, t.result = statePending, nil
	m.pending = append(m.pending, k)
	m.npending++
}

func (m *Master) worker(id string) *mworker {
	w := m.workers[id]
	if w == nil {
		w = &mworker{id: id, lastSeen: m.cfg.Now(), out: map[ref]struct{}{}}
		m.workers[id] = w
	}
	return w
}

// ---- batches ----

// assign plans batches for w (at least one batch when one fits, more while
// the tasks handed stay under free), commits them, and returns them.
func (m *Master) assign(w *mworker, free int, now time.Time) ([]workerproto.Batch, error) {
	if m.stopping || m.npending == 0 || free <= 0 {
		return nil, nil
	}
	m.compact()
	taken := map[ref]bool{}
	var batches []workerproto.Batch
	var ops []op
	handed := 0
	for handed < free {
		refs := m.nextBatch1(w, taken, len(w.out)+handed, now)
		if len(refs) == 0 {
			break
		}
		m.nextBatch++
		b := workerproto.Batch{ID: m.nextBatch}
		for _, k := range refs {
			taken[k] = true
			b.Tasks = append(b.Tasks, m.tasks[k].t)
			ops = append(ops, op{kind: opAssign, k: k, worker: w.id, batch: b.ID})
		}
		batches = append(batches, b)
		handed += len(refs)
	}
	if err := m.commit(ops); err != nil {
		return nil, err
	}
	if m.npending < m.bufferTarget() {
		kick(m.pullKick)
	}
	return batches, nil
}

// nextBatch1 picks the next batch for w: tasks of one job, in queue order,
// as many as the job's batch size and the worker's deadline allow. If the
// first job's tasks cannot finish in time it tries the next few jobs.
func (m *Master) nextBatch1(w *mworker, taken map[ref]bool, outstanding int, now time.Time) []ref {
	remaining := time.Duration(-1)
	if !w.deadline.IsZero() {
		remaining = w.deadline.Add(-m.cfg.SafetyMargin).Sub(now)
		if remaining <= 0 {
			return nil
		}
	}
	tried := map[int64]bool{}
	for i := 0; i < len(m.pending) && len(tried) < 8; i++ {
		k := m.pending[i]
		t := m.tasks[k]
		if t == nil || t.state != statePending || taken[k] || tried[t.t.JobID] {
			continue
		}
		job := t.t.JobID
		tried[job] = true
		want := t.t.BatchSize
		if want < 1 {
			want = 1
		}
		n := FitBatch(want, outstanding, w.slots, m.estimate(t.t), remaining)
		if n == 0 {
			continue
		}
		refs := make([]ref, 0, n)
		for j := i; j < len(m.pending) && len(refs) < n; j++ {
			k2 := m.pending[j]
			t2 := m.tasks[k2]
			if t2 != nil && t2.state == statePending && !taken[k2] && t2.t.JobID == job {
				refs = append(refs, k2)
			}
		}
		return refs
	}
	return nil
}

// estimate is the duration to plan a task with: learnt from the job's
// results, else its timeout, else unknown (0).
func (m *Master) estimate(t pilotproto.Task) time.Duration {
	if e := m.est[t.JobID]; e != nil {
		if d, ok := e.Estimate(); ok {
			return d
		}
	}
	return time.Duration(t.TimeoutS) * time.Second
}

// livePending lists the pending tasks once each, in order (the pending
// list may hold stale and repeated entries).
func (m *Master) livePending() []ref {
	live := make([]ref, 0, m.npending)
	seen := make(map[ref]bool, m.npending)
	for _, k := range m.pending {
		if t := m.tasks[k]; t != nil && t.state == statePending && !seen[k] {
			seen[k] = true
			live = append(live, k)
		}
	}
	return live
}

// compact drops stale entries of the pending list once they dominate it.
func (m *Master) compact() {
	for len(m.pending) > 0 {
		t := m.tasks[m.pending[0]]
		if t != nil && t.state == statePending {
			break
		}
		m.pending = m.pending[1:]
	}
	if len(m.pending) <= 2*m.npending+64 {
		return
	}
	m.pending = m.livePending()
}

func (m *Master) bufferTarget() int {
	capSum := 0
	for _, w := range m.workers {
		if w.registered {
			capSum += w.capacity
		}
	}
	target := m.cfg.Prefetch * capSum
	if target < m.cfg.MinBuffer {
		target = m.cfg.MinBuffer
	}
	if target > m.cfg.MaxBuffer {
		target = m.cfg.MaxBuffer
	}
	return target
}

// ---- worker requests ----

// ErrUnknownWorker: the worker must register (again).
var ErrUnknownWorker = errors.New(workerproto.ErrUnknownWorker)

// ErrNotMaster: this master stopped; workers go back to the lease.
var ErrNotMaster = errors.New(workerproto.ErrNotMaster)

func (m *Master) usable() error {
	select {
	case <-m.failed:
		return ErrNotMaster
	default:
	}
	if m.stopping {
		return ErrNotMaster
	}
	return nil
}

// Register handles a worker's (re)registration; see workerproto.RegisterRequest.
func (m *Master) Register(req workerproto.RegisterRequest) (workerproto.RegisterResponse, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.usable(); err != nil {
		return workerproto.RegisterResponse{}, err
	}
	now := m.cfg.Now()
	w := m.worker(req.WorkerID)
	w.pilot, w.slots, w.capacity, w.lastSeen = req.PilotID, req.Slots, req.Capacity, now
	w.deadline = time.Time{}
	if req.Deadline > 0 {
		w.deadline = time.UnixMilli(req.Deadline)
	}
	held := map[ref]bool{}
	for _, k := range req.Held {
		held[k] = true
	}
	for _, k := range req.Finished {
		held[k] = true
	}
	var ops []op
	for k := range w.out {
		if !held[k] {
			ops = append(ops, op{kind: opRequeue, k: k})
		}
	}
	var resp workerproto.RegisterResponse
	resp.Epoch = m.cfg.Epoch
	for _, k := range req.Held {
		t := m.tasks[k]
		switch {
		case t == nil || t.state == stateFinal:
			resp.Drop = append(resp.Drop, k)
		case t.state == stateAssigned && t.worker != w.id:
			resp.Drop = append(resp.Drop, k)
		case t.state == statePending && !m.cancelled[t.t.JobID]:
			// Requeued while the worker was away: it still runs it, keep it there.
			ops = append(ops, op{kind: opAssign, k: k, worker: w.id})
		case t.state == statePending:
			resp.Drop = append(resp.Drop, k)
		}
	}
	if err := m.commit(ops); err != nil {
		return workerproto.RegisterResponse{}, err
	}
	w.registered = true
	for job := range m.cancelled {
		w.kill = append(w.kill, job)
	}
	m.log.Info("worker registered", "worker", w.id, "pilot", w.pilot, "slots", w.slots,
		"deadline", w.deadline, "kept", len(w.out), "dropped", len(resp.Drop))
	kick(m.pullKick)
	return resp, nil
}

// Pull hands batches to a worker, waiting up to wait for work to appear.
func (m *Master) Pull(ctx context.Context, req workerproto.PullRequest) (workerproto.PullResponse, error) {
	wait := time.Duration(req.WaitMS) * time.Millisecond
	if wait <= 0 || wait > m.cfg.PullWait {
		wait = m.cfg.PullWait
	}
	timer := time.NewTimer(wait)
	defer timer.Stop()
	for {
		m.mu.Lock()
		if err := m.usable(); err != nil {
			m.mu.Unlock()
			return workerproto.PullResponse{}, err
		}
		w := m.workers[req.WorkerID]
		if w == nil || !w.registered {
			m.mu.Unlock()
			return workerproto.PullResponse{}, ErrUnknownWorker
		}
		w.lastSeen = m.cfg.Now()
		batches, err := m.assign(w, req.Free, w.lastSeen)
		if err != nil {
			m.mu.Unlock()
			return workerproto.PullResponse{}, err
		}
		resp := workerproto.PullResponse{Batches: batches, KillJobs: w.kill}
		w.kill = nil
		ch := m.changed
		if len(batches) > 0 || len(resp.KillJobs) > 0 {
			m.mu.Unlock()
			return resp, nil
		}
		w.polling++
		m.mu.Unlock()
		var done bool
		select {
		case <-ch:
		case <-timer.C:
			done = true
		case <-ctx.Done():
			done = true
		case <-m.failed:
		}
		m.mu.Lock()
		w.polling--
		w.lastSeen = m.cfg.Now()
		m.mu.Unlock()
		if done {
			return workerproto.PullResponse{}, nil
		}
	}
}

// Results stores a worker's results before they are acknowledged.
// Results of unknown or already final (task, attempt) pairs are
// acknowledged and ignored: that is what makes resending harmless.
func (m *Master) Results(req workerproto.ResultsRequest) (workerproto.ResultsResponse, error) {
	m.mu.Lock()
	if err := m.usable(); err != nil {
		m.mu.Unlock()
		return workerproto.ResultsResponse{}, err
	}
	if w := m.workers[req.WorkerID]; w != nil {
		w.lastSeen = m.cfg.Now()
	}
	var ops []op
	seen := map[ref]bool{}
	requeued := false
	for i := range req.Results {
		r := req.Results[i]
		k := ref{TaskID: r.TaskID, Attempt: r.Attempt}
		t := m.tasks[k]
		if t == nil || t.state == stateFinal || seen[k] {
			continue
		}
		seen[k] = true
		if r.Pilot == "" {
			if w := m.workers[req.WorkerID]; w != nil {
				r.Pilot = w.pilot
			}
		}
		switch {
		case r.Status == pilotproto.StatusInterrupted && m.cancelled[t.t.JobID]:
			r.Status = pilotproto.StatusKilled
			ops = append(ops, op{kind: opFinish, k: k, res: &r})
		case r.Status == pilotproto.StatusInterrupted:
			// The worker's pilot is ending: run it elsewhere now, not an attempt.
			ops = append(ops, op{kind: opRequeue, k: k})
			requeued = true
		default:
			ops = append(ops, op{kind: opFinish, k: k, res: &r})
		}
	}
	if err := m.commit(ops); err != nil {
		m.mu.Unlock()
		return workerproto.ResultsResponse{}, err
	}
	for _, o := range ops {
		if o.kind == opFinish && (o.res.Status == pilotproto.StatusDone || o.res.Status == pilotproto.StatusFailed) {
			e := m.est[m.tasks[o.k].t.JobID]
			if e == nil {
				e = &Estimator{}
				m.est[m.tasks[o.k].t.JobID] = e
			}
			e.Observe(time.Duration(o.res.DurationMS) * time.Millisecond)
		}
	}
	m.mu.Unlock()
	kick(m.reportKick)
	if requeued {
		m.broadcast()
	}
	return workerproto.ResultsResponse{Accepted: len(req.Results)}, nil
}

// Heartbeat marks a worker alive and returns jobs to kill.
func (m *Master) Heartbeat(req workerproto.HeartbeatRequest) (workerproto.HeartbeatResponse, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.usable(); err != nil {
		return workerproto.HeartbeatResponse{}, err
	}
	w := m.workers[req.WorkerID]
	if w == nil || !w.registered {
		return workerproto.HeartbeatResponse{}, ErrUnknownWorker
	}
	now := m.cfg.Now()
	w.lastSeen = now
	if req.Complete {
		held := make(map[ref]bool, len(req.Held))
		for _, k := range req.Held {
			held[k] = true
		}
		var ops []op
		for k := range w.out {
			// Handed out a while ago (so not a batch whose answer is still
			// on its way) and unknown to the worker: the answer was lost.
			if t := m.tasks[k]; !held[k] && now.Sub(t.handedAt) > m.cfg.PullWait+m.cfg.WorkerTimeout {
				ops = append(ops, op{kind: opRequeue, k: k})
			}
		}
		if err := m.commit(ops); err != nil {
			return workerproto.HeartbeatResponse{}, err
		}
		if len(ops) > 0 {
			m.log.Warn("tasks handed to a worker never reached it; requeued", "worker", w.id, "tasks", len(ops))
			go m.broadcast()
		}
	}
	resp := workerproto.HeartbeatResponse{KillJobs: w.kill}
	w.kill = nil
	return resp, nil
}

// ---- loops ----

func sleepCtx(ctx context.Context, d time.Duration, wake <-chan struct{}) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	case <-wake:
	}
}

func (m *Master) queueErr(what string, err error) {
	if errors.Is(err, ErrLeaseExpired) {
		kick(m.leaseKick)
	}
	if errors.Is(err, ErrStaleEpoch) {
		m.fail(fmt.Errorf("queue %s: %w", what, err))
		return
	}
	m.log.Warn("queue call failed", "call", what, "error", err)
}

func (m *Master) pullLoop(ctx context.Context) {
	for ctx.Err() == nil {
		m.mu.Lock()
		need := m.bufferTarget() - m.npending
		m.mu.Unlock()
		if need <= 0 {
			sleepCtx(ctx, m.cfg.IdlePoll, m.pullKick)
			continue
		}
		if need > m.cfg.MaxPull {
			need = m.cfg.MaxPull
		}
		resp, err := m.q.Pull(ctx, pilotproto.PullRequest{Epoch: m.cfg.Epoch, Max: need})
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			m.queueErr("pull", err)
			sleepCtx(ctx, m.cfg.RetryInterval, nil)
			continue
		}
		if err := m.addPulled(resp); err != nil {
			m.log.Error("checkpoint write failed; tasks return to the queue by its zombie timeout", "error", err)
			sleepCtx(ctx, m.cfg.RetryInterval, nil)
			continue
		}
		if len(resp.Tasks) == 0 {
			sleepCtx(ctx, m.cfg.IdlePoll, nil)
		}
	}
}

func (m *Master) addPulled(resp pilotproto.PullResponse) error {
	m.mu.Lock()
	var ops []op
	for _, t := range resp.Tasks {
		k := refOf(t)
		if old := m.tasks[k]; old != nil {
			// The queue hands out an attempt again only after it applied our
			// interrupted report; anything else is a duplicate delivery.
			if old.state != stateFinal || old.result == nil || old.result.Status != pilotproto.StatusInterrupted {
				continue
			}
		}
		ops = append(ops, op{kind: opAdd, k: k, task: t})
		if m.cancelled[t.JobID] {
			ops = append(ops, op{kind: opFinish, k: k, res: m.resultFor(&mtask{t: t}, pilotproto.StatusKilled)})
		}
	}
	err := m.commit(ops)
	m.mu.Unlock()
	if err != nil {
		return err
	}
	if err := m.cancelJobs(resp.CancelledJobs); err != nil {
		return err
	}
	if len(ops) > 0 {
		m.broadcast()
	}
	return nil
}

// cancelJobs finalises the pending tasks of cancelled jobs and tells the
// workers running the others to kill them.
func (m *Master) cancelJobs(jobs []int64) error {
	if len(jobs) == 0 {
		return nil
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	var ops []op
	for _, j := range jobs {
		m.cancelled[j] = true
		for _, w := range m.workers {
			w.kill = append(w.kill, j)
		}
	}
	for _, k := range m.livePending() {
		if t := m.tasks[k]; m.cancelled[t.t.JobID] {
			ops = append(ops, op{kind: opFinish, k: k, res: m.resultFor(t, pilotproto.StatusKilled)})
		}
	}
	m.log.Info("jobs cancelled", "jobs", jobs, "pending_killed", len(ops))
	go m.broadcast()
	kick(m.reportKick)
	return m.commit(ops)
}

func (m *Master) reportLoop(ctx context.Context) {
	for ctx.Err() == nil {
		n, err := m.reportOnce(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			m.queueErr("results", err)
			sleepCtx(ctx, m.cfg.RetryInterval, nil)
			continue
		}
		if n == 0 {
			sleepCtx(ctx, m.cfg.HeartbeatInterval, m.reportKick)
		}
	}
}

// reportOnce sends up to ReportBatch unacknowledged results and forgets
// them once the queue acknowledged them. Returns how many were sent.
func (m *Master) reportOnce(ctx context.Context) (int, error) {
	m.mu.Lock()
	var refs []ref
	var results []pilotproto.Result
	i := 0
	for ; i < len(m.outbox) && len(results) < m.cfg.ReportBatch; i++ {
		k := m.outbox[i]
		t := m.tasks[k]
		if t == nil || t.state != stateFinal || t.result == nil {
			continue
		}
		refs = append(refs, k)
		results = append(results, *t.result)
	}
	m.outbox = m.outbox[i:]
	m.mu.Unlock()
	if len(results) == 0 {
		return 0, nil
	}
	_, err := m.q.Report(ctx, pilotproto.ResultsRequest{Epoch: m.cfg.Epoch, Results: results})
	m.mu.Lock()
	defer m.mu.Unlock()
	if err != nil {
		// Put them back in front, in order.
		m.outbox = append(refs, m.outbox...)
		return 0, err
	}
	var ops []op
	for _, k := range refs {
		if t := m.tasks[k]; t != nil && t.state == stateFinal {
			ops = append(ops, op{kind: opDelete, k: k})
		}
	}
	if err := m.commit(ops); err != nil {
		return 0, err
	}
	return len(results), nil
}

func (m *Master) tickLoop(ctx context.Context) {
	t := time.NewTicker(m.cfg.Tick)
	defer t.Stop()
	var lastBeat, lastLease time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		now := m.cfg.Now()
		m.reap(now)
		select {
		case <-m.leaseKick: // a write found the lease expired: renew now
			lastLease = time.Time{}
		default:
		}
		if now.Sub(lastLease) >= m.cfg.LeaseRenewInterval {
			lastLease = now
			l, err := m.q.Lease(ctx, pilotproto.LeaseRequest{PilotID: m.cfg.PilotID, Address: m.cfg.Address, Epoch: m.cfg.Epoch})
			switch {
			case err != nil && ctx.Err() == nil:
				m.queueErr("lease", err)
			case err == nil && (!l.Granted || l.Epoch != m.cfg.Epoch):
				m.fail(fmt.Errorf("lease now held by %s (epoch %d): %w", l.Holder, l.Epoch, ErrStaleEpoch))
			}
		}
		if now.Sub(lastBeat) >= m.cfg.HeartbeatInterval {
			lastBeat = now
			m.heartbeat(ctx)
		}
	}
}

// reap requeues the batches of workers that went silent, and of restored
// workers that did not come back within the reconnect grace.
func (m *Master) reap(now time.Time) {
	m.mu.Lock()
	var ops []op
	var gone []string
	for id, w := range m.workers {
		limit := m.cfg.WorkerTimeout
		if !w.registered {
			limit = m.cfg.ReconnectGrace
		}
		if w.polling > 0 || now.Sub(w.lastSeen) <= limit {
			continue
		}
		gone = append(gone, id)
		for k := range w.out {
			ops = append(ops, op{kind: opRequeue, k: k})
		}
	}
	err := m.commit(ops)
	if err == nil {
		for _, id := range gone {
			m.log.Warn("worker lost; its tasks are requeued", "worker", id)
			delete(m.workers, id)
		}
	}
	m.mu.Unlock()
	if len(ops) > 0 {
		m.broadcast()
	}
}

func (m *Master) heartbeat(ctx context.Context) {
	m.mu.Lock()
	req := pilotproto.HeartbeatRequest{Epoch: m.cfg.Epoch}
	// Every task we hold, final ones whose result the queue has not
	// acknowledged included: the queue requeues the active tasks of older
	// epochs that a new master's first heartbeat does not list.
	for k := range m.tasks {
		req.Running = append(req.Running, k)
	}
	pilots := map[string]*pilotproto.PilotStatus{}
	slots := 0
	for _, w := range m.workers {
		if w.pilot == "" {
			continue
		}
		p := pilots[w.pilot]
		if p == nil {
			p = &pilotproto.PilotStatus{PilotID: w.pilot}
			pilots[w.pilot] = p
		}
		p.Busy = p.Busy || len(w.out) > 0
		if !w.deadline.IsZero() {
			p.Deadline = w.deadline.Unix()
		}
		slots = max(slots, w.slots)
	}
	for _, p := range pilots {
		req.Pilots = append(req.Pilots, *p)
	}
	left := m.npending + m.nassigned
	rec := pilotproto.RecommendationRequest{Epoch: m.cfg.Epoch, MinNodes: policy.Recommend(left, m.cfg.Recommend),
		PendingTasks: m.npending, RunningTasks: m.nassigned, SlotsPerNode: slots}
	m.mu.Unlock()
	resp, err := m.q.Heartbeat(ctx, req)
	if err != nil {
		if ctx.Err() == nil {
			m.queueErr("heartbeat", err)
		}
		return
	}
	if err := m.cancelJobs(resp.CancelledJobs); err != nil {
		m.log.Error("cancel jobs", "error", err)
	}
	if err := m.q.Recommend(ctx, rec); err != nil && ctx.Err() == nil {
		m.queueErr("recommendation", err)
	}
}

// Stats are the master's counters (for logs, tests and the bench).
type Stats struct {
	Pending, Assigned, Unreported, Workers int
}

// Stats returns the current counters.
func (m *Master) Stats() Stats {
	m.mu.Lock()
	defer m.mu.Unlock()
	n := 0
	for _, w := range m.workers {
		if w.registered {
			n++
		}
	}
	return Stats{Pending: m.npending, Assigned: m.nassigned, Unreported: len(m.outbox), Workers: n}
}
