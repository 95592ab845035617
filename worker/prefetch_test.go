package worker

import (
	"testing"
	"time"
)

// The automatic prefetch holds a slot's worth until it has seen a task's
// time and a pull's round trip; then enough to keep the slots busy through
// one round trip, between a slot's worth and maxPrefetch slots' worth.
func TestAutoPrefetchFollowsTaskTimeAndRoundTrip(t *testing.T) {
	for _, c := range []struct {
		name            string
		timed           bool
		task, roundTrip time.Duration
		want            int
	}{
		{"nothing seen yet", false, 0, 0, 4},
		{"no round trip yet", true, time.Millisecond, 0, 4},
		{"tasks longer than a round trip", true, time.Second, 2 * time.Millisecond, 4},
		{"tasks of a fifth of a round trip", true, time.Millisecond, 5 * time.Millisecond, 20},
		{"no-op tasks: capped", true, 0, 2 * time.Millisecond, maxPrefetch * 4},
	} {
		w := &Worker{slots: 4, taskTime: c.task, roundTrip: c.roundTrip, timed: c.timed, cfg: Config{Prefetch: -1}}
		if got := w.autoPrefetch(); got != c.want {
			t.Errorf("%s: prefetch %d, want %d", c.name, got, c.want)
		}
		if got := w.capacity(); got != 4+c.want {
			t.Errorf("%s: capacity %d, want %d", c.name, got, 4+c.want)
		}
	}
	w := &Worker{slots: 4, cfg: Config{Prefetch: 2}, timed: true, roundTrip: time.Second}
	if got := w.capacity(); got != 6 {
		t.Errorf("a fixed prefetch of 2: capacity %d, want 6", got)
	}
}
