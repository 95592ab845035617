package agent

import (
	"sync"
	"time"
)

// Health is whether the batch system answers: since when it has not, and
// why. The agent's start (WaitForAdapter) and its rounds (Run) report to
// it; /status and the metrics read it, so an admin sees the same
// "unreachable since" whether slurmctld went away before the agent
// started or after.
type Health struct {
	mu    sync.Mutex
	since time.Time
	why   string
	now   func() time.Time
}

// NewHealth returns a Health that believes the batch system answers.
func NewHealth() *Health { return &Health{now: time.Now} }

// Fail records a failed call: the first failure of a run sets since.
func (h *Health) Fail(err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.since.IsZero() {
		h.since = h.now()
	}
	h.why = err.Error()
}

// OK records that the batch system answered.
func (h *Health) OK() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.since, h.why = time.Time{}, ""
}

// Unreachable reports since when the batch system has not answered and
// the last error; down is false while it answers.
func (h *Health) Unreachable() (since time.Time, why string, down bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.since, h.why, !h.since.IsZero()
}
