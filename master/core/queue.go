package core

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/harvest-hpc/harvest/agent/policy"
	"github.com/harvest-hpc/harvest/pilotproto"
	"github.com/harvest-hpc/harvest/queue/api"
)

// need is how many tasks to pull now: the buffer's shortfall, at most
// MaxPull.
func (c *Core) need() int {
	if c.phase != running {
		return 0
	}
	target := c.bufferTarget()
	short := target - c.npending
	if c.npending > 0 && short < target*c.cfg.RefillPercent/100 {
		return 0 // enough left to hand out: wait for a fuller pull
	}
	return min(short, c.cfg.MaxPull)
}

// bufferTarget keeps Prefetch x the registered workers' capacity pending,
// within MinBuffer and MaxBuffer. Pulled tasks count in their owner's
// running cores at the queue, which is why the buffer stays small.
func (c *Core) bufferTarget() int {
	capSum := 0
	for _, w := range c.workers {
		if w.registered {
			capSum += w.capacity
		}
	}
	return min(max(c.cfg.Prefetch*capSum, c.cfg.MinBuffer), c.cfg.MaxBuffer)
}

// plan starts the queue calls that are due, at most one of each kind in
// flight.
func (c *Core) plan(now time.Time) {
	if c.phase == running {
		if n := c.need(); n > 0 && !c.pullBusy && !now.Before(c.pullAt) {
			c.rd.Pull = &pilotproto.PullRequest{Epoch: c.cfg.Epoch, Max: n}
			c.pullBusy = true
		}
		if !c.beatBusy && !now.Before(c.beatAt) {
			c.rd.Beat = c.beat(now)
			c.beatBusy = true
			c.beatAt = now.Add(c.cfg.HeartbeatInterval)
		}
		if !c.leaseBusy && !now.Before(c.leaseAt) {
			c.rd.Lease = &pilotproto.LeaseRequest{PilotID: c.cfg.PilotID, Address: c.cfg.Address, Epoch: c.cfg.Epoch}
			c.leaseBusy = true
			c.leaseAt = now.Add(c.renewEvery())
		}
	}
	if !c.reportBusy && c.nfinal > 0 && !now.Before(c.reportWhen()) && !c.flushGaveUp {
		c.sendReport()
	}
	c.closeHandBack(now)
	if c.phase == stopping && !c.beatBusy && c.lostMS > 0 && !c.lostGaveUp {
		// The lost task time of the attempts this master requeued itself
		// goes in a last heartbeat (no recommendation): the next master
		// cannot know it.
		hb, _ := c.heartbeatRequest()
		c.rd.Beat = &Beat{Heartbeat: hb, Final: true}
		c.beatBusy = true
	}
	if c.phase == stopping && !c.releasing && !c.reportBusy && !c.pullBusy && !c.leaseBusy &&
		(c.nfinal == 0 || c.flushGaveUp) && (c.lostMS == 0 || c.lostGaveUp) && c.handBackUntil.IsZero() {
		// Give the lease up so a worker becomes master now, not after the
		// TTL. Workers already hear "not the master" and go to the lease.
		// (A pull in flight first: its tasks go back to the queue too; a
		// renewal in flight first: its answer would read as the release's.)
		c.releasing = true
		c.rd.Lease = &pilotproto.LeaseRequest{PilotID: c.cfg.PilotID, Address: c.cfg.Address, Epoch: c.cfg.Epoch, Release: true}
	}
}

// renewEvery is the lease renewal period: LeaseRenewInterval, but at
// least three renewals per TTL the queue granted, so one lost renewal
// does not lose the lease.
func (c *Core) renewEvery() time.Duration {
	d := c.cfg.LeaseRenewInterval
	if c.ttl > 0 && c.ttl/3 < d {
		d = c.ttl / 3
	}
	return d
}

// reportWhen is when the next report may go: after the retry wait of a
// failed one, and once the oldest waiting result has waited ReportDelay,
// unless the report is full or the master is stopping.
func (c *Core) reportWhen() time.Time {
	if c.phase != running || len(c.outbox) >= c.cfg.ReportBatch || c.heldSince.IsZero() {
		return c.reportAt
	}
	return maxTime(c.reportAt, c.heldSince.Add(c.cfg.ReportDelay))
}

func (c *Core) sendReport() {
	n := max(min(len(c.outbox), c.cfg.ReportBatch), 0)
	refs := make([]ref, 0, n)
	results := make([]pilotproto.Result, 0, n)
	seen := make(map[ref]bool, n)
	i := 0
	for ; i < len(c.outbox) && len(results) < c.cfg.ReportBatch; i++ {
		k := c.outbox[i]
		t := c.tasks[k]
		if t == nil || t.state != StateFinal || t.result == nil || seen[k] {
			continue
		}
		seen[k] = true
		refs = append(refs, k)
		r := *t.result
		results = append(results, r)
	}
	c.outbox = c.outbox[i:]
	if len(c.outbox) == 0 {
		c.heldSince = time.Time{} // (left behind: older than the delay, due at once)
	}
	if len(results) == 0 {
		return
	}
	c.sent, c.reportBusy = refs, true
	c.rd.Report = &pilotproto.ResultsRequest{Epoch: c.cfg.Epoch, Results: results}
}

// beat is the queue heartbeat: every task the master holds (final ones
// whose result the queue has not acknowledged included: the queue
// requeues the active tasks of older epochs that a new master's first
// heartbeat does not list), which pilots are busy, and the recommendation.
func (c *Core) beat(now time.Time) *Beat {
	hb, slots := c.heartbeatRequest()
	left := c.npending + c.nassigned
	rec := pilotproto.RecommendationRequest{Epoch: c.cfg.Epoch, MinNodes: policy.Recommend(left, c.cfg.Recommend),
		PendingTasks: c.npending, RunningTasks: c.nassigned, SlotsPerNode: slots, Slots: c.poolSlots()}
	if c.capa != nil {
		// One round of the capacity rule per heartbeat: the run times
		// since the last one, judged against the pool size they ran at.
		d := c.capa.Step(c.samples)
		c.samples = c.samples[:0] // Step keeps none of them
		if d.Cap != c.capLast.Cap || d.Phase != c.capLast.Phase {
			c.log.Info("pool capacity", "cap", d.Cap, "phase", d.Phase, "size", c.poolSize(), "reason", d.Reason)
		}
		c.capLast = d
		st := c.capa.State()
		c.do(Op{Kind: OpCapacity, Capacity: &st}, now)
		rec.MinNodes = d.Limit(rec.MinNodes)
		rec.MaxNodes, rec.CapacityPhase = d.Cap, string(d.Phase)
	}
	return &Beat{Heartbeat: hb, Recommendation: rec}
}

// heartbeatRequest is the queue heartbeat's body: every task the master holds,
// its pilots, and the lost task time not yet reported. It returns the
// largest worker's slots too.
func (c *Core) heartbeatRequest() (pilotproto.HeartbeatRequest, int) {
	hb := pilotproto.HeartbeatRequest{Epoch: c.cfg.Epoch, LostMS: c.lostMS}
	c.beatLost = c.lostMS
	refs := make([]ref, 0, len(c.tasks))
	for k := range c.tasks {
		refs = append(refs, k)
	}
	if len(refs) > 0 { // as ranges of consecutive ids: about one per grant
		held := pilotproto.PackRanges(pilotproto.RangesOf(refs))
		hb.Ranges = &held
	}
	pilots := map[string]*pilotproto.PilotStatus{}
	slots := 0
	for _, w := range c.workers {
		if w.pilot == "" {
			continue
		}
		p := pilots[w.pilot]
		if p == nil {
			p = &pilotproto.PilotStatus{PilotID: w.pilot}
			pilots[w.pilot] = p
		}
		p.Busy = p.Busy || len(w.out) > 0
		if w.confinement != "" {
			p.Confinement = w.confinement
		}
		if !w.deadline.IsZero() {
			p.Deadline = w.deadline.Unix()
		}
		slots = max(slots, w.slots)
	}
	for _, p := range pilots {
		hb.Pilots = append(hb.Pilots, *p)
	}
	slices.SortFunc(hb.Pilots, func(a, b pilotproto.PilotStatus) int {
		if a.PilotID < b.PilotID {
			return -1
		}
		if a.PilotID > b.PilotID {
			return 1
		}
		return 0
	})
	return hb, slots
}

// poolSize is the pilots with a registered worker: the pool's size as the
// capacity rule counts it. Every task handed out records it, so it is
// counted again only when a worker registers or is forgotten (sizeKnown).
func (c *Core) poolSize() int {
	if !c.sizeKnown {
		c.size, c.returning = c.countPool()
		c.sizeKnown = true
	}
	return c.size
}

// sampleSize is the pool size the capacity rule judges a task handed out
// now at: 0 (the task is not a sample) while workers restored from the
// checkpoint may still come back. After a hand-over they re-register one
// by one while their pilots go on running what they held, so the
// registered count (1, 2, 3, ...) is not the size the task runs at; it is
// again once every restored worker is back or forgotten.
func (c *Core) sampleSize() int {
	n := c.poolSize()
	if c.returning > 0 {
		return 0
	}
	return n
}

// countPool counts the pilots with a registered worker, and the restored
// workers not back yet.
func (c *Core) countPool() (pilots, returning int) {
	seen := map[string]bool{}
	for _, w := range c.workers {
		if !w.registered {
			returning++
			continue
		}
		id := w.pilot
		if id == "" {
			id = "worker:" + w.id
		}
		seen[id] = true
	}
	return len(seen), returning
}

// poolSlots is the registered workers' slots: with several sites, how much
// the queue lets this pool hold follows from it.
func (c *Core) poolSlots() int {
	n := 0
	for _, w := range c.workers {
		if w.registered {
			n += w.slots
		}
	}
	return n
}

// pulled adds the tasks a queue pull brought. The queue hands an attempt
// out again only after it applied our interrupted report; anything else
// already held is a duplicate delivery.
func (c *Core) pulled(now time.Time, e Pulled) {
	c.pullBusy = false
	if e.Err != nil {
		c.queueErr(now, "pull", e.Err)
		c.pullAt = now.Add(c.cfg.RetryInterval)
		return
	}
	for i := range e.Resp.Tasks {
		t := &e.Resp.Tasks[i]
		k := refOf(*t)
		if old := c.tasks[k]; old != nil {
			if old.state != StateFinal || old.result == nil || old.result.Status != pilotproto.StatusInterrupted {
				continue
			}
		}
		c.do(Op{Kind: OpAdd, Ref: k, Task: t}, now)
		switch {
		case c.cancelled[t.JobID]:
			c.do(Op{Kind: OpFinish, Ref: k, Result: c.resultFor(t, pilotproto.StatusKilled, now)}, now)
		case c.phase != running:
			// Pulled just before a graceful stop: back to the queue at once.
			c.do(Op{Kind: OpFinish, Ref: k, Result: c.resultFor(t, pilotproto.StatusInterrupted, now)}, now)
		}
	}
	c.cancelJobs(now, e.Resp.CancelledJobs)
	c.pullAt = now
	if len(e.Resp.Tasks) == 0 {
		c.pullAt = now.Add(c.cfg.IdlePoll)
	}
}

// cancelJobs finalises the pending tasks of cancelled jobs as killed and
// tells every worker to kill the running ones.
func (c *Core) cancelJobs(now time.Time, jobs []int64) {
	if len(jobs) == 0 {
		return
	}
	for _, j := range jobs {
		c.cancelled[j] = true
		for _, w := range c.workers {
			w.kill = append(w.kill, j)
		}
	}
	killed := 0
	for _, k := range c.livePending() {
		if t := c.tasks[k]; c.cancelled[t.t.JobID] {
			c.do(Op{Kind: OpFinish, Ref: k, Result: c.resultFor(t.t, pilotproto.StatusKilled, now)}, now)
			killed++
		}
	}
	for _, j := range jobs {
		delete(c.byJob, j) // every pending task of theirs is final now
	}
	c.dirty = true // parked pulls carry the kills
	c.log.Info("jobs cancelled", "jobs", jobs, "pending_killed", killed)
}

// reportedResults forgets the results the queue acknowledged; on failure
// they go back to the front of the outbox.
func (c *Core) reportedResults(now time.Time, e Reported) {
	c.reportBusy = false
	sent := c.sent
	c.sent = nil
	if e.Err != nil {
		c.outbox = append(sent, c.outbox...)
		if c.heldSince.IsZero() && len(c.outbox) > 0 {
			c.heldSince = now
		}
		c.queueErr(now, "results", e.Err)
		c.reportAt = now.Add(c.cfg.RetryInterval)
		if c.phase == stopping {
			c.log.Warn("results not flushed at stop; the next master sends them", "error", e.Err, "unreported", c.nfinal)
			c.flushGaveUp = true
		}
		return
	}
	for _, k := range sent {
		if t := c.tasks[k]; t != nil && t.state == StateFinal {
			c.do(Op{Kind: OpDelete, Ref: k}, now)
			c.reported++
		}
	}
	// The queue counts a task against its owner's running quota until its
	// result is applied: an empty pull may have met that quota, and these
	// results free it now. Pull at once rather than after the idle poll
	// (with a 20-core quota and 15 ms tasks, the idle poll held a user to
	// 20 tasks a second whatever the pool's size).
	if len(sent) > 0 && c.pullAt.After(now) {
		c.pullAt = now
	}
}

func (c *Core) beaten(now time.Time, e Beaten) {
	c.beatBusy = false
	if e.Err != nil {
		c.queueErr(now, "heartbeat", e.Err)
		if c.phase == stopping {
			c.log.Warn("lost task time not reported at stop", "error", e.Err, "lost_ms", c.lostMS)
			c.lostGaveUp = true
		}
		return
	}
	c.lostMS -= c.beatLost // reported
	c.beatLost = 0
	c.cancelJobs(now, e.Resp.CancelledJobs)
	c.pullInDeadlines(e.Resp.Deadlines)
	if e.RecErr != nil {
		c.queueErr(now, "recommendation", e.RecErr)
	}
}

func (c *Core) leased(now time.Time, e Leased) {
	c.leaseBusy = false
	if c.releasing {
		if e.Err != nil {
			c.log.Warn("could not release the lease; the next master waits for its TTL", "error", e.Err)
		} else {
			c.log.Info("released the master lease", "epoch", c.cfg.Epoch)
		}
		c.end(nil)
		return
	}
	if e.Err != nil {
		c.queueErr(now, "lease", e.Err)
		c.leaseAt = minTime(c.leaseAt, now.Add(c.cfg.RetryInterval))
		return
	}
	l := e.Lease
	if !l.Granted || l.Epoch != c.cfg.Epoch {
		c.fail(fmt.Errorf("lease now held by %s (epoch %d): %w", l.Holder, l.Epoch, api.ErrStaleEpoch))
		return
	}
	if ttl := leaseTTL(l); ttl > 0 {
		c.ttl = ttl
	}
	c.leaseAt = now.Add(c.renewEvery())
}

// leaseTTL is the TTL the queue granted (milliseconds when it says).
func leaseTTL(l pilotproto.Lease) time.Duration {
	if l.TTLMS > 0 {
		return time.Duration(l.TTLMS) * time.Millisecond
	}
	return time.Duration(l.TTLSecond) * time.Second
}

func maxTime(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

// queueErr: a stale epoch stops the master (a newer one exists); an
// expired lease is renewed at once (nobody may have taken it yet).
func (c *Core) queueErr(now time.Time, what string, err error) {
	switch {
	case errors.Is(err, api.ErrStaleEpoch):
		c.fail(fmt.Errorf("queue %s: %w", what, err))
	case errors.Is(err, api.ErrLeaseExpired):
		c.log.Warn("queue call found the lease expired; renewing", "call", what, "error", err)
		c.leaseAt = now
	default:
		c.log.Warn("queue call failed", "call", what, "error", err)
	}
}

// stop begins a graceful stop: the tasks no worker holds go back to the
// queue as interrupted (requeued at once), results are flushed, then the
// lease is released. Batches held by workers stay in the checkpoint: those
// workers keep running and report to the next master.
func (c *Core) stop(now time.Time) {
	if c.phase != running {
		return
	}
	c.phase = stopping
	n := c.returnPending(now)
	if n == 0 {
		// Nothing to write, but learn it if a newer master owns the state.
		c.do(Op{Kind: OpFenceCheck}, now)
	}
	c.endPolls()
	if c.cfg.HandBackWait > 0 && c.workersHold() {
		c.handBackUntil = now.Add(c.cfg.HandBackWait)
	}
	c.log.Info("master stopping", "returned_to_queue", n, "unreported", c.nfinal, "hand_back_wait", !c.handBackUntil.IsZero())
}

// returnPending hands the tasks no worker holds back to the queue as
// interrupted (requeued at once there, no attempt counted) and returns
// how many.
func (c *Core) returnPending(now time.Time) int {
	live := c.livePending()
	for _, k := range live {
		c.do(Op{Kind: OpFinish, Ref: k, Result: c.resultFor(c.tasks[k].t, pilotproto.StatusInterrupted, now)}, now)
	}
	return len(live)
}

// fail stops the core at once: a newer master exists, or the checkpoint
// could not be written. Nothing more is written or sent.
func (c *Core) fail(err error) {
	if c.phase == done {
		return
	}
	c.log.Warn("master stops", "error", err)
	c.end(err)
}

func (c *Core) end(err error) {
	c.phase = done
	c.endPolls()
	c.rd.Done, c.rd.Err = true, err
}

// endPolls answers the parked pulls "not the master": their workers go
// back to the lease.
func (c *Core) endPolls() {
	for _, p := range c.polls {
		if w := c.workers[p.worker]; w != nil {
			w.polls--
		}
		c.reply(Reply{Req: p.req, Err: ErrNotMaster})
	}
	c.polls = nil
}

// pullInDeadlines applies the ends the agent pulled in (pilot id -> Unix
// seconds): the workers of those pilots get no batch that would run past
// the new end, and hear of it at their next heartbeat. An end is only
// ever moved earlier.
func (c *Core) pullInDeadlines(ends map[string]int64) {
	if len(ends) == 0 {
		return
	}
	for _, id := range slices.Sorted(maps.Keys(c.workers)) {
		w := c.workers[id]
		end, ok := ends[w.pilot]
		if !ok || end <= 0 {
			continue
		}
		t := time.Unix(end, 0)
		if w.deadline.IsZero() || t.Before(w.deadline) {
			c.log.Info("pilot end pulled in", "worker", w.id, "pilot", w.pilot, "was", w.deadline, "now", t)
			w.deadline, w.newDeadline = t, true
		}
	}
}
