// Package master is the elected master of a harvest pool. Its decisions
// are made by package core, a pure state machine; this package is the
// driver around it: one goroutine (Run) feeds the core the workers'
// requests, the queue's answers and the clock, commits the core's
// checkpoint ops before anything else, then sends its replies and starts
// its queue calls. Nothing else touches the core.
//
//	worker HTTP ──request──▶ ┌──────── Run ─────────┐ ──Pull/Report/Beat/Lease──▶ queue
//	                         │ core.Step(now, event)│
//	worker ◀──reply───────── │ rd := core.Ready()   │ ◀──Pulled/Reported/...────
//	                         │ commit rd.Ops first  │
//	                         └──────────────────────┘
package master

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/harvest-hpc/harvest/master/core"
	"github.com/harvest-hpc/harvest/workerproto"
)

// Stats are the master's counters (for logs, tests and the bench).
type Stats = core.Stats

// Errors the master answers workers with.
var (
	ErrUnknownWorker = core.ErrUnknownWorker // register again
	ErrNotMaster     = core.ErrNotMaster     // this master stopped: back to the lease
)

// Master is one master epoch. Create it with New, run it with Run, serve
// its workers with Handler.
type Master struct {
	cfg  Config
	q    Queue
	cp   *Checkpoint
	core *core.Core // owned by Run's goroutine
	log  *slog.Logger

	in      chan input    // worker requests and queue answers for Run
	done    chan struct{} // closed when Run returns
	nextReq atomic.Uint64

	// probe asks a pilot whether it is alive (Probe; tests: their own),
	// onProbe hears each restored worker's verdict (tests).
	probe   func(context.Context, string, time.Duration) Verdict
	onProbe func(worker string, v Verdict, gone bool)

	mu      sync.Mutex
	stats   Stats
	changed chan struct{} // closed and replaced when stats change
}

// input is one event for Run; reply is set for worker requests.
type input struct {
	ev    core.Event
	req   core.ReqID
	reply chan core.Reply
}

// New opens the checkpoint, claims it for cfg.Epoch (fencing older
// masters) and restores what a previous master left: pending tasks,
// batches in flight (kept for ReconnectGrace), unacknowledged results and
// learnt task durations.
func New(cfg Config, q Queue) (*Master, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	opening := time.Now()
	cp, restored, err := OpenCheckpoint(cfg.CheckpointDir, cfg.Epoch, cfg.JournalMode)
	if err != nil {
		return nil, err
	}
	if cfg.LeaseTTL > 0 && !cfg.LeaseSince.IsZero() {
		cp.HoldUntil(cfg.LeaseSince.Add(holdFor(cfg.LeaseTTL)))
	}
	rows, est, err := cp.Load()
	if err != nil {
		cp.Close()
		return nil, err
	}
	capState, err := cp.LoadCapacity()
	if err != nil {
		cp.Close()
		return nil, err
	}
	log := cfg.Logger.With("component", "master", "epoch", cfg.Epoch)
	log.Info("checkpoint opened", "file", cp.Path(), "from", restored.From, "journal", restored.Journal,
		"removed", restored.Removed, "tasks", len(rows), "took", time.Since(opening).Round(time.Millisecond))
	cc := cfg.core()
	cc.Logger = log
	m := &Master{
		cfg: cfg, q: q, cp: cp, log: log, core: core.New(cc, rows, est, cfg.Now()),
		in: make(chan input), done: make(chan struct{}), changed: make(chan struct{}), probe: Probe,
	}
	if capState != nil {
		m.core.RestoreCapacity(*capState)
	}
	m.stats = m.core.Stats()
	return m, nil
}

// Run drives the master until ctx ends (graceful stop: tasks never handed
// out go back to the queue, results are flushed, the lease is released;
// at most ShutdownTimeout) or the master is fenced (a newer master exists:
// it stops writing at once). The error says which.
//
// Commits are grouped: one goroutine writes the checkpoint while Run
// goes on stepping the core; the effects of the Readies taken meanwhile
// wait in a group that is committed in one transaction when the commit
// in flight ends. Write-ahead holds: a group's replies and queue calls go
// out only after its ops and every earlier group's are committed.
func (m *Master) Run(ctx context.Context) error {
	calls, stopCalls := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	commits := make(chan [][]core.Op)
	committed := make(chan error, 1)
	committer := make(chan struct{})
	go func() {
		defer close(committer)
		for ops := range commits {
			committed <- m.cp.Commit(ops...)
		}
	}()
	defer func() {
		stopCalls()
		close(m.done) // requests in flight hear "not the master"
		wg.Wait()
		close(commits)
		<-committer // a commit in flight ends first
		m.cp.Close()
	}()
	waiting := map[core.ReqID]chan core.Reply{}
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	stop := ctx.Done()
	var giveUp <-chan time.Time
	var acc group       // effects taken since the last commit began
	var inflight *group // being committed
	// The commit delay's timer: real time, not cfg.Now (a test's clock).
	wake := time.NewTimer(time.Hour)
	wake.Stop()
	defer wake.Stop()
	m.core.Step(m.cfg.Now(), core.Tick{})
	m.probeRestored(calls, &wg)
	for {
		rd := m.core.Ready()
		if rd.Lease != nil && !rd.Lease.Release {
			// A renewal promises nothing about the checkpoint: it goes
			// out now, never behind a commit (on a slow shared file
			// system two commits can outlast the lease). A release waits
			// for every commit before it: the successor reads the file.
			m.startCalls(core.Ready{Lease: rd.Lease}, calls, &wg)
			rd.Lease = nil
		}
		acc.add(rd, m.core.Stats())
		if inflight == nil && !acc.empty() {
			if acc.mustCommit() && acc.nops < groupOps && time.Since(acc.since) < m.cfg.CommitDelay {
				wake.Reset(m.cfg.CommitDelay - time.Since(acc.since))
			} else if acc.mustCommit() || acc.nops >= groupOps {
				g := acc
				inflight, acc = &g, group{}
				commits <- g.ops
			} else {
				// Nothing to commit first (no ops, or lazy ones only,
				// kept for the next commit): carry it out now.
				g := acc
				acc = group{ops: g.ops, nops: g.nops}
				if end, err := m.carryOut(&g, nil, &acc, waiting, calls, &wg); end {
					return err
				}
			}
		}
		if next := m.core.Next(); next.IsZero() {
			timer.Stop()
		} else {
			timer.Reset(max(next.Sub(m.cfg.Now()), 0))
		}
		select {
		case <-wake.C:
		case err := <-committed:
			g := inflight
			inflight = nil
			if end, err := m.carryOut(g, err, &acc, waiting, calls, &wg); end {
				return err
			}
		case in := <-m.in:
			m.accept(in, waiting)
			// Take what else is queued: one checkpoint transaction for all.
			for n := 0; n < 256; n++ {
				select {
				case in := <-m.in:
					m.accept(in, waiting)
					continue
				default:
				}
				break
			}
		case <-timer.C:
			m.core.Step(m.cfg.Now(), core.Tick{})
		case <-stop:
			stop = nil
			giveUp = time.After(m.cfg.ShutdownTimeout)
			m.core.Step(m.cfg.Now(), core.Stop{})
		case <-giveUp:
			m.log.Warn("stop timed out; the next master sends the results left and waits for the lease TTL",
				"timeout", m.cfg.ShutdownTimeout, "unreported", m.core.Stats().Unreported)
			return nil
		}
	}
}

// probeRestored asks, for each restored worker that holds batches, whether
// its pilot still runs (cfg.Probe): the batches of a worker whose pilot
// is gone (the previous master's own side worker after a kill -9, a
// pilot that ended while no master could take its hand-back, a host
// that went down or was cut off with the master) go back to the queue
// at once instead of after the reconnect grace. A worker that registers
// meanwhile keeps its batches whatever the probe says (the core ignores
// PilotGone for it).
func (m *Master) probeRestored(ctx context.Context, wg *sync.WaitGroup) {
	for id, addr := range m.core.Restored() {
		wg.Add(1)
		go func() {
			defer wg.Done()
			gone, v := m.cfg.Probe.judge(ctx, addr, m.probe)
			if m.onProbe != nil {
				m.onProbe(id, v, gone)
			}
			if !gone {
				return
			}
			why := "nothing listens: its process is gone"
			if v == Silent {
				why = fmt.Sprintf("its host answered nothing %d times in a row within %s: down or cut off", m.cfg.Probe.Silences, m.cfg.Probe.Timeout)
			}
			select {
			case m.in <- input{ev: core.PilotGone{Worker: id, Why: why}}:
			case <-m.done:
			}
		}()
	}
}

// groupOps ends a commit delay early: a group this large gains little by
// waiting for more.
const groupOps = 4096

// group is the effects of the Readies taken while a commit was in flight:
// committed together, then carried out in order.
type group struct {
	since  time.Time   // when its first op that is not lazy was taken
	ops    [][]core.Op // the Readies' ops (not copied: an op holds its task)
	nops   int
	urgent bool         // an op is not lazy (core.Ready.Lazy), or the lease is released
	rds    []core.Ready // replies and queue calls (their ops are in ops)
	stats  Stats        // the counters after the last of them
	done   bool
	err    error
}

func (g *group) add(rd core.Ready, s Stats) {
	if len(rd.Ops) == 0 && len(rd.Replies) == 0 && rd.Pull == nil && rd.Report == nil && rd.Beat == nil &&
		rd.Lease == nil && !rd.Done {
		return
	}
	if len(rd.Ops) > 0 {
		g.ops = append(g.ops, rd.Ops)
		g.nops += len(rd.Ops)
	}
	// The successor reads the file once the lease is released: the
	// lazy ops taken so far go in first (they would cost it a duplicate
	// report, or a requeue, for nothing).
	release := rd.Lease != nil && rd.Lease.Release
	if ((len(rd.Ops) > 0 && !rd.Lazy) || (release && g.nops > 0)) && !g.urgent {
		g.urgent, g.since = true, time.Now()
	}
	rd.Ops = nil
	g.rds = append(g.rds, rd)
	g.stats = s
	if rd.Done && !g.done {
		g.done, g.err = true, rd.Err
	}
}

func (g *group) empty() bool { return len(g.rds) == 0 }

// mustCommit reports whether the group's ops must be committed before its
// replies and queue calls go out; lazy ops alone wait for a later group's
// commit (or groupOps of them).
func (g *group) mustCommit() bool { return g.nops > 0 && g.urgent }

func (m *Master) accept(in input, waiting map[core.ReqID]chan core.Reply) {
	switch {
	case in.reply != nil:
		waiting[in.req] = in.reply
	case in.req != 0: // Gone: no reply will be sent
		delete(waiting, in.req)
	}
	m.core.Step(m.cfg.Now(), in.ev)
}

// carryOut does what a committed group says (commitErr: its commit
// failed): reply, call the queue. It reports whether the master is
// finished, and why. later is the group taken since, not committed.
func (m *Master) carryOut(g *group, commitErr error, later *group, waiting map[core.ReqID]chan core.Reply, calls context.Context, wg *sync.WaitGroup) (bool, error) {
	deliver := func(r core.Reply) {
		if ch := waiting[r.Req]; ch != nil {
			ch <- r
			delete(waiting, r.Req)
		}
	}
	if commitErr != nil {
		// None of it happened, nor what came after it: the workers
		// waiting on it hear so, and the master stops (memory is ahead
		// of the checkpoint now).
		for _, gg := range []*group{g, later} {
			for _, rd := range gg.rds {
				for _, r := range rd.Replies {
					deliver(core.Reply{Req: r.Req, Err: ErrNotMaster})
				}
			}
		}
		m.core.Step(m.cfg.Now(), core.CommitFailed{Err: commitErr})
		for _, r := range m.core.Ready().Replies {
			deliver(r)
		}
		m.publish(m.core.Stats())
		return true, commitErr
	}
	m.publish(g.stats) // before the replies: a worker that has its answer sees the counters with it
	for _, rd := range g.rds {
		for _, r := range rd.Replies {
			deliver(r)
		}
		m.startCalls(rd, calls, wg)
	}
	return g.done, g.err
}

// startCalls makes the queue calls of rd, each in its own goroutine; the
// answers come back to Run as events.
func (m *Master) startCalls(rd core.Ready, ctx context.Context, wg *sync.WaitGroup) {
	call := func(f func() core.Event) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ev := f()
			select {
			case m.in <- input{ev: ev}:
			case <-m.done:
			}
		}()
	}
	if r := rd.Pull; r != nil {
		call(func() core.Event { resp, err := m.q.Pull(ctx, *r); return core.Pulled{Resp: resp, Err: err} })
	}
	if r := rd.Report; r != nil {
		call(func() core.Event { resp, err := m.q.Results(ctx, *r); return core.Reported{Resp: resp, Err: err} })
	}
	if b := rd.Beat; b != nil {
		call(func() core.Event {
			resp, err := m.q.Heartbeat(ctx, b.Heartbeat)
			if err != nil {
				return core.Beaten{Err: err}
			}
			if b.Final {
				return core.Beaten{Resp: resp}
			}
			return core.Beaten{Resp: resp, RecErr: m.q.Recommend(ctx, b.Recommendation)}
		})
	}
	if r := rd.Lease; r != nil {
		call(func() core.Event {
			sent := time.Now()
			l, err := m.q.Lease(ctx, *r)
			if err == nil && !r.Release && l.Granted && l.Epoch == m.cfg.Epoch {
				// The queue renewed the lease no earlier than we asked:
				// it runs at least until sent + TTL.
				ttl := time.Duration(l.TTLMS) * time.Millisecond
				if ttl == 0 { // a queue that says seconds only
					ttl = time.Duration(l.TTLSecond) * time.Second
				}
				if ttl > 0 {
					m.cp.HoldUntil(sent.Add(holdFor(ttl)))
				}
			}
			return core.Leased{Lease: l, Err: err}
		})
	}
}

// holdFor is how long after a lease request the master keeps writing its
// checkpoint: the TTL less a quarter, so that a commit begun just before
// is on disk before the queue can grant the lease to a successor (which
// then reads the file), whatever the two hosts' clocks say (only
// durations are compared, each on its own clock).
func holdFor(ttl time.Duration) time.Duration { return ttl - ttl/4 }

// publish makes s the counters Stats and WaitFor see.
func (m *Master) publish(s Stats) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if s != m.stats {
		m.stats = s
		close(m.changed)
		m.changed = make(chan struct{})
	}
}

// request hands a worker request to Run and waits for its reply.
func (m *Master) request(ctx context.Context, mk func(core.ReqID) core.Event) (core.Reply, error) {
	id := core.ReqID(m.nextReq.Add(1))
	ch := make(chan core.Reply, 1)
	select {
	case m.in <- input{ev: mk(id), req: id, reply: ch}:
	case <-m.done:
		return core.Reply{}, ErrNotMaster
	case <-ctx.Done():
		return core.Reply{}, ctx.Err()
	}
	select {
	case r := <-ch:
		return r, r.Err
	case <-m.done:
		return core.Reply{}, ErrNotMaster
	case <-ctx.Done():
		// The worker hung up: a parked pull is forgotten.
		select {
		case m.in <- input{ev: core.Gone{Req: id}, req: id}:
		case <-m.done:
		}
		return core.Reply{}, ctx.Err()
	}
}

// Register handles a worker's (re)registration; see workerproto.RegisterRequest.
func (m *Master) Register(ctx context.Context, req workerproto.RegisterRequest) (workerproto.RegisterResponse, error) {
	r, err := m.request(ctx, func(id core.ReqID) core.Event { return core.Register{Req: id, RegisterRequest: req} })
	if err != nil {
		return workerproto.RegisterResponse{}, err
	}
	return *r.Register, nil
}

// Pull hands batches to a worker, waiting up to its wait for work to appear.
func (m *Master) Pull(ctx context.Context, req workerproto.PullRequest) (workerproto.PullResponse, error) {
	r, err := m.request(ctx, func(id core.ReqID) core.Event { return core.Pull{Req: id, PullRequest: req} })
	if err != nil {
		return workerproto.PullResponse{}, err
	}
	return *r.Pull, nil
}

// Results stores a worker's results before they are acknowledged.
func (m *Master) Results(ctx context.Context, req workerproto.ResultsRequest) (workerproto.ResultsResponse, error) {
	r, err := m.request(ctx, func(id core.ReqID) core.Event { return core.Results{Req: id, ResultsRequest: req} })
	if err != nil {
		return workerproto.ResultsResponse{}, err
	}
	return *r.Results, nil
}

// Heartbeat marks a worker alive and returns jobs to kill.
func (m *Master) Heartbeat(ctx context.Context, req workerproto.HeartbeatRequest) (workerproto.HeartbeatResponse, error) {
	r, err := m.request(ctx, func(id core.ReqID) core.Event { return core.Heartbeat{Req: id, HeartbeatRequest: req} })
	if err != nil {
		return workerproto.HeartbeatResponse{}, err
	}
	return *r.Heartbeat, nil
}

// Commits is how many checkpoint transactions the master has committed.
func (m *Master) Commits() int64 { return m.cp.wrote.Load() }

// Stats returns the current counters.
func (m *Master) Stats() Stats {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.stats
}

// ErrStopped: WaitFor's master ended before the condition held.
var ErrStopped = errors.New("master stopped")

// WaitFor blocks until cond holds for the master's counters, the master
// ends (ErrStopped) or ctx ends. Tests and the bench wait with it instead
// of polling.
func (m *Master) WaitFor(ctx context.Context, cond func(Stats) bool) error {
	for {
		m.mu.Lock()
		s, ch := m.stats, m.changed
		m.mu.Unlock()
		if cond(s) {
			return nil
		}
		select {
		case <-ch:
		case <-m.done:
			if cond(m.Stats()) {
				return nil
			}
			return ErrStopped
		case <-ctx.Done():
			return fmt.Errorf("waiting for the master (%+v): %w", s, ctx.Err())
		}
	}
}

// Done is closed when Run has returned.
func (m *Master) Done() <-chan struct{} { return m.done }
