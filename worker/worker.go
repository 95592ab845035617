// Package worker runs tasks for a master: it registers, pulls batches
// (long-poll), runs up to Slots tasks at once, reports results in batches
// and heartbeats. It survives a change of master: running tasks go on, and
// the worker registers with the next master listing what it holds.
package worker

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/go-resty/resty/v2"

	"github.com/harvest-hpc/harvest/pilotproto"
	"github.com/harvest-hpc/harvest/workerproto"
)

// Endpoint is a master to work for. Slots, when positive, replaces the
// configured slots (a master's own node keeps a core for the master).
type Endpoint struct {
	URL   string
	Slots int
}

// Resolver finds the master: called at start and whenever the master is
// lost. The pilot implements it with the queue's lease.
type Resolver func(ctx context.Context) (Endpoint, error)

// Causes of a task's cancellation; they decide the reported status.
var (
	errInterrupted = errors.New("pilot stopping")
	errKilled      = errors.New("job cancelled")
	errDropped     = errors.New("task reassigned by the master")
	// ErrMasterLost: the master did not answer for MasterGrace.
	ErrMasterLost = errors.New("master lost")
)

type ref = pilotproto.TaskRef

func refOf(t pilotproto.Task) ref { return ref{TaskID: t.ID, Attempt: t.Attempt} }

type running struct {
	t      pilotproto.Task
	cancel context.CancelCauseFunc // a task of its own; else g's i-th
	g      *group
	i      int
}

// group is tasks of one job handed together to a GroupRunner, which runs
// up to allot of them at once; the worker counts slots = min(allot,
// left) of its slots busy with them, and the rest as held. All of it
// under the worker's mu, but h's calls.
type group struct {
	ts           []pilotproto.Task
	h            TaskGroup // nil until StartGroup returned
	smu          sync.Mutex
	allot, left  int
	slots        int
	cause        []error    // why the worker stopped each task (nil: it did not)
	ended        []bool     // reported (or dropped)
	held         []*Outcome // ended by a stop signal: the pilot's decision awaited
	stops        []int      // asked before h was set
	initialSlots int        // what StartGroup was given
}

// Worker is one worker process (or the side worker of a master's pilot).
type Worker struct {
	cfg     Config
	resolve Resolver
	log     *slog.Logger
	http    *resty.Client

	mu      sync.Mutex
	slots   int
	cur     *client
	queue   []pilotproto.Task
	running map[ref]*running
	busy    int      // slots in use (a batched command's run takes one for all its tasks)
	groups  []*group // groups not ended, oldest first
	// groupEnds counts the groups that ended (GroupResultDelay: a group's
	// end sends the results waiting).
	groupEnds int64
	unitOf    map[ref]int64       // queued tasks of a batched command: their batch
	dropped   map[ref]bool        // running tasks the master gave to someone else: not reported
	results   []pilotproto.Result // not yet acknowledged by a master
	draining  bool
	stop      <-chan struct{} // closed when the pilot decided to stop (Run's ctx)
	changed   chan struct{}
	tasks     sync.WaitGroup
	finished  atomic.Int64
	// taskTime and roundTrip are moving averages of a task's run time and
	// of a pull that brought work, for the automatic prefetch (under mu).
	taskTime, roundTrip time.Duration
	timed               bool // a task's time was seen
	// lastContact is the last answer from any master: the grace before
	// going back to the lease counts from it, so a worker sent again to a
	// master that is already dead (its lease not yet expired) asks the
	// lease again at once instead of waiting a whole grace each time.
	lastContact atomic.Int64
}

// New checks cfg and returns a worker.
func New(cfg Config, resolve Resolver) (*Worker, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	w := &Worker{
		cfg: cfg, resolve: resolve, log: cfg.Logger.With("component", "worker", "worker", cfg.ID),
		http: newHTTP(cfg.Token), slots: cfg.Slots,
		running: map[ref]*running{}, unitOf: map[ref]int64{}, dropped: map[ref]bool{}, changed: make(chan struct{}),
	}
	w.lastContact.Store(time.Now().UnixNano())
	return w, nil
}

// Finished is the number of tasks this worker ran to an end.
func (w *Worker) Finished() int64 { return w.finished.Load() }

func (w *Worker) capacity() int {
	p := w.cfg.Prefetch
	if p < 0 {
		p = w.autoPrefetch()
	}
	return w.slots + p
}

// maxPrefetch bounds the automatic prefetch, in slots. Only tasks
// shorter than a 128th of a round trip reach it (tens of microseconds:
// no real process starts that fast), so a worker of real tasks never
// holds that much; for no-op tasks 16 slots' worth made an exchange carry
// about 34 tasks, and 128 about 200 (`harvest bench dispatch --in-memory`,
// 1,000 users: master 97 -> 53 us, workers 51 -> 29 us of CPU per task).
const maxPrefetch = 128

// autoPrefetch is how many tasks the worker holds beyond its slots when
// Prefetch is automatic (-1): a slot's worth each, or, when its tasks are
// shorter than an exchange with the master, enough to keep every slot
// busy through one (slots x round trip / task time), up to maxPrefetch
// slots' worth. Short tasks then come and go in batches of tens instead
// of one or two per exchange, each exchange costing more CPU than such a
// task (measured: 169 -> 66 us of worker CPU per no-op task). The master
// still hands out only what fits the pilot's deadline. Called with mu
// held.
func (w *Worker) autoPrefetch() int {
	if !w.timed || w.roundTrip <= 0 {
		return w.slots
	}
	need := float64(w.slots) * float64(w.roundTrip) / float64(max(w.taskTime, 10*time.Microsecond))
	return min(max(w.slots, int(math.Ceil(need))), maxPrefetch*w.slots)
}

// ewma folds a sample into a moving average (a fifth of the weight to the
// new sample).
func ewma(avg, sample time.Duration) time.Duration {
	if avg == 0 {
		return sample
	}
	return avg + (sample-avg)/5
}

// notify wakes the loops; called with mu held.
func (w *Worker) notify() {
	close(w.changed)
	w.changed = make(chan struct{})
}

// Run works until ctx ends, then stops like a pilot that got SIGTERM:
// takes no more work, kills running tasks (process group), reports them
// and the queued ones as interrupted, and returns within seconds.
func (w *Worker) Run(ctx context.Context) error {
	w.stop = ctx.Done()
	dctx, dstop := context.WithCancel(context.Background())
	defer dstop()
	go w.dispatch(dctx)
	// A new master may need a moment to open its checkpoint, and the old
	// lease a while to expire: the lease is asked again with backoff.
	bo := backoff.NewExponentialBackOff()
	bo.InitialInterval, bo.MaxInterval, bo.MaxElapsedTime = w.cfg.RetryInterval, 5*time.Second, 0
	for ctx.Err() == nil {
		ep, err := w.resolve(ctx)
		if err != nil {
			if ctx.Err() != nil {
				break
			}
			d := bo.NextBackOff()
			w.log.Warn("no master yet", "error", err, "retry_in", d)
			sleep(ctx, d)
			continue
		}
		w.mu.Lock()
		w.cur = &client{base: ep.URL, r: w.http}
		w.slots = w.cfg.Slots
		if ep.Slots > 0 {
			w.slots = ep.Slots
		}
		w.notify()
		w.mu.Unlock()
		err = w.session(ctx)
		if ctx.Err() != nil {
			break
		}
		if time.Since(time.Unix(0, w.lastContact.Load())) < w.cfg.MasterGrace {
			bo.Reset() // the master answered lately: a short wait, not the grown one
		}
		d := bo.NextBackOff()
		w.log.Warn("master lost; back to the lease", "master", ep.URL, "error", err, "retry_in", d)
		sleep(ctx, d)
	}
	w.shutdown()
	return nil
}

func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// session works for one master until it is lost or ctx ends.
type session struct {
	w      *Worker
	c      *client
	lastOK atomic.Int64
	lost   context.CancelCauseFunc
}

func (s *session) ok() {
	now := time.Now().UnixNano()
	s.lastOK.Store(now)
	s.w.lastContact.Store(now)
}

// trouble decides whether a failed call means the master is gone.
func (s *session) trouble(ctx context.Context, err error) {
	if ctx.Err() != nil {
		return
	}
	if errors.Is(err, ErrNotMaster) {
		s.lost(err)
		return
	}
	if errors.Is(err, syscall.ECONNREFUSED) {
		// Nothing listens at the master's address: its process is dead
		// (kill -9, crash), not slow. Back to the lease now, not after the grace.
		s.lost(fmt.Errorf("%w: %w", ErrMasterLost, err))
		return
	}
	if time.Since(time.Unix(0, s.lastOK.Load())) > s.w.cfg.MasterGrace {
		s.lost(fmt.Errorf("%w: %w", ErrMasterLost, err))
		return
	}
	s.w.log.Debug("master call failed", "error", err)
	sleep(ctx, s.w.cfg.RetryInterval)
}

func (w *Worker) session(ctx context.Context) error {
	sctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	w.mu.Lock()
	s := &session{w: w, c: w.cur, lost: cancel}
	w.mu.Unlock()
	s.lastOK.Store(w.lastContact.Load())
	if !s.register(sctx) {
		return context.Cause(sctx)
	}
	var wg sync.WaitGroup
	for _, loop := range []func(context.Context){s.pullLoop, s.sendLoop, s.heartbeatLoop} {
		wg.Add(1)
		go func() { defer wg.Done(); loop(sctx) }()
	}
	<-sctx.Done()
	wg.Wait()
	return context.Cause(sctx)
}

// register (re)introduces the worker, retrying until the master answers
// or is declared lost. Returns false when the session is over.
func (s *session) register(ctx context.Context) bool {
	w := s.w
	for ctx.Err() == nil {
		w.mu.Lock()
		req := workerproto.RegisterRequest{WorkerID: w.cfg.ID, PilotID: w.cfg.PilotID, Slots: w.slots, Capacity: w.capacity(),
			Confinement: w.cfg.Confinement, Address: w.cfg.Address}
		if !w.cfg.Deadline.IsZero() {
			req.Deadline = w.cfg.Deadline.UnixMilli()
		}
		for _, t := range w.queue {
			req.Held = append(req.Held, refOf(t))
		}
		for k := range w.running {
			req.Held = append(req.Held, k)
		}
		for _, r := range w.results {
			req.Finished = append(req.Finished, ref{TaskID: r.TaskID, Attempt: r.Attempt})
		}
		w.mu.Unlock()
		var resp workerproto.RegisterResponse
		if err := s.c.post(ctx, workerproto.PathRegister, req, &resp); err != nil {
			s.trouble(ctx, err)
			continue
		}
		s.ok()
		w.drop(resp.Drop)
		w.log.Info("registered", "master", s.c.base, "epoch", resp.Epoch, "held", len(req.Held), "dropped", len(resp.Drop))
		return true
	}
	return false
}

func (s *session) pullLoop(ctx context.Context) {
	w := s.w
	for ctx.Err() == nil {
		w.mu.Lock()
		free := w.capacity() - w.held()
		draining := w.draining
		ch := w.changed
		w.mu.Unlock()
		if free <= 0 || draining {
			select {
			case <-ch:
			case <-ctx.Done():
			}
			continue
		}
		var resp workerproto.PullResponse
		req := workerproto.PullRequest{WorkerID: w.cfg.ID, Free: free, WaitMS: w.cfg.PullWait.Milliseconds(), Compact: true}
		pctx, cancel := context.WithTimeout(ctx, w.cfg.PullWait+15*time.Second)
		sent := time.Now()
		err := s.c.post(pctx, workerproto.PathPull, req, &resp)
		cancel()
		if err == nil && len(resp.Batches) > 0 {
			w.mu.Lock()
			w.roundTrip = ewma(w.roundTrip, time.Since(sent))
			w.mu.Unlock()
		}
		if err != nil {
			if errors.Is(err, ErrUnknownWorker) {
				s.register(ctx)
				continue
			}
			s.trouble(ctx, err)
			continue
		}
		s.ok()
		w.accept(resp.Batches)
		w.killJobs(resp.KillJobs)
	}
}

func (s *session) sendLoop(ctx context.Context) {
	w := s.w
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	defer timer.Stop()
	var first time.Time // when the oldest result waiting was first seen
	w.mu.Lock()
	mark := w.groupEnds // the groups ended by the last request
	w.mu.Unlock()
	for ctx.Err() == nil {
		w.mu.Lock()
		n := min(len(w.results), w.cfg.ResultBatch)
		if n > 0 && first.IsZero() {
			first = time.Now()
		}
		var hold time.Duration
		if n > 0 {
			hold = w.holdResults(n, first, mark)
		}
		var batch []pilotproto.Result
		if n > 0 && hold <= 0 {
			batch = append(batch, w.results[:n]...)
			mark = w.groupEnds
		}
		ch := w.changed
		w.mu.Unlock()
		if batch == nil {
			var wake <-chan time.Time
			if hold > 0 {
				timer.Reset(hold)
				wake = timer.C
			}
			select {
			case <-ch:
			case <-wake:
			case <-ctx.Done():
			}
			timer.Stop()
			continue
		}
		if err := w.sendResults(ctx, s.c, batch, false); err != nil {
			s.trouble(ctx, err)
			continue
		}
		first = time.Time{}
		s.ok()
	}
}

// holdResults is how much longer the n results waiting (the oldest seen
// at first) may wait for others to join their request (ResultDelay): only
// while the worker runs or holds tasks whose results could join them,
// fewer than ResultBatch wait, all are plain successes and the worker is
// not stopping. While groups run and none ended since the last request
// (the count was mark then), they may wait GroupResultDelay: a group's
// results go together. Called with mu held.
func (w *Worker) holdResults(n int, first time.Time, mark int64) time.Duration {
	if w.cfg.ResultDelay <= 0 || n >= w.cfg.ResultBatch || w.draining || (w.busy == 0 && len(w.queue) == 0) {
		return 0
	}
	for i := range n {
		if r := &w.results[i]; r.Status != pilotproto.StatusDone || r.ExitCode != 0 || r.ErrorTail != "" {
			return 0
		}
	}
	delay := w.cfg.ResultDelay
	if len(w.groups) > 0 && w.groupEnds == mark {
		delay = max(delay, w.cfg.GroupResultDelay)
	}
	return delay - time.Since(first)
}

// sendResults posts results and forgets them once acknowledged.
func (w *Worker) sendResults(ctx context.Context, c *client, batch []pilotproto.Result, leaving bool) error {
	var resp workerproto.ResultsResponse
	req := workerproto.ResultsRequest{WorkerID: w.cfg.ID, Results: batch, Leaving: leaving}
	if err := c.post(ctx, workerproto.PathResults, req, &resp); err != nil {
		return err
	}
	w.mu.Lock()
	// Only one sender at a time removes from the front; others append.
	w.results = w.results[len(batch):]
	w.mu.Unlock()
	return nil
}

func (s *session) heartbeatLoop(ctx context.Context) {
	w := s.w
	t := time.NewTicker(w.cfg.HeartbeatInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		w.mu.Lock()
		req := workerproto.HeartbeatRequest{WorkerID: w.cfg.ID, Complete: true}
		for k := range w.running {
			req.Held = append(req.Held, k)
		}
		for _, t := range w.queue {
			req.Held = append(req.Held, refOf(t))
		}
		for _, r := range w.results {
			req.Held = append(req.Held, ref{TaskID: r.TaskID, Attempt: r.Attempt})
		}
		w.mu.Unlock()
		var resp workerproto.HeartbeatResponse
		if err := s.c.post(ctx, workerproto.PathHeartbeat, req, &resp); err != nil {
			if errors.Is(err, ErrUnknownWorker) {
				s.register(ctx)
				continue
			}
			s.trouble(ctx, err)
			continue
		}
		s.ok()
		w.killJobs(resp.KillJobs)
		if resp.DeadlineMS > 0 {
			w.pullIn(time.UnixMilli(resp.DeadlineMS))
		}
	}
}

// pullIn moves the worker's deadline earlier to t (never later): a later
// registration reports it, and the pilot hears of it through OnDeadline.
func (w *Worker) pullIn(t time.Time) {
	w.mu.Lock()
	moved := w.cfg.Deadline.IsZero() || t.Before(w.cfg.Deadline)
	if moved {
		w.cfg.Deadline = t
	}
	w.mu.Unlock()
	if moved {
		w.log.Info("pilot end pulled in", "deadline", t)
		if w.cfg.OnDeadline != nil {
			w.cfg.OnDeadline(t)
		}
	}
}

func (w *Worker) accept(batches []workerproto.Batch) {
	if len(batches) == 0 {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, b := range batches {
		if len(b.Tasks) > 0 && pilotproto.Batched(b.Tasks[0].Command) {
			// Run once for the whole batch (dispatch).
			for _, t := range b.Tasks {
				w.unitOf[refOf(t)] = b.ID
			}
		}
		w.queue = append(w.queue, b.Tasks...)
	}
	w.notify()
}

// drop forgets tasks the master gave to someone else: queued ones are
// removed, running ones killed, and neither is reported.
func (w *Worker) drop(refs []ref) {
	if len(refs) == 0 {
		return
	}
	set := map[ref]bool{}
	for _, k := range refs {
		set[k] = true
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	q := w.queue[:0]
	for _, t := range w.queue {
		if !set[refOf(t)] {
			q = append(q, t)
		} else {
			delete(w.unitOf, refOf(t))
		}
	}
	w.queue = q
	stops := map[*group][]int{}
	for k, r := range w.running {
		if set[k] {
			w.dropped[k] = true
			w.stopRunning(r, errDropped, stops)
		}
	}
	w.stopGroups(stops)
	w.notify()
}

// killJobs stops the tasks of cancelled jobs and reports them killed.
func (w *Worker) killJobs(jobs []int64) {
	if len(jobs) == 0 {
		return
	}
	set := map[int64]bool{}
	for _, j := range jobs {
		set[j] = true
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	q := w.queue[:0]
	for _, t := range w.queue {
		if set[t.JobID] {
			delete(w.unitOf, refOf(t))
			w.results = append(w.results, w.result(t, Outcome{Status: pilotproto.StatusKilled, StartedAt: time.Now()}))
			continue
		}
		q = append(q, t)
	}
	w.queue = q
	stops := map[*group][]int{}
	for _, r := range w.running {
		if set[r.t.JobID] {
			w.stopRunning(r, errKilled, stops)
		}
	}
	w.stopGroups(stops)
	w.notify()
}

func (w *Worker) result(t pilotproto.Task, o Outcome) pilotproto.Result {
	return pilotproto.Result{TaskID: t.ID, Attempt: t.Attempt, Status: o.Status, ExitCode: o.ExitCode,
		StartedAt: o.StartedAt.UnixMilli(), DurationMS: o.Duration.Milliseconds(), Pilot: w.cfg.PilotID, ErrorTail: o.ErrorTail}
}

// held is how many slots' worth of work the worker holds: its busy slots
// and its queued runs (a task, or all the queued tasks of one batch of a
// batched command, which run once). Called with mu held.
func (w *Worker) held() int {
	n := w.busy
	for _, g := range w.groups {
		n += g.left - g.slots // handed to the runner, not yet in a slot
	}
	last, prev := int64(0), false
	for _, t := range w.queue {
		id, ok := w.unitOf[refOf(t)]
		if !ok || !prev || id != last {
			n++
		}
		last, prev = id, ok
	}
	return n
}

// dispatch starts queued tasks while slots are free: a task, or the
// queued tasks of one batch of a batched command, per slot; with a
// GroupRunner, the queued tasks of one job (GroupKey) at once, as a group
// that keeps its slots full itself. Free slots go to the groups that have
// tasks waiting first.
func (w *Worker) dispatch(ctx context.Context) {
	gr, _ := w.cfg.Runner.(GroupRunner)
	for {
		w.mu.Lock()
		var grown []*group
		// A new master may grant fewer slots than the last: the groups
		// give the excess back, the latest first, each keeping one. Their
		// runners start no task until they run fewer than their new
		// count (nothing running is stopped), and nothing new starts here
		// while the worker is at its slots.
		for i := len(w.groups) - 1; i >= 0 && w.busy > w.slots; i-- {
			g := w.groups[i]
			if cut := min(w.busy-w.slots, g.allot-1); cut > 0 {
				g.allot -= cut
				w.regroup(g)
				grown = append(grown, g)
			}
		}
		for _, g := range w.groups {
			if free := w.slots - w.busy; !w.draining && free > 0 && g.left > g.allot {
				g.allot += min(free, g.left-g.allot)
				w.regroup(g)
				grown = append(grown, g)
			}
		}
		for !w.draining && w.busy < w.slots && len(w.queue) > 0 {
			if key := w.groupKey(gr, w.queue[0]); key != "" {
				n := 1
				for n < len(w.queue) && w.groupKey(gr, w.queue[n]) == key {
					n++
				}
				w.startGroup(gr, w.queue[:n:n])
				w.queue = w.queue[n:]
				continue
			}
			n := 1
			if id, ok := w.unitOf[refOf(w.queue[0])]; ok {
				for n < len(w.queue) {
					if b, ok := w.unitOf[refOf(w.queue[n])]; !ok || b != id {
						break
					}
					n++
				}
			}
			ts := w.queue[:n:n]
			w.queue = w.queue[n:]
			for _, t := range ts {
				delete(w.unitOf, refOf(t))
			}
			w.start(ts)
		}
		ch := w.changed
		w.mu.Unlock()
		for _, g := range grown {
			w.syncSlots(g)
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return
		}
	}
}

// groupKey is t's GroupKey ("": t runs alone). Called with mu held.
func (w *Worker) groupKey(gr GroupRunner, t pilotproto.Task) string {
	if gr == nil {
		return ""
	}
	if _, ok := w.unitOf[refOf(t)]; ok {
		return ""
	}
	return gr.GroupKey(t)
}

// startGroup hands ts to the GroupRunner as a group, with as many slots
// as are free; called with mu held.
func (w *Worker) startGroup(gr GroupRunner, ts []pilotproto.Task) {
	g := &group{ts: ts, allot: min(w.slots-w.busy, len(ts)), left: len(ts),
		cause: make([]error, len(ts)), ended: make([]bool, len(ts)), held: make([]*Outcome, len(ts))}
	w.regroup(g)
	g.initialSlots = g.slots
	rs := make([]running, len(ts)) // one allocation for the group's
	for i, t := range ts {
		rs[i] = running{t: t, g: g, i: i}
		w.running[refOf(t)] = &rs[i]
	}
	w.groups = append(w.groups, g)
	w.tasks.Add(1)
	go func() {
		h := gr.StartGroup(ts, g.initialSlots, func(idx []int, os []Outcome) { w.groupEnded(g, idx, os) })
		w.mu.Lock()
		g.h = h
		stops := g.stops
		g.stops = nil
		w.mu.Unlock()
		if len(stops) > 0 {
			h.Stop(stops...)
		}
		w.syncSlots(g)
	}()
}

// regroup counts g's busy slots anew: min(allot, left). Called with mu
// held; syncSlots tells its runner.
func (w *Worker) regroup(g *group) {
	n := min(g.allot, g.left)
	w.busy += n - g.slots
	g.slots = n
}

// syncSlots tells g's runner its slots as they are now (in order: the
// last call sends the last figure). Called without mu.
func (w *Worker) syncSlots(g *group) {
	g.smu.Lock()
	defer g.smu.Unlock()
	w.mu.Lock()
	h, n := g.h, g.slots
	w.mu.Unlock()
	if h != nil && n > 0 {
		h.SetSlots(n)
	}
}

// groupEnded takes a wave of g's ended tasks.
func (w *Worker) groupEnded(g *group, idx []int, outs []Outcome) {
	w.mu.Lock()
	for k, i := range idx {
		o := outs[k]
		if g.ended[i] {
			continue
		}
		if g.cause[i] == nil && o.Status == pilotproto.StatusFailed && (w.stopping() || stopSignal(o)) {
			// As for a task of its own (start): the pilot decides within
			// the grace whether it was interrupted.
			g.held[i] = &o
			time.AfterFunc(w.cfg.StopGrace, func() {
				w.mu.Lock()
				if !g.ended[i] {
					w.endGroupTask(g, i, *g.held[i])
					w.notify()
				}
				w.mu.Unlock()
				w.syncSlots(g)
			})
			continue
		}
		w.endGroupTask(g, i, o)
	}
	w.notify()
	w.mu.Unlock()
	w.syncSlots(g)
}

// endGroupTask reports g's i-th task with o, as its cause says; called
// with mu held, the caller wakes the loops (notify: once per wave).
func (w *Worker) endGroupTask(g *group, i int, o Outcome) {
	g.ended[i], g.held[i] = true, nil
	g.left--
	o = w.settle(o, g.cause[i])
	k := refOf(g.ts[i])
	delete(w.running, k)
	if w.dropped[k] {
		delete(w.dropped, k)
	} else {
		w.finished.Add(1)
		w.results = append(w.results, w.result(g.ts[i], o))
	}
	w.regroup(g)
	if g.left == 0 {
		for j, o := range w.groups {
			if o == g {
				w.groups = append(w.groups[:j], w.groups[j+1:]...)
				break
			}
		}
		w.groupEnds++
		w.tasks.Done()
	}
}

// settle gives an outcome the status its cause says, and learns the
// task's time; called with mu held.
func (w *Worker) settle(o Outcome, cause error) Outcome {
	switch {
	case errors.Is(cause, errDropped), errors.Is(cause, errInterrupted):
		// Dropped: the others of a batched run one of whose tasks went
		// to another worker; not run to an end here, no attempt.
		o.Status = pilotproto.StatusInterrupted
	case errors.Is(cause, errKilled):
		o.Status = pilotproto.StatusKilled
	}
	if o.Status == pilotproto.StatusDone || o.Status == pilotproto.StatusFailed {
		w.taskTime, w.timed = ewma(w.taskTime, o.Duration), true
	}
	return o
}

// stopRunning stops a running task for cause: its own, at once; a
// group's, through stops (stopGroups), or at once if it ended already
// and waits for the pilot's decision. Called with mu held.
func (w *Worker) stopRunning(r *running, cause error, stops map[*group][]int) {
	if r.g == nil {
		r.cancel(cause)
		return
	}
	g, i := r.g, r.i
	if g.ended[i] {
		return
	}
	if g.cause[i] == nil {
		g.cause[i] = cause
	}
	if o := g.held[i]; o != nil {
		w.endGroupTask(g, i, *o)
		return
	}
	stops[g] = append(stops[g], i)
}

// stopGroups sends the stops stopRunning collected, off mu (a group not
// started yet gets them when it is); called with mu held.
func (w *Worker) stopGroups(stops map[*group][]int) {
	for g, idx := range stops {
		if g.h == nil {
			g.stops = append(g.stops, idx...)
			continue
		}
		go g.h.Stop(idx...)
	}
}

// start runs ts (one task, or a batch of a batched command) in a
// goroutine of its own, in one slot; called with mu held.
func (w *Worker) start(ts []pilotproto.Task) {
	tctx, cancel := context.WithCancelCause(context.Background())
	for _, t := range ts {
		w.running[refOf(t)] = &running{t: t, cancel: cancel}
	}
	w.busy++
	w.tasks.Add(1)
	go func() {
		defer w.tasks.Done()
		o := w.run(tctx, ts)
		if context.Cause(tctx) == nil && o.Status == pilotproto.StatusFailed && (w.stopping() || stopSignal(o)) {
			// Not our kill: the batch system's stop signal reaches the
			// task as well as the pilot, maybe first. The pilot decides:
			// if it stops within the grace, shutdown cancels this task
			// (still listed as running) as interrupted: no attempt.
			tm := time.NewTimer(w.cfg.StopGrace)
			select {
			case <-tctx.Done():
			case <-tm.C:
			}
			tm.Stop()
		}
		cause := context.Cause(tctx)
		cancel(nil)
		w.mu.Lock()
		defer w.mu.Unlock()
		w.busy--
		// The prefetch counts runs (a batched run takes a slot as a task
		// does); each entry of a batched run reports its share of the
		// run's time: the master learns a task's time per entry.
		o = w.settle(o, cause)
		o.Duration /= time.Duration(len(ts))
		for _, t := range ts {
			k := refOf(t)
			delete(w.running, k)
			if w.dropped[k] {
				delete(w.dropped, k)
				continue
			}
			w.finished.Add(1)
			w.results = append(w.results, w.result(t, o))
		}
		w.notify()
	}()
}

// run runs one task, or a batched command once for its batch's tasks ts
// (through the runner's RunBatch; a runner without one runs them one by
// one, the first failure standing for all).
func (w *Worker) run(ctx context.Context, ts []pilotproto.Task) Outcome {
	if len(ts) == 1 && !pilotproto.Batched(ts[0].Command) {
		return w.cfg.Runner.Run(ctx, ts[0])
	}
	if br, ok := w.cfg.Runner.(BatchRunner); ok {
		return br.RunBatch(ctx, ts)
	}
	var o Outcome
	start := time.Now()
	for _, t := range ts {
		if o = w.cfg.Runner.Run(ctx, t); o.Status != pilotproto.StatusDone {
			break
		}
	}
	o.StartedAt, o.Duration = start, time.Since(start)
	return o
}

// stopping reports whether the pilot decided to stop.
func (w *Worker) stopping() bool {
	select {
	case <-w.stop:
		return true
	default:
		return false
	}
}

// stopSignal reports whether a task ended by a signal a batch system sends
// the processes of a job it stops (scancel, time limit, preemption,
// --signal), itself or as a shell's exit code 128+n.
func stopSignal(o Outcome) bool {
	sig := o.Signal
	if sig == 0 && o.ExitCode > 128 && o.ExitCode < 128+65 {
		sig = syscall.Signal(o.ExitCode - 128)
	}
	switch sig {
	case syscall.SIGTERM, syscall.SIGKILL, syscall.SIGINT, syscall.SIGHUP, syscall.SIGUSR1, syscall.SIGUSR2, syscall.SIGXCPU:
		return true
	}
	return false
}

// shutdown interrupts everything and hands it back to the current master:
// the queued tasks at once (the batch system's SIGKILL follows its
// SIGTERM after KillWait), then the running ones once they have stopped,
// with the worker's deregistration.
func (w *Worker) shutdown() {
	w.mu.Lock()
	w.draining = true
	for _, t := range w.queue {
		w.results = append(w.results, w.result(t, Outcome{Status: pilotproto.StatusInterrupted, StartedAt: time.Now()}))
	}
	w.queue = nil
	clear(w.unitOf)
	stops := map[*group][]int{}
	for _, r := range w.running {
		w.stopRunning(r, errInterrupted, stops)
	}
	w.stopGroups(stops)
	starting := w.dropStarting()
	w.notify()
	c := w.cur
	w.mu.Unlock()

	ctx, cancel := context.WithTimeout(context.Background(), w.cfg.ShutdownTimeout)
	defer cancel()
	if c != nil {
		w.flush(ctx, c, false)
	}
	done := make(chan struct{})
	go func() { w.tasks.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
		w.log.Warn("tasks did not stop in time")
	}
	if c != nil {
		// The deregistration goes even when the wait above used the time
		// up: without it the master holds what is left until its worker
		// timeout; with it, it requeues that at once (this process ends
		// next, its runners and tasks with it: parent-death signals).
		lctx, lcancel := context.WithTimeout(context.Background(), w.cfg.ShutdownTimeout)
		w.flush(lctx, c, true)
		lcancel()
	}
	if cl, ok := w.cfg.Runner.(io.Closer); ok {
		if starting {
			// A runner still starting may never answer (killed by the
			// batch system's SIGTERM before it could catch it), and
			// closing waits for every runner: the pilot must not.
			go cl.Close()
		} else {
			cl.Close()
		}
	}
}

// dropStarting reports, as interrupted, the tasks of the groups whose
// runner has not taken them yet (StartGroup not returned) and tells
// whether there were any. Nothing of theirs has ended, and their runner
// may be dead: the batch system's SIGTERM reaches every process of the
// pilot, a runner still in the Go runtime's start too (where SIGTERM
// kills), and its start then never returns. The pilot stops at once
// instead of waiting for it until SIGKILL, its master told; the runner
// is told to stop them if it does take them (g.stops), and what it says
// of them then is ignored (ended). Called with mu held.
func (w *Worker) dropStarting() bool {
	var starting []*group
	for _, g := range w.groups {
		if g.h == nil {
			starting = append(starting, g)
		}
	}
	now := time.Now()
	for _, g := range starting {
		for i := range g.ts {
			if !g.ended[i] {
				w.endGroupTask(g, i, Outcome{Status: pilotproto.StatusInterrupted, StartedAt: now})
			}
		}
	}
	return len(starting) > 0
}

// flush reports every pending result; leaving adds the deregistration to
// the last request (sent even with no result).
func (w *Worker) flush(ctx context.Context, c *client, leaving bool) {
	for ctx.Err() == nil {
		w.mu.Lock()
		n := min(len(w.results), w.cfg.ResultBatch)
		batch := append([]pilotproto.Result(nil), w.results[:n]...)
		last := n == len(w.results)
		w.mu.Unlock()
		if n == 0 && !leaving {
			return
		}
		if err := w.sendResults(ctx, c, batch, leaving && last); err != nil {
			w.log.Warn("could not hand tasks back; the master requeues them when this worker times out", "error", err)
			return
		}
		if last {
			if leaving {
				w.log.Info("deregistered", "master", c.base, "results", n)
			}
			return
		}
	}
}
