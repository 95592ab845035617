package sim

import (
	"fmt"

	"github.com/harvest-hpc/harvest/cluster"
)

// Work is a harvest job: NodeSeconds of work split into tasks of
// TaskSeconds (the last one shorter), arriving at Submit.
type Work struct {
	ID          string
	User        string
	Submit      int64
	NodeSeconds int64
	TaskSeconds int64
}

// WorkRecord is what happened to one harvest job.
type WorkRecord struct {
	ID     string
	User   string
	Submit int64
	// Finish is when its last task completed, -1 if it did not.
	Finish int64
	// DoneSeconds is the task time completed.
	DoneSeconds int64
	// Of the completed tasks, each a one-node job of its own: how many,
	// their waits (from the harvest job's submit to the start of the
	// attempt that completed) summed, and their bounded slowdowns
	// (threshold BSLDThreshold) summed and their largest.
	Tasks       int64
	TaskWaitSum int64
	BSLDSum     float64
	BSLDMax     float64
}

// BSLDThreshold is the bounded slowdown's threshold in seconds (Feitelson;
// Klusáček 2011 uses 10 s): jobs shorter than it count as this long.
const BSLDThreshold = 10

// BoundedSlowdown is max(1, (wait + run) / max(run, BSLDThreshold)).
func BoundedSlowdown(wait, run int64) float64 {
	return max(1, float64(wait+run)/float64(max(run, BSLDThreshold)))
}

type workItem struct {
	rec      WorkRecord
	taskSec  int64
	full     int64 // pending tasks of taskSec
	rem      int64 // a pending shorter task, 0 = none
	inFlight int64
}

func (w *workItem) pendingTasks() int64 {
	n := w.full
	if w.rem > 0 {
		n++
	}
	return n
}

// AddWork queues harvest work arriving at w.Submit (or now, if earlier).
func (c *Cluster) AddWork(w Work) error {
	if w.NodeSeconds <= 0 || w.TaskSeconds <= 0 {
		return fmt.Errorf("%w: work %q needs positive node-seconds and task length", ErrInvalidJob, w.ID)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	it := &workItem{
		rec:     WorkRecord{ID: w.ID, User: w.User, Submit: max(w.Submit, c.now), Finish: -1},
		taskSec: w.TaskSeconds,
		full:    w.NodeSeconds / w.TaskSeconds,
		rem:     w.NodeSeconds % w.TaskSeconds,
	}
	c.push(event{t: it.rec.Submit, kind: evWork, w: it})
	return nil
}

// pull gives the running pilot j its next task, if there is one it can
// finish (when time-aware) before its limit. Tasks are served FIFO by
// harvest job.
func (c *Cluster) pull(j *job) {
	if c.pendingTasks == 0 || j.preempting {
		return
	}
	left := add(j.rec.Start, j.limit) - c.now
	for _, w := range c.work {
		var l int64
		switch {
		case w.full > 0:
			l = w.taskSec
		case w.rem > 0:
			l = w.rem
		default:
			continue
		}
		if c.cfg.TimeAware && l > left {
			// The master would not hand out a task that cannot finish;
			// a shorter remainder task may still fit.
			if w.rem > 0 && w.rem <= left {
				l = w.rem
			} else {
				continue
			}
		}
		if l == w.taskSec && w.full > 0 {
			w.full--
		} else {
			w.rem = 0
		}
		w.inFlight++
		c.pendingTasks--
		c.runningTasks++
		run := stretched(l, c.runningTasks, c.cfg.Contention)
		j.task, j.taskLen, j.taskRun, j.taskSize, j.taskFrom = w, l, run, int(c.idlePilots+c.busyPilots), c.now
		if !j.inBusy { // a pilot going on to its next task is there already
			if c.busy != nil {
				c.busy[j.rec.ID] = true
			}
			j.inBusy = true
			c.viewChanged(j)
		}
		j.taskGen++
		c.idlePilots--
		c.busyPilots++
		c.push(event{t: c.now + run, kind: evTask, j: j, gen: j.taskGen})
		c.sample()
		return
	}
}

// stretched is how long a task of length l runs when it starts with n
// tasks running (itself included) and c of them run at full speed.
func stretched(l, n int64, c int) int64 {
	if c <= 0 || n <= int64(c) {
		return l
	}
	return (l*n + int64(c) - 1) / int64(c)
}

// TaskRun is one harvest task that completed: its job, the pilots running
// when it started, and how long it ran.
type TaskRun struct {
	Job     string
	Size    int
	Seconds int64
}

// WatchTasks starts recording completed tasks for TaskRuns.
func (c *Cluster) WatchTasks() {
	c.mu.Lock()
	c.watchRuns = true
	c.mu.Unlock()
}

// TaskRuns returns the tasks completed since the last call (what a master
// learns from its workers' results), once WatchTasks was called.
func (c *Cluster) TaskRuns() []TaskRun {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := c.runs
	c.runs = nil
	return out
}

func (c *Cluster) taskDone(j *job) {
	w := j.task
	w.inFlight--
	w.rec.DoneSeconds += j.taskLen
	if c.watchRuns {
		c.runs = append(c.runs, TaskRun{Job: w.rec.ID, Size: j.taskSize, Seconds: j.taskRun})
	}
	wait := j.taskFrom - w.rec.Submit
	b := BoundedSlowdown(wait, j.taskLen)
	w.rec.Tasks++
	w.rec.TaskWaitSum += wait
	w.rec.BSLDSum += b
	w.rec.BSLDMax = max(w.rec.BSLDMax, b)
	c.runningTasks--
	if w.inFlight == 0 && w.pendingTasks() == 0 {
		w.rec.Finish = c.now
	}
	j.task = nil
	c.busyPilots--
	c.idlePilots++
	c.pull(j)
	if j.task == nil {
		if c.busy != nil {
			delete(c.busy, j.rec.ID)
		}
		j.inBusy = false
		c.viewChanged(j)
		c.changes++ // the pilot went idle
	}
	c.sample()
}

// requeue puts the task of a pilot that ended back into its job.
func (c *Cluster) requeue(j *job) {
	w := j.task
	w.inFlight--
	if j.taskLen == w.taskSec {
		w.full++
	} else {
		w.rem = j.taskLen
	}
	c.runningTasks--
	c.pendingTasks++
	j.task = nil
	if c.busy != nil {
		delete(c.busy, j.rec.ID)
	}
	j.inBusy = false
	c.viewChanged(j)
}

// feedIdle hands pending tasks to idle running pilots, oldest first.
func (c *Cluster) feedIdle() {
	if c.pendingTasks == 0 || c.idlePilots == 0 {
		return
	}
	for _, p := range c.running { // oldest first: they are in id order
		if c.pendingTasks == 0 {
			return
		}
		if !p.pilot || p.task != nil {
			continue
		}
		c.pull(p)
		if p.task != nil {
			c.changes++ // an idle pilot went busy
		}
	}
}

// Demand is the harvest backlog as the queue would report it (one task
// slot per node), and which pilots are running a task. The map is kept up
// to date as tasks start and end from the first call on (no walk of the
// pilots per call): it is the cluster's own, valid until time next moves
// or the cluster next changes; callers must not modify it. A caller that
// reads the busy pilots from the snapshots (ShowBusy) calls DemandCounts.
func (c *Cluster) Demand() (cluster.Demand, map[string]bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.busy == nil {
		c.busy = map[string]bool{}
		for _, j := range c.running {
			if j.inBusy {
				c.busy[j.rec.ID] = true
			}
		}
	}
	return c.demand(), c.busy
}

// DemandCounts is Demand without the busy pilots: no map is kept for it.
func (c *Cluster) DemandCounts() cluster.Demand {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.demand()
}

func (c *Cluster) demand() cluster.Demand {
	return cluster.Demand{PendingTasks: int(min(c.pendingTasks, 1<<31-1)), RunningTasks: int(c.runningTasks), SlotsPerNode: 1}
}

// Backlog returns the harvest tasks pending and running.
func (c *Cluster) Backlog() (pending, running int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.pendingTasks, c.runningTasks
}

// LostTaskSeconds is the task time lost by pilots that ended mid-task.
func (c *Cluster) LostTaskSeconds() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.lostTaskSec
}

// WorkRecords returns every harvest job's record in arrival order.
func (c *Cluster) WorkRecords() []WorkRecord {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]WorkRecord, len(c.work))
	for i, w := range c.work {
		out[i] = w.rec
	}
	return out
}
