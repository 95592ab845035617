// Package core is the master's state machine, in the style of etcd raft:
// events and the time come in through Step, effects go out through Ready
// (checkpoint ops to commit, replies to workers, queue calls to make). It
// does no I/O, starts no goroutine and reads no clock, so the same events
// always give the same effects: testdata/*.txt replays scenarios against
// it. Package master is the driver that commits, talks HTTP and ticks.
//
// The rules it keeps (docs/pilot.md):
//   - tasks are pulled from the queue ahead of demand (a buffer of Prefetch
//     x the registered capacity) and handed in batches of their job's batch
//     size, shrunk so they finish before the worker's deadline;
//   - every change is in Ready.Ops, and the driver commits them before it
//     sends the replies or queue calls of the same Ready;
//   - a worker silent for WorkerTimeout (a restored one: ReconnectGrace)
//     loses its batches to the pending list;
//   - results go to the queue, and are forgotten once it acknowledged them;
//   - a stale epoch, a lost lease or a failed commit stops the core.
package core

import (
	"errors"
	"log/slog"
	"slices"
	"time"

	"github.com/harvest-hpc/harvest/agent/policy"
	"github.com/harvest-hpc/harvest/capacity"
	"github.com/harvest-hpc/harvest/pilotproto"
	"github.com/harvest-hpc/harvest/workerproto"
)

// Config of the core: the master's settings that decide behaviour.
type Config struct {
	PilotID string // the pilot running this master (results it makes carry it)
	Address string // the URL published with the lease
	Epoch   int64  // the lease epoch this master was granted

	PullWait           time.Duration // longest worker long-poll
	Prefetch           int           // task buffer = Prefetch x the workers' capacity
	MinBuffer          int           // buffer floor (before workers register)
	MaxBuffer          int           // buffer ceiling
	MaxPull            int           // tasks per queue pull
	IdlePoll           time.Duration // pull interval while the queue has nothing
	RetryInterval      time.Duration // wait after a failed queue call
	HeartbeatInterval  time.Duration // queue heartbeat + recommendation period
	LeaseRenewInterval time.Duration // lease renewal period, at most (see LeaseTTL)
	LeaseTTL           time.Duration // the lease's TTL as granted; renewals come at least every TTL/3
	WorkerTimeout      time.Duration // a silent worker's tasks are requeued after this
	ReconnectGrace     time.Duration // after a restore, workers have this long to come back
	// HandBackWait is how long a stopping master still takes the results
	// of workers holding batches before it gives its lease up. A batch
	// system that ends every pilot at once (a wide job preempting them
	// all, one scancel) stops this master a few milliseconds before the
	// other pilots' hand-backs arrive; without the wait their tasks stay
	// in flight until the next master's ReconnectGrace. It ends as soon
	// as no worker holds a batch; 0 = no wait.
	HandBackWait time.Duration
	SafetyMargin time.Duration // no batch may be planned to end later than deadline - margin
	ReportBatch  int           // results per queue report
	// ReportDelay is how long a result may wait for others to join its
	// queue report (fewer, larger reports: each costs the queue a request
	// and a transaction). The result is in the checkpoint already, so a
	// master that dies meanwhile loses nothing (its successor reports
	// it); the delay only postpones when the queue sees it. A stopping
	// master and a full report (ReportBatch) do not wait. 0: report as
	// soon as the previous report is answered.
	ReportDelay time.Duration
	// RefillPercent: while tasks are pending, the master pulls only once
	// they fall this many percent below the buffer's target (fewer, larger
	// pulls: each costs the queue a transaction whatever its size). 0:
	// at any shortfall.
	RefillPercent int
	Recommend     policy.RecommendConfig
	// Capacity, when set, is the degradation-aware capacity rule: the
	// master caps its pool where its tasks slow down (package capacity).
	// Nil: no cap.
	Capacity *capacity.Config

	Logger *slog.Logger // nil: discard
}

// Errors in replies to workers.
var (
	// ErrUnknownWorker: the worker must register (again).
	ErrUnknownWorker = errors.New(workerproto.ErrUnknownWorker)
	// ErrNotMaster: this master stopped; workers go back to the lease.
	ErrNotMaster = errors.New(workerproto.ErrNotMaster)
)

type ref = pilotproto.TaskRef

func refOf(t pilotproto.Task) ref { return ref{TaskID: t.ID, Attempt: t.Attempt} }

type task struct {
	// t is the task as the queue's answer (or the checkpoint) holds it,
	// shared with its add op, not a copy: nothing changes it.
	t        *pilotproto.Task
	state    State
	worker   string
	batch    int64
	handedAt time.Time // when it was assigned to its worker (or restored)
	size     int       // the pool's size (pilots) when it was handed out; 0 = restored
	result   *pilotproto.Result
}

type worker struct {
	id, pilot       string
	address         string // where its pilot listens ("" unknown)
	slots, capacity int
	deadline        time.Time // zero: none
	newDeadline     bool      // pulled in: the next heartbeat tells the worker
	confinement     string
	lastSeen        time.Time
	registered      bool // false: restored from the checkpoint, not back yet
	polls           int  // parked long-polls
	out             map[ref]struct{}
	kill            []int64
}

// poll is a parked long-poll.
type poll struct {
	req    ReqID
	worker string
	free   int
	until  time.Time
}

type phase int

const (
	running  phase = iota
	stopping       // graceful stop: flushing results, then releasing the lease
	done
)

// Core is one master epoch's state. Not safe for concurrent use: the
// driver owns it.
type Core struct {
	cfg Config
	log *slog.Logger

	tasks     map[ref]*task
	pending   []ref           // FIFO with lazy deletion: entries whose task is not pending are skipped
	byJob     map[int64][]ref // the pending list split by job (lazy deletion too): a batch's tasks
	npending  int
	nassigned int
	nfinal    int
	workers   map[string]*worker
	outbox    []ref // final results not yet sent, in order (lazy deletion too)
	est       map[int64]*Estimator
	cancelled map[int64]bool
	nextBatch int64
	polls     []*poll
	dirty     bool // pending tasks, kills or estimates changed: retry parked polls
	reported  int  // results the queue acknowledged (for Stats)

	// Queue calls: at most one of each kind in flight.
	pullBusy, reportBusy, beatBusy, leaseBusy bool
	// lostMS is the run time of interrupted attempts not yet reported to
	// the queue; beatLost the part the heartbeat in flight carries.
	lostMS, beatLost                  int64
	pullAt, reportAt, beatAt, leaseAt time.Time
	// heldSince is when the oldest result in the outbox (not yet in a
	// report) became final; zero: none waits (ReportDelay).
	heldSince                          time.Time
	sent                               []ref // results of the report in flight
	ttl                                time.Duration
	releasing, flushGaveUp, lostGaveUp bool
	// handBackUntil: a stopping master takes workers' hand-backs until
	// then (HandBackWait after the stop began); zero: it does not.
	handBackUntil time.Time

	// The capacity rule (nil: off), the run times it has not seen yet and
	// its last decision.
	capa    *capacity.Controller
	samples []capacity.Sample
	capLast capacity.Decision

	phase phase
	rd    Ready
	// ops is where the ops of the Ready being built (from opsStart on)
	// are appended. Each Ready's Ops is a slice of it, capped so that
	// nothing appended later shows in it: one allocation for many Readies'
	// ops, not a slice grown op by op for each (the checkpoint keeps them
	// about a second). A full chunk is left to the Readies that hold it.
	ops      []Op
	opsStart int
	// urgent: an op of the Ready being built must be on disk before its
	// replies and queue calls go out (not Ready.Lazy).
	urgent bool

	size      int  // poolSize, when sizeKnown
	returning int  // restored workers not back yet, when sizeKnown
	sizeKnown bool // false whenever a worker registers or is forgotten
}

// opsChunk is the ops' allocation unit (about 100 KB).
const opsChunk = 1024

// New restores what the checkpoint holds (rows in the order they were
// stored, learnt estimates) at time now.
func New(cfg Config, rows []Row, estimates map[int64]Estimator, now time.Time) *Core {
	c := &Core{
		cfg: cfg, log: cfg.Logger,
		tasks: map[ref]*task{}, byJob: map[int64][]ref{}, workers: map[string]*worker{}, est: map[int64]*Estimator{},
		cancelled: map[int64]bool{}, ttl: cfg.LeaseTTL,
		pullAt: now, reportAt: now, beatAt: now, leaseAt: now,
	}
	if c.log == nil {
		c.log = slog.New(slog.DiscardHandler)
	}
	if cfg.Capacity != nil {
		c.capa = capacity.New(*cfg.Capacity)
	}
	for j, e := range estimates {
		c.est[j] = &e
	}
	for i := range rows {
		r := &rows[i]
		k := refOf(r.Task)
		t := &task{t: &r.Task, state: r.State, worker: r.Worker, batch: r.Batch, result: r.Result, handedAt: now}
		c.tasks[k] = t
		c.nextBatch = max(c.nextBatch, r.Batch)
		switch r.State {
		case StatePending:
			c.listPending(k, t)
			c.npending++
		case StateAssigned:
			w := c.workers[r.Worker]
			if w == nil {
				w = &worker{id: r.Worker, address: r.Address, lastSeen: now, out: map[ref]struct{}{}}
				c.workers[r.Worker] = w
			}
			w.out[k] = struct{}{}
			c.nassigned++
		case StateFinal:
			c.outbox = append(c.outbox, k)
			c.nfinal++
		}
	}
	if c.nfinal > 0 {
		c.heldSince = now
	}
	if len(rows) > 0 {
		c.log.Info("restored checkpoint", "pending", c.npending, "in_flight", c.nassigned,
			"unreported", c.nfinal, "workers", len(c.workers))
	}
	c.dirty = c.npending > 0
	return c
}

// RestoreCapacity resumes the capacity rule from the state a previous
// master checkpointed (nothing when the rule is off).
func (c *Core) RestoreCapacity(st capacity.State) {
	if c.capa != nil {
		c.capa = capacity.Restore(*c.cfg.Capacity, st)
	}
}

// Step feeds one event at time now.
func (c *Core) Step(now time.Time, ev Event) {
	if c.phase == done {
		if id, ok := reqOf(ev); ok {
			c.reply(Reply{Req: id, Err: ErrNotMaster})
		}
		return
	}
	switch e := ev.(type) {
	case Register:
		c.register(now, e)
	case Pull:
		c.pull(now, e)
	case Results:
		c.results(now, e)
	case Heartbeat:
		c.heartbeat(now, e)
	case Gone:
		c.gone(now, e.Req)
	case PilotGone:
		c.pilotGone(now, e)
	case Pulled:
		c.pulled(now, e)
	case Reported:
		c.reportedResults(now, e)
	case Beaten:
		c.beaten(now, e)
	case Leased:
		c.leased(now, e)
	case Tick:
		c.expire(now)
	case Stop:
		c.stop(now)
	case CommitFailed:
		c.fail(e.Err)
	}
	if c.phase == done {
		return
	}
	if c.dirty {
		c.dirty = false
		c.serveParked(now)
	}
	c.plan(now)
}

func reqOf(ev Event) (ReqID, bool) {
	switch e := ev.(type) {
	case Register:
		return e.Req, true
	case Pull:
		return e.Req, true
	case Results:
		return e.Req, true
	case Heartbeat:
		return e.Req, true
	}
	return 0, false
}

// Ready returns the effects accumulated since the last call and forgets
// them: the driver must carry them out (ops first).
func (c *Core) Ready() Ready {
	rd := c.rd
	c.rd = Ready{}
	if n := len(c.ops); n > c.opsStart {
		rd.Ops = c.ops[c.opsStart:n:n]
		c.opsStart = n
		rd.Lazy = !c.urgent
	}
	c.urgent = false
	return rd
}

// Next is when the core needs a Tick (zero: no timer pending).
func (c *Core) Next() time.Time {
	var next time.Time
	at := func(t time.Time) {
		if next.IsZero() || t.Before(next) {
			next = t
		}
	}
	if c.phase == done {
		return next
	}
	for _, p := range c.polls {
		at(p.until)
	}
	if c.phase == running {
		for _, w := range c.workers {
			if w.polls == 0 {
				at(w.lastSeen.Add(c.silence(w)))
			}
		}
		if !c.pullBusy && c.need() > 0 {
			at(c.pullAt)
		}
		if !c.beatBusy {
			at(c.beatAt)
		}
		if !c.leaseBusy {
			at(c.leaseAt)
		}
	}
	if !c.reportBusy && c.nfinal > 0 && !c.flushGaveUp {
		at(c.reportWhen())
	}
	if !c.handBackUntil.IsZero() {
		at(c.handBackUntil)
	}
	return next
}

// workersHold reports whether a registered worker holds a batch: a
// stopping master waits for its hand-back (HandBackWait).
func (c *Core) workersHold() bool {
	for _, w := range c.workers {
		if w.registered && len(w.out) > 0 {
			return true
		}
	}
	return false
}

// closeHandBack ends a stopping master's wait for hand-backs once its
// time is up or no worker holds a batch any more.
func (c *Core) closeHandBack(now time.Time) {
	if !c.handBackUntil.IsZero() && (!now.Before(c.handBackUntil) || !c.workersHold()) {
		c.handBackUntil = time.Time{}
	}
}

// Stats are the master's counters.
type Stats struct {
	Pending, Assigned, Unreported, Workers int
	Reported                               int // results acknowledged by the queue so far
}

// Stats returns the current counters.
func (c *Core) Stats() Stats {
	n := 0
	for _, w := range c.workers {
		if w.registered {
			n++
		}
	}
	return Stats{Pending: c.npending, Assigned: c.nassigned, Unreported: c.nfinal, Workers: n, Reported: c.reported}
}

func (c *Core) reply(r Reply) { c.rd.Replies = append(c.rd.Replies, r) }

// ---- state changes: applied to memory at once and listed in Ready.Ops ----

func (c *Core) do(o Op, now time.Time) {
	if len(c.ops) == cap(c.ops) {
		building := c.ops[c.opsStart:]
		next := make([]Op, len(building), max(opsChunk, 2*len(building)))
		copy(next, building)
		c.ops, c.opsStart = next, 0
	}
	c.ops = append(c.ops, o)
	// Lazy ops (Ready.Lazy): a task pulled that the master did not hold
	// (one it held is a stale row replaced: urgent), a result forgotten
	// once acknowledged.
	if (o.Kind != OpAdd || c.tasks[o.Ref] != nil) && o.Kind != OpDelete {
		c.urgent = true
	}
	if o.Kind == OpEstimate || o.Kind == OpFenceCheck || o.Kind == OpCapacity || o.Kind == OpWorker {
		return
	}
	t := c.tasks[o.Ref]
	c.leave(t)
	switch o.Kind {
	case OpAdd:
		t = &task{t: o.Task}
		c.tasks[o.Ref] = t
		c.toPending(o.Ref, t)
	case OpAssign:
		t.state, t.worker, t.batch, t.handedAt, t.size = StateAssigned, o.Worker, o.Batch, now, c.sampleSize()
		c.nassigned++
		c.worker(o.Worker, now).out[o.Ref] = struct{}{}
	case OpRequeue:
		c.toPending(o.Ref, t)
	case OpFinish:
		t.state, t.result = StateFinal, o.Result
		c.nfinal++
		c.outbox = append(c.outbox, o.Ref)
		if c.heldSince.IsZero() {
			c.heldSince = now
		}
	case OpDelete:
		delete(c.tasks, o.Ref)
	}
}

// leave takes a task out of its current state's counters.
func (c *Core) leave(t *task) {
	if t == nil {
		return
	}
	switch t.state {
	case StatePending:
		c.npending--
	case StateAssigned:
		c.nassigned--
		if w := c.workers[t.worker]; w != nil {
			delete(w.out, refOf(*t.t))
		}
	case StateFinal:
		c.nfinal--
	}
	t.state, t.worker, t.batch = "", "", 0
}

func (c *Core) toPending(k ref, t *task) {
	t.state, t.result = StatePending, nil
	c.listPending(k, t)
	c.npending++
	c.dirty = true
}

// listPending appends a task that became pending to the pending list and
// its job's.
func (c *Core) listPending(k ref, t *task) {
	c.pending = append(c.pending, k)
	c.byJob[t.t.JobID] = append(c.byJob[t.t.JobID], k)
}

func (c *Core) worker(id string, now time.Time) *worker {
	w := c.workers[id]
	if w == nil {
		w = &worker{id: id, lastSeen: now, out: map[ref]struct{}{}}
		c.workers[id] = w
	}
	return w
}

// resultFor is a result the master makes itself (interrupted, killed).
func (c *Core) resultFor(t *pilotproto.Task, status string, now time.Time) *pilotproto.Result {
	return &pilotproto.Result{TaskID: t.ID, Attempt: t.Attempt, Status: status, Pilot: c.cfg.PilotID, StartedAt: now.UnixMilli()}
}

// livePending lists the pending tasks once each, in order (the pending
// list may hold stale and repeated entries).
func (c *Core) livePending() []ref {
	live := make([]ref, 0, c.npending)
	seen := make(map[ref]bool, c.npending)
	for _, k := range c.pending {
		if t := c.tasks[k]; t != nil && t.state == StatePending && !seen[k] {
			seen[k] = true
			live = append(live, k)
		}
	}
	return live
}

func sortedRefs(set map[ref]struct{}) []ref {
	out := make([]ref, 0, len(set))
	for k := range set {
		out = append(out, k)
	}
	slices.SortFunc(out, cmpRef)
	return out
}

func cmpRef(a, b ref) int {
	if a.TaskID != b.TaskID {
		if a.TaskID < b.TaskID {
			return -1
		}
		return 1
	}
	return a.Attempt - b.Attempt
}
