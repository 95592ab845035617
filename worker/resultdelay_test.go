package worker

import (
	"testing"
	"time"

	"github.com/harvest-hpc/harvest/pilotproto"
)

// A plain success waits up to ResultDelay for others to join its request
// while the worker still runs or holds tasks; it goes at once when nothing
// else could join it, when a result is not a plain success, when a batch
// is full, when the worker stops, and when the delay is 0.
func TestResultsWaitForOthersOnlyWhileMoreCanJoin(t *testing.T) {
	done := pilotproto.Result{TaskID: 1, Attempt: 1, Status: pilotproto.StatusDone}
	failed := pilotproto.Result{TaskID: 2, Attempt: 1, Status: pilotproto.StatusFailed, ExitCode: 1}
	now := time.Now()
	for _, c := range []struct {
		name     string
		delay    time.Duration
		batch    int
		busy     int
		queued   int
		draining bool
		results  []pilotproto.Result
		first    time.Time
		waits    bool
	}{
		{"a slot still busy", time.Minute, 10, 1, 0, false, []pilotproto.Result{done}, now, true},
		{"tasks still queued", time.Minute, 10, 0, 3, false, []pilotproto.Result{done, done}, now, true},
		{"idle: nothing can join", time.Minute, 10, 0, 0, false, []pilotproto.Result{done}, now, false},
		{"a failure among them", time.Minute, 10, 1, 0, false, []pilotproto.Result{done, failed}, now, false},
		{"a batch's worth", time.Minute, 2, 1, 0, false, []pilotproto.Result{done, done}, now, false},
		{"stopping", time.Minute, 10, 1, 0, true, []pilotproto.Result{done}, now, false},
		{"no delay configured", 0, 10, 1, 0, false, []pilotproto.Result{done}, now, false},
		{"waited its delay", time.Minute, 10, 1, 0, false, []pilotproto.Result{done}, now.Add(-time.Hour), false},
	} {
		w := &Worker{cfg: Config{ResultDelay: c.delay, ResultBatch: c.batch}, busy: c.busy, draining: c.draining,
			queue: make([]pilotproto.Task, c.queued), results: c.results}
		hold := w.holdResults(min(len(c.results), c.batch), c.first)
		if (hold > 0) != c.waits || hold > c.delay {
			t.Errorf("%s: hold %s, want waiting %v (at most %s)", c.name, hold, c.waits, c.delay)
		}
	}
}
