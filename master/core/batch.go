package core

import (
	"slices"
	"time"

	"github.com/harvest-hpc/harvest/pilotproto"
	"github.com/harvest-hpc/harvest/workerproto"
)

// assign plans batches for w (at least one batch when one fits, more while
// the tasks handed stay under free) and assigns them.
func (c *Core) assign(w *worker, free int, now time.Time) []workerproto.Batch {
	if c.phase != running || c.npending == 0 || free <= 0 {
		return nil
	}
	c.compact()
	var batches []workerproto.Batch
	handed := 0
	// The entries of the pending list before from are stale: the tasks
	// just handed out are not scanned again for every batch. (They stay
	// listed: one requeued before the next hand-out keeps its place.)
	from := 0
	for handed < free {
		refs := c.nextBatchFor(w, len(w.out), now, &from)
		if len(refs) == 0 {
			break
		}
		c.nextBatch++
		b := workerproto.Batch{ID: c.nextBatch, Tasks: make([]pilotproto.Task, 0, len(refs))}
		for _, k := range refs {
			b.Tasks = append(b.Tasks, *c.tasks[k].t)
			c.do(Op{Kind: OpAssign, Ref: k, Worker: w.id, Batch: b.ID}, now)
		}
		batches = append(batches, b)
		handed += len(refs)
	}
	return batches
}

// nextBatchFor picks the next batch for w: tasks of one job, in queue
// order, as many as the job's batch size and the worker's deadline allow.
// If the first job's tasks cannot finish in time it tries the next few
// jobs. The job comes from the head of the pending list, its tasks from
// the job's own list (byJob): a batch costs its size, not a scan of every
// pending task (with many jobs, each job's tasks are spread thinly over a
// long pending list).
//
// The scan begins at *from, which it moves past the stale entries it finds
// first (no task becomes pending again during one assign).
func (c *Core) nextBatchFor(w *worker, outstanding int, now time.Time, from *int) []ref {
	remaining := time.Duration(-1)
	if !w.deadline.IsZero() {
		remaining = w.deadline.Add(-c.cfg.SafetyMargin).Sub(now)
		if remaining <= 0 {
			return nil
		}
	}
	var tried [8]int64
	ntried := 0
	for i := *from; i < len(c.pending) && ntried < len(tried); i++ {
		t := c.tasks[c.pending[i]]
		if t == nil || t.state != StatePending {
			if i == *from {
				*from = i + 1
			}
			continue
		}
		if slices.Contains(tried[:ntried], t.t.JobID) {
			continue
		}
		job := t.t.JobID
		tried[ntried] = job
		ntried++
		n := FitBatch(max(t.t.BatchSize, 1), outstanding, w.slots, c.estimate(t.t), remaining)
		if n == 0 {
			continue
		}
		return c.takeOfJob(job, n)
	}
	return nil
}

// takeOfJob returns up to n pending tasks of job in queue order. The
// job's list is a lazy FIFO like the pending list: its stale head is
// dropped here; the tasks returned stay listed until a later call finds
// them stale (a task requeued in the meantime keeps its place, as in the
// pending list).
func (c *Core) takeOfJob(job int64, n int) []ref {
	list := c.byJob[job]
	for len(list) > 0 {
		if t := c.tasks[list[0]]; t != nil && t.state == StatePending {
			break
		}
		list = list[1:]
	}
	if len(list) == 0 {
		delete(c.byJob, job)
		return nil
	}
	c.byJob[job] = list
	refs := make([]ref, 0, min(n, len(list)))
	for i := 0; i < len(list) && len(refs) < n; i++ {
		k := list[i]
		// A requeued task may be listed twice.
		if t := c.tasks[k]; t != nil && t.state == StatePending && !slices.Contains(refs, k) {
			refs = append(refs, k)
		}
	}
	return refs
}

// estimate is the duration to plan a task with: learnt from the job's
// results, else its timeout, else unknown (0).
func (c *Core) estimate(t *pilotproto.Task) time.Duration {
	if e := c.est[t.JobID]; e != nil {
		if d, ok := e.Estimate(); ok {
			return d
		}
	}
	return time.Duration(t.TimeoutS) * time.Second
}

// compact drops stale entries of the pending list once they dominate it.
func (c *Core) compact() {
	for len(c.pending) > 0 {
		t := c.tasks[c.pending[0]]
		if t != nil && t.state == StatePending {
			break
		}
		c.pending = c.pending[1:]
	}
	if len(c.pending) <= 2*c.npending+64 {
		return
	}
	c.pending = c.livePending()
	c.byJob = make(map[int64][]ref, len(c.byJob))
	for _, k := range c.pending {
		job := c.tasks[k].t.JobID
		c.byJob[job] = append(c.byJob[job], k)
	}
}

// Estimator learns one job's task duration: an exponentially weighted mean
// and mean absolute deviation, so Estimate is a high, not a typical, value
// (mean + 2 deviations covers most tasks of a job whose tasks differ). The
// checkpoint stores it, so a new master plans with what the last one learnt.
type Estimator struct {
	N         int
	Mean, Dev float64 // seconds
}

const ewmaAlpha = 0.2

// Observe adds one measured duration.
func (e *Estimator) Observe(d time.Duration) {
	x := d.Seconds()
	if e.N == 0 {
		e.Mean, e.Dev = x, x/4
	} else {
		diff := x - e.Mean
		if diff < 0 {
			diff = -diff
		}
		e.Mean += ewmaAlpha * (x - e.Mean)
		e.Dev += ewmaAlpha * (diff - e.Dev)
	}
	e.N++
}

// Estimate returns the duration to plan with and whether anything was
// observed yet.
func (e *Estimator) Estimate() (time.Duration, bool) {
	if e.N == 0 {
		return 0, false
	}
	return time.Duration((e.Mean + 2*e.Dev) * float64(time.Second)), true
}

// FitBatch returns how many of want tasks (each estimated to take d) a
// worker with slots slots and outstanding tasks already handed to it can
// finish within remaining. The worker runs slots tasks at a time, so n new
// tasks finish after ceil((outstanding+n)/slots) waves of d. remaining < 0
// means no deadline. Returns 0 when not even one task fits: the worker is
// left idle so the agent can release its node.
func FitBatch(want, outstanding, slots int, d, remaining time.Duration) int {
	if want <= 0 || slots <= 0 {
		return 0
	}
	if remaining < 0 {
		return want
	}
	if d <= 0 {
		// Nothing learnt yet: any task may fit, but not past the end.
		if remaining == 0 {
			return 0
		}
		return want
	}
	waves := int(remaining / d) // whole waves that fit
	return min(max(waves*slots-outstanding, 0), want)
}
