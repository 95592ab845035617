package queue

import (
	"slices"
	"time"

	"github.com/harvest-hpc/harvest/queue/fairshare"
	"github.com/harvest-hpc/harvest/queue/rules"
	"github.com/harvest-hpc/harvest/queue/store"
)

// The in-memory mirror (guarded by Queue.mu) is what a pull decides on,
// so that a pull costs O(tasks x log users) and reads nothing: every
// user's limits, running cores and 24 h usage; every live job with its
// waiting count; each user's jobs with waiting tasks in hand-out order;
// and the fair-share order of the users with work (fairshare.Index),
// updated for one user whenever that user's standing changes. The tables
// are the truth: every write that changes a mirrored figure updates the
// mirror under the same hold of mu as its transaction, and Reconcile
// rebuilds it from the tables at start and every ReconcileInterval.

// userState is a user's limits, usage and work, kept in memory; the usage
// table is a flushed copy.
type userState struct {
	name      string
	limits    fairshare.Limits
	running   int                // cores of active tasks of live jobs
	events    []store.UsageEvent // usage in the window by arrival time (one per time), oldest first
	cpu, cost float64            // sums over events
	ready     []*liveJob         // live jobs with waiting tasks: higher price first, then FIFO
	dirty     bool               // changed since the last flush
}

// liveJob is a WAITING or RUNNING job, as a pull plans with it.
type liveJob struct {
	ID                        int64
	Owner, Dataset, OutputDir string
	Command                   []string
	Price                     float64
	Cores, BatchSize, Waiting int
	TimeoutS                  int64
}

// windowMark is one usage event's arrival, in arrival order over all
// users, so the window slides by popping the front.
type windowMark struct {
	user string
	at   int64
}

func (u *userState) usage() fairshare.Usage {
	return fairshare.Usage{RunningCores: u.running, CPUTime24h: u.cpu, Cost24h: u.cost}
}

// userLocked returns the in-memory state of a user, creating it with the
// default limits.
func (q *Queue) userLocked(name string) *userState {
	u := q.users[name]
	if u == nil {
		u = &userState{name: name, limits: q.cfg.DefaultLimits, dirty: true}
		q.users[name] = u
		if u.limits.Priority > q.order.Highest() {
			q.order.SetHighest(u.limits.Priority)
		}
		q.touchLocked(u)
	}
	return u
}

// touchLocked puts a user whose standing changed at their place in the
// order and marks them for the next flush.
func (q *Queue) touchLocked(u *userState) {
	q.order.Set(u.name, u.limits, u.usage(), len(u.ready) > 0)
	u.dirty = true
}

// recomputeHighestLocked finds the highest baseline priority of any user
// (after a user's was lowered).
func (q *Queue) recomputeHighestLocked() {
	h := 0.0
	for _, u := range q.users {
		h = max(h, u.limits.Priority)
	}
	q.order.SetHighest(h)
}

// addEventLocked adds a usage event to its owner's window. Events of the
// same time (one write's results) share one entry.
func (q *Queue) addEventLocked(u *userState, e store.UsageEvent) {
	if n := len(u.events); n > 0 && u.events[n-1].At == e.At {
		u.events[n-1].CPU += e.CPU
		u.events[n-1].Cost += e.Cost
	} else {
		u.events = append(u.events, e)
		q.window = append(q.window, windowMark{u.name, e.At})
	}
	u.cpu += e.CPU
	u.cost += e.Cost
}

// slideLocked drops the usage that left the window at now, and updates
// the users it belonged to (amortised O(events x log users)).
func (q *Queue) slideLocked(now time.Time) {
	cut := now.Add(-q.cfg.UsageWindow).UnixMilli()
	i := 0
	for i < len(q.window) && q.window[i].at <= cut {
		u := q.users[q.window[i].user]
		i++
		if u == nil || len(u.events) == 0 || u.events[0].At > cut {
			continue // dropped already
		}
		k := 0
		for k < len(u.events) && u.events[k].At <= cut {
			k++
		}
		u.events = append(u.events[:0], u.events[k:]...)
		u.cpu, u.cost = 0, 0 // summed afresh: no drift from subtracting
		for _, e := range u.events {
			u.cpu += e.CPU
			u.cost += e.Cost
		}
		q.touchLocked(u)
	}
	if i > 0 {
		q.window = append(q.window[:0], q.window[i:]...)
	}
}

// addRunningLocked applies a change of running cores per owner.
func (q *Queue) addRunningLocked(delta map[string]int) {
	for owner, c := range delta {
		if c == 0 {
			continue
		}
		u := q.userLocked(owner)
		u.running += c
		q.touchLocked(u)
	}
}

// listLocked puts a live job in its owner's ready list when it has
// waiting tasks, or takes it out, keeping the hand-out order.
func (q *Queue) listLocked(j *liveJob) {
	u := q.userLocked(j.Owner)
	i, found := slices.BinarySearchFunc(u.ready, j, readyOrder)
	switch {
	case j.Waiting > 0 && !found:
		u.ready = slices.Insert(u.ready, i, j)
	case j.Waiting <= 0 && found:
		u.ready = slices.Delete(u.ready, i, i+1)
	default:
		return
	}
	q.touchLocked(u)
}

// readyOrder is the order of a user's jobs: higher price first, then FIFO.
func readyOrder(a, b *liveJob) int {
	switch {
	case a.Price > b.Price:
		return -1
	case a.Price < b.Price:
		return 1
	case a.ID < b.ID:
		return -1
	case a.ID > b.ID:
		return 1
	}
	return 0
}

// movedLocked applies what a write moved: running cores per owner,
// waiting tasks per job (requeues), the jobs it made final.
func (q *Queue) movedLocked(m store.Moved) {
	q.addRunningLocked(m.Running)
	for id, n := range m.Waiting {
		if j := q.jobs[id]; j != nil && n != 0 {
			j.Waiting += n
			q.listLocked(j)
		}
	}
	q.jobChangesLocked(m.Changes)
}

// dropJobLocked forgets a job that is no longer live.
func (q *Queue) dropJobLocked(id int64) {
	j := q.jobs[id]
	if j == nil {
		return
	}
	j.Waiting = 0
	q.listLocked(j)
	delete(q.jobs, id)
}

// jobChangesLocked forgets the jobs a write made final.
func (q *Queue) jobChangesLocked(cs []store.JobChange) {
	for _, c := range cs {
		if !rules.JobLive(c.To) {
			q.dropJobLocked(c.Job)
		}
	}
}
