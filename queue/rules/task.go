package rules

import (
	"github.com/harvest-hpc/harvest/pilotproto"
	"github.com/harvest-hpc/harvest/queue/api"
)

// Counter names the job counter a task moves into when it leaves Active.
type Counter int

// The counters of a job row (Counts).
const (
	ToWaiting Counter = iota
	ToDone
	ToFailed
)

// Transition is what happens to an active task: its next state, the job
// counter it moves into, and whether an attempt is counted.
type Transition struct {
	State     string
	Counter   Counter
	CountsTry bool
}

// Final reports whether the task leaves the queue for good.
func (t Transition) Final() bool { return t.State != api.TaskWaiting }

// ActiveTask is what the rules need of a task row and its job.
type ActiveTask struct {
	State       string // the task's state
	Attempt     int    // the current hand-out
	Tries       int    // attempts counted so far
	MaxAttempts int
	JobState    string
}

// Current reports whether a result for attempt is the one the queue waits
// for: the task is active with that attempt, in a live job. A result that
// is not current (the task was requeued, killed or finished) is recorded
// for usage but changes nothing.
func (t ActiveTask) Current(attempt int) bool {
	active := t.State == api.TaskAssigned || t.State == api.TaskRunning || t.State == api.TaskZombie
	return active && t.Attempt == attempt && JobLive(t.JobState)
}

// AfterResult is the transition of a current task on a result: done is
// DONE; a failure or timeout counts an attempt and requeues the task, or
// fails it for good (ERROR_E) after the last one; an interrupted or killed
// task (the pilot ended, or a cancel that did not come from this job) is
// requeued at once without counting.
func AfterResult(t ActiveTask, status string) Transition {
	switch status {
	case pilotproto.StatusFailed, pilotproto.StatusTimeout:
		if t.Tries+1 >= t.MaxAttempts {
			return Transition{State: api.TaskErrorE, Counter: ToFailed, CountsTry: true}
		}
		return Transition{State: api.TaskWaiting, Counter: ToWaiting, CountsTry: true}
	case pilotproto.StatusInterrupted, pilotproto.StatusKilled:
		return Transition{State: api.TaskWaiting, Counter: ToWaiting}
	}
	return Transition{State: api.TaskDone, Counter: ToDone}
}

// AfterExpiry is the transition of a ZOMBIE task that stayed silent for
// twice the zombie timeout: it counts an attempt (a task that kills its
// node must not loop forever) and is requeued, or EXPIRED for good after
// the last one.
func AfterExpiry(tries, maxAttempts int) Transition {
	if tries+1 >= maxAttempts {
		return Transition{State: api.TaskExpired, Counter: ToFailed, CountsTry: true}
	}
	return Transition{State: api.TaskWaiting, Counter: ToWaiting, CountsTry: true}
}
