package core

import (
	"slices"
	"time"

	"github.com/harvest-hpc/harvest/capacity"
	"github.com/harvest-hpc/harvest/pilotproto"
	"github.com/harvest-hpc/harvest/workerproto"
)

// register handles a worker's (re)registration. A worker that comes back
// keeps the tasks it still holds or finished; the master's other tasks for
// it are requeued; held tasks the master no longer gives it are dropped.
func (c *Core) register(now time.Time, e Register) {
	if c.phase != running {
		c.reply(Reply{Req: e.Req, Err: ErrNotMaster})
		return
	}
	req := e.RegisterRequest
	w := c.worker(req.WorkerID, now)
	w.pilot, w.slots, w.capacity, w.lastSeen, w.confinement = req.PilotID, req.Slots, req.Capacity, now, req.Confinement
	if req.Address != w.address || (req.Address != "" && !w.registered) {
		// Stored before any batch is handed to it: a successor probes it
		// if the worker does not come back.
		w.address = req.Address
		c.do(Op{Kind: OpWorker, Worker: w.id, Address: w.address}, now)
	}
	c.sizeKnown = false
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
	for _, k := range sortedRefs(w.out) {
		if !held[k] {
			c.do(Op{Kind: OpRequeue, Ref: k}, now)
		}
	}
	resp := workerproto.RegisterResponse{Epoch: c.cfg.Epoch}
	for _, k := range req.Held {
		t := c.tasks[k]
		switch {
		case t == nil || t.state == StateFinal:
			resp.Drop = append(resp.Drop, k)
		case t.state == StateAssigned && t.worker != w.id:
			resp.Drop = append(resp.Drop, k)
		case t.state == StatePending && !c.cancelled[t.t.JobID]:
			// Requeued while the worker was away: it still runs it, keep it there.
			c.do(Op{Kind: OpAssign, Ref: k, Worker: w.id}, now)
		case t.state == StatePending:
			resp.Drop = append(resp.Drop, k)
		}
	}
	w.registered = true
	c.sizeKnown = false
	w.kill = append(w.kill, c.cancelledJobs()...)
	c.dirty = c.dirty || len(w.kill) > 0
	c.log.Info("worker registered", "worker", w.id, "pilot", w.pilot, "slots", w.slots,
		"deadline", w.deadline, "kept", len(w.out), "dropped", len(resp.Drop))
	c.reply(Reply{Req: e.Req, Register: &resp})
}

func (c *Core) cancelledJobs() []int64 {
	jobs := make([]int64, 0, len(c.cancelled))
	for j := range c.cancelled {
		jobs = append(jobs, j)
	}
	slices.Sort(jobs)
	return jobs
}

// pull hands batches to a worker, or parks the request until work appears
// or its wait ends.
func (c *Core) pull(now time.Time, e Pull) {
	if c.phase != running {
		c.reply(Reply{Req: e.Req, Err: ErrNotMaster})
		return
	}
	w := c.workers[e.WorkerID]
	if w == nil || !w.registered {
		c.reply(Reply{Req: e.Req, Err: ErrUnknownWorker})
		return
	}
	w.lastSeen = now
	wait := time.Duration(e.WaitMS) * time.Millisecond
	if wait <= 0 || wait > c.cfg.PullWait {
		wait = c.cfg.PullWait
	}
	p := &poll{req: e.Req, worker: w.id, free: e.Free, until: now.Add(wait)}
	if !c.answer(now, p, w) {
		c.polls = append(c.polls, p)
		w.polls++
	}
}

// answer replies to a pull if there is something to say: batches or jobs
// to kill.
func (c *Core) answer(now time.Time, p *poll, w *worker) bool {
	batches := c.assign(w, p.free, now)
	if len(batches) == 0 && len(w.kill) == 0 {
		return false
	}
	c.reply(Reply{Req: p.req, Pull: &workerproto.PullResponse{Batches: batches, KillJobs: w.kill}})
	w.kill = nil
	return true
}

// serveParked retries the parked pulls, oldest first.
func (c *Core) serveParked(now time.Time) {
	kept := c.polls[:0]
	for _, p := range c.polls {
		w := c.workers[p.worker]
		if c.answer(now, p, w) {
			w.polls--
			w.lastSeen = now
			continue
		}
		kept = append(kept, p)
	}
	clear(c.polls[len(kept):])
	c.polls = kept
}

// gone forgets a parked pull whose worker hung up.
func (c *Core) gone(now time.Time, id ReqID) {
	c.polls = slices.DeleteFunc(c.polls, func(p *poll) bool {
		if p.req != id {
			return false
		}
		if w := c.workers[p.worker]; w != nil {
			w.polls--
			w.lastSeen = now
		}
		return true
	})
}

// results stores a worker's results; it is answered once they are
// committed. Results of unknown or already final (task, attempt) pairs
// are acknowledged and ignored: that is what makes resending harmless.
func (c *Core) results(now time.Time, e Results) {
	// A stopping master still takes the hand-back of workers whose pilots
	// end with its own (HandBackWait).
	handBack := c.phase == stopping && !c.handBackUntil.IsZero()
	if c.phase != running && !handBack {
		c.reply(Reply{Req: e.Req, Err: ErrNotMaster})
		return
	}
	w := c.workers[e.WorkerID]
	if w != nil {
		w.lastSeen = now
	}
	n := len(e.ResultsRequest.Results)
	seen := make(map[ref]bool, n) // sized once: grown a result at a time they were rehashed
	learnt := make(map[int64]bool, n)
	var jobs []int64
	// The finish ops point into one copy of the results (sized once: its
	// elements do not move), not into the request, which is the caller's.
	kept := make([]pilotproto.Result, 0, len(e.ResultsRequest.Results))
	for i := range e.ResultsRequest.Results {
		kept = append(kept, e.ResultsRequest.Results[i])
		r := &kept[len(kept)-1]
		k := ref{TaskID: r.TaskID, Attempt: r.Attempt}
		t := c.tasks[k]
		if t == nil || t.state == StateFinal || seen[k] {
			continue
		}
		seen[k] = true
		if r.Pilot == "" && w != nil {
			r.Pilot = w.pilot
		}
		switch {
		case r.Status == pilotproto.StatusInterrupted && c.cancelled[t.t.JobID]:
			r.Status = pilotproto.StatusKilled
			c.do(Op{Kind: OpFinish, Ref: k, Result: r}, now)
		case r.Status == pilotproto.StatusInterrupted && handBack:
			// Back to the queue as interrupted: no attempt counted, and
			// the queue counts its run time as lost work.
			c.do(Op{Kind: OpFinish, Ref: k, Result: r}, now)
		case r.Status == pilotproto.StatusInterrupted:
			// The worker's pilot is ending. The task ran: its next run is
			// another execution and gets its own attempt number from the
			// queue (interrupted is not charged; the queue counts its run
			// time as lost work), never this attempt again.
			c.do(Op{Kind: OpFinish, Ref: k, Result: r}, now)
		default:
			c.do(Op{Kind: OpFinish, Ref: k, Result: r}, now)
		}
		if r.Status == pilotproto.StatusDone || r.Status == pilotproto.StatusFailed {
			job := t.t.JobID
			est := c.est[job]
			if est == nil {
				est = &Estimator{}
				c.est[job] = est
			}
			est.Observe(time.Duration(r.DurationMS) * time.Millisecond)
			if c.capa != nil && r.Status == pilotproto.StatusDone {
				c.samples = append(c.samples, capacity.Sample{Job: job, Size: t.size, Duration: time.Duration(r.DurationMS) * time.Millisecond})
			}
			if !learnt[job] {
				learnt[job] = true
				jobs = append(jobs, job)
			}
		}
	}
	for _, job := range jobs {
		e := *c.est[job] // as it is now: the estimator goes on learning
		c.do(Op{Kind: OpEstimate, Job: job, Est: &e}, now)
		c.dirty = true // a shorter estimate may let a waiting worker's batch fit
	}
	if e.Leaving && w != nil {
		c.leaving(now, w)
	}
	if handBack {
		// What a leaving worker held and never reported goes back too.
		c.returnPending(now)
		c.closeHandBack(now)
	}
	c.reply(Reply{Req: e.Req, Results: &workerproto.ResultsResponse{Accepted: len(e.ResultsRequest.Results)}})
}

// leaving forgets a worker that deregistered: what it still held is
// requeued at once (it reported its unfinished tasks as interrupted just
// before; what is left was handed to it and never arrived), and its parked
// pulls are answered as from an unknown worker.
func (c *Core) leaving(now time.Time, w *worker) {
	left := sortedRefs(w.out)
	for _, k := range left {
		c.do(Op{Kind: OpRequeue, Ref: k}, now)
	}
	c.polls = slices.DeleteFunc(c.polls, func(p *poll) bool {
		if p.worker != w.id {
			return false
		}
		c.reply(Reply{Req: p.req, Err: ErrUnknownWorker})
		return true
	})
	delete(c.workers, w.id)
	c.sizeKnown = false
	c.log.Info("worker left", "worker", w.id, "pilot", w.pilot, "requeued", len(left))
}

// heartbeat marks a worker alive, requeues tasks handed to it long ago
// that it does not hold (the pull's answer was lost), and returns jobs to
// kill.
func (c *Core) heartbeat(now time.Time, e Heartbeat) {
	if c.phase != running {
		c.reply(Reply{Req: e.Req, Err: ErrNotMaster})
		return
	}
	w := c.workers[e.WorkerID]
	if w == nil || !w.registered {
		c.reply(Reply{Req: e.Req, Err: ErrUnknownWorker})
		return
	}
	w.lastSeen = now
	if e.Complete {
		held := make(map[ref]bool, len(e.Held))
		for _, k := range e.Held {
			held[k] = true
		}
		lost := 0
		for _, k := range sortedRefs(w.out) {
			// Handed out a while ago (so not a batch whose answer is still
			// on its way) and unknown to the worker: the answer was lost.
			if !held[k] && now.Sub(c.tasks[k].handedAt) > c.cfg.PullWait+c.cfg.WorkerTimeout {
				c.do(Op{Kind: OpRequeue, Ref: k}, now)
				lost++
			}
		}
		if lost > 0 {
			c.log.Warn("tasks handed to a worker never reached it; requeued", "worker", w.id, "tasks", lost)
		}
	}
	resp := &workerproto.HeartbeatResponse{KillJobs: w.kill}
	if w.newDeadline {
		resp.DeadlineMS = w.deadline.UnixMilli()
		w.newDeadline = false
	}
	c.reply(Reply{Req: e.Req, Heartbeat: resp})
	w.kill = nil
}

// Restored lists the workers restored from the checkpoint that have not
// registered again and whose pilot's address is known, by worker: the
// driver probes each address and reports the dead ones with PilotGone.
func (c *Core) Restored() map[string]string {
	out := map[string]string{}
	for id, w := range c.workers {
		if !w.registered && w.address != "" && len(w.out) > 0 {
			out[id] = w.address
		}
	}
	return out
}

// pilotGone requeues at once the batches of a restored worker whose
// pilot is gone, instead of after the reconnect grace: that
// worker cannot come back. A worker that registered meanwhile is alive.
func (c *Core) pilotGone(now time.Time, e PilotGone) {
	id := e.Worker
	w := c.workers[id]
	if c.phase != running || w == nil || w.registered {
		return
	}
	c.log.Info("a restored worker's pilot is gone: its batches go back to the queue now", "worker", id, "address", w.address, "probe", e.Why)
	c.lose(now, id)
}

// silence is how long a worker may stay silent before its tasks are
// requeued.
func (c *Core) silence(w *worker) time.Duration {
	if !w.registered {
		return c.cfg.ReconnectGrace
	}
	return c.cfg.WorkerTimeout
}

// expire ends the parked pulls whose wait is over and requeues the batches
// of workers that went silent (and of restored workers that did not come
// back within the reconnect grace).
func (c *Core) expire(now time.Time) {
	kept := c.polls[:0]
	for _, p := range c.polls {
		if now.Before(p.until) {
			kept = append(kept, p)
			continue
		}
		w := c.workers[p.worker]
		w.polls--
		w.lastSeen = now
		c.reply(Reply{Req: p.req, Pull: &workerproto.PullResponse{}})
	}
	clear(c.polls[len(kept):])
	c.polls = kept
	if c.phase != running {
		return
	}
	var gone []string
	for id, w := range c.workers {
		if w.polls == 0 && !now.Before(w.lastSeen.Add(c.silence(w))) {
			gone = append(gone, id)
		}
	}
	slices.Sort(gone)
	for _, id := range gone {
		c.lose(now, id)
	}
}

// lose forgets a worker that is gone. It may have started any of its
// tasks before it went (a killed pilot): they go back to the queue as
// interrupted, so a second run gets a new attempt number (not charged),
// never the same one (its logs and HARVEST_ATTEMPT would be the first's).
func (c *Core) lose(now time.Time, id string) {
	lost := sortedRefs(c.workers[id].out)
	for _, k := range lost {
		c.do(Op{Kind: OpFinish, Ref: k, Result: c.resultFor(c.tasks[k].t, pilotproto.StatusInterrupted, now)}, now)
	}
	c.log.Warn("worker lost; its tasks go back to the queue as interrupted", "worker", id, "tasks", len(lost))
	delete(c.workers, id)
	c.sizeKnown = false
}
