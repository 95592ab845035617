package api

// PathFailuresSuffix follows PathJob + id: GET FailureList, the job's
// tasks that failed at least once (owner or admin).
const PathFailuresSuffix = "/failures"

// Failure is a task of a job with at least one attempt that failed,
// timed out or expired, and its last such attempt: why the job ended
// DONE_WARN or FAILED, or why it is retrying.
type Failure struct {
	TaskID int64 `json:"task_id"`
	// Index is the entry's place in its job's dataset listing (0-based):
	// the task id is the job's id and the index, job<<32 | index.
	Index int `json:"index"`
	// Name is the task's dataset entry.
	Name string `json:"name"`
	// State is the task's state now: WAITING, ASSIGNED, RUNNING or ZOMBIE
	// (it is being retried), DONE (a retry succeeded), ERROR_E or EXPIRED
	// (no attempt left), KILLED.
	State string `json:"state"`
	// Tries counts its attempts that failed, timed out or expired.
	Tries int `json:"tries"`
	// The last of them: its number (0 if it expired: its master went
	// silent and no result came), status (failed, timeout, expired),
	// exit code, where it ran, when (Unix ms) and for how long.
	Attempt    int    `json:"attempt,omitempty"`
	Status     string `json:"status"`
	ExitCode   int    `json:"exit_code"`
	Site       string `json:"site,omitempty"`
	Pilot      string `json:"pilot,omitempty"`
	StartedAt  int64  `json:"started_at,omitempty"`
	DurationMS int64  `json:"duration_ms,omitempty"`
	// ErrorTail is the end of the attempt's stderr as its worker sent it
	// (2 KiB by default); Log the file with the whole of it, under the
	// job's output directory (none when the attempt wrote no stderr: an
	// empty log is not made).
	ErrorTail string `json:"error_tail,omitempty"`
	Log       string `json:"log,omitempty"`
}

// FailureList is one page of GET /v1/jobs/{id}/failures, in task order.
// Pass NextCursor as ?cursor= for the next page; it is 0 on the last.
type FailureList struct {
	Failures   []Failure `json:"failures"`
	NextCursor int64     `json:"next_cursor,omitempty"`
}

// FailureStatusExpired is Failure.Status of an attempt whose master went
// silent (its task was ZOMBIE, then expired).
const FailureStatusExpired = "expired"
