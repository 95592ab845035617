package rules

import "github.com/harvest-hpc/harvest/queue/api"

// JobSubmitting is the internal state of a job whose tasks are still being
// inserted: invisible to lists and pulls, removed at start if the process
// died half way.
const JobSubmitting = "SUBMITTING"

// Counts are a job's task counters as stored in its row. Active counts
// ASSIGNED, RUNNING and ZOMBIE tasks.
type Counts struct {
	Total, Waiting, Active, Done, Failed, Killed int
}

// JobState derives a job's state from its tasks (the master-job/sub-job
// rule). KILLED and ERROR_EW are set by cancel and expiry and stay, as
// does SUBMITTING until the submission completes.
func JobState(cur string, started bool, c Counts) string {
	switch {
	case cur == api.JobKilled || cur == api.JobErrorEW || cur == JobSubmitting:
		return cur
	case c.Total > 0 && c.Done+c.Failed+c.Killed == c.Total:
		switch {
		case c.Failed == 0 && c.Killed == 0:
			return api.JobDone
		case c.Done == 0:
			return api.JobFailed
		}
		return api.JobDoneWarn
	case started || c.Active > 0 || c.Done+c.Failed > 0:
		return api.JobRunning
	}
	return api.JobWaiting
}

// JobLive reports whether a job's tasks may still be handed out and
// count as running: WAITING or RUNNING (a KILLED job's tasks are being
// killed in short writes and no longer count).
func JobLive(state string) bool { return state == api.JobWaiting || state == api.JobRunning }
