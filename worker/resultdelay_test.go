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
		hold := w.holdResults(min(len(c.results), c.batch), c.first, 0)
		if (hold > 0) != c.waits || hold > c.delay {
			t.Errorf("%s: hold %s, want waiting %v (at most %s)", c.name, hold, c.waits, c.delay)
		}
	}
}

// While groups run, a plain success waits GroupResultDelay instead, until
// a group ends: then what waits goes within ResultDelay, as a group's
// results; everything that sends at once still does.
func TestGroupsResultsWaitForAGroupsEnd(t *testing.T) {
	done := pilotproto.Result{TaskID: 1, Attempt: 1, Status: pilotproto.StatusDone}
	failed := pilotproto.Result{TaskID: 2, Attempt: 1, Status: pilotproto.StatusFailed, ExitCode: 1}
	const delay, long = 20 * time.Millisecond, time.Minute
	now := time.Now()
	for _, c := range []struct {
		name     string
		groups   int
		ends     int64 // groups ended; the last request saw none
		gdelay   time.Duration
		draining bool
		results  []pilotproto.Result
		first    time.Time
		atMost   time.Duration // 0: sent now
		atLeast  time.Duration
	}{
		{"a group runs, none ended", 1, 0, long, false, []pilotproto.Result{done}, now, long, delay + time.Second},
		{"a group ended since", 1, 1, long, false, []pilotproto.Result{done}, now, delay, 1},
		{"a group ended, past ResultDelay", 1, 1, long, false, []pilotproto.Result{done}, now.Add(-time.Second), 0, 0},
		{"no group running", 0, 0, long, false, []pilotproto.Result{done}, now, delay, 1},
		{"no group delay configured", 1, 0, 0, false, []pilotproto.Result{done}, now, delay, 1},
		{"waited the group delay", 1, 0, long, false, []pilotproto.Result{done}, now.Add(-time.Hour), 0, 0},
		{"a failure among them", 1, 0, long, false, []pilotproto.Result{done, failed}, now, 0, 0},
		{"stopping", 1, 0, long, true, []pilotproto.Result{done}, now, 0, 0},
	} {
		w := &Worker{cfg: Config{ResultDelay: delay, GroupResultDelay: c.gdelay, ResultBatch: 100}, busy: 1, draining: c.draining,
			groups: make([]*group, c.groups), groupEnds: c.ends, results: c.results}
		hold := w.holdResults(len(c.results), c.first, 0)
		if c.atMost == 0 && hold > 0 || c.atMost > 0 && (hold > c.atMost || hold < c.atLeast) {
			t.Errorf("%s: hold %s, want %s to %s", c.name, hold, c.atLeast, c.atMost)
		}
	}
}
