package agent

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/harvest-hpc/harvest/adapters"
	"github.com/harvest-hpc/harvest/adapters/adaptertest"
)

// counting is a memory cluster with a job-event count the test sets.
type counting struct {
	*adaptertest.Memory
	n     int64
	err   error
	calls int
}

func (c *counting) JobEvents(context.Context) (int64, error) {
	c.calls++
	return c.n, c.err
}

func TestEventsMovedReportsAChangeOfTheCount(t *testing.T) {
	ctx := context.Background()
	a := &counting{Memory: adaptertest.NewMemory(4), n: 10}
	r := NewReconciler(a, nil, testConfig(), nil)
	ask := func(want, wantOK bool, what string) {
		t.Helper()
		moved, ok, err := r.EventsMoved(ctx)
		if moved != want || ok != wantOK || err != nil {
			t.Errorf("%s: moved %v, ok %v, err %v; want %v, %v, nil", what, moved, ok, err, want, wantOK)
		}
	}
	ask(false, true, "the first check only takes the count")
	ask(false, true, "the same count")
	a.n = 12
	ask(true, true, "two more events")
	ask(false, true, "unchanged since")
	a.n = 0
	ask(true, true, "a reset (sdiag's at midnight)")

	a.err = errors.New("sdiag: connection refused")
	if moved, ok, err := r.EventsMoved(ctx); moved || !ok || err == nil {
		t.Errorf("a failed check: moved %v, ok %v, err %v; want false, true, the error", moved, ok, err)
	}
	a.err = nil
	ask(false, true, "the count after a failed check, unchanged")

	// An adapter (or a plugin built before the call) that cannot count
	// turns the check off for good: it is not asked again.
	a.err = adapters.ErrNotImplemented
	ask(false, false, "not implemented")
	calls := a.calls
	ask(false, false, "after not implemented")
	if a.calls != calls {
		t.Error("the adapter was asked again after it said it cannot count")
	}
}

func TestEventsMovedIsOffWithoutACounterOrAnInterval(t *testing.T) {
	ctx := context.Background()
	if moved, ok, err := NewReconciler(adaptertest.NewMemory(4), nil, testConfig(), nil).EventsMoved(ctx); moved || ok || err != nil {
		t.Errorf("an adapter without JobEvents: moved %v, ok %v, err %v; want false, false, nil", moved, ok, err)
	}
	a := &counting{Memory: adaptertest.NewMemory(4)}
	cfg := testConfig()
	cfg.EventCheck = 0
	if moved, ok, _ := NewReconciler(a, nil, cfg, nil).EventsMoved(ctx); moved || ok || a.calls != 0 {
		t.Errorf("EventCheck 0: moved %v, ok %v, %d calls; want false, false, none", moved, ok, a.calls)
	}
	cfg.EventCheck = -time.Second
	if cfg.Validate() == nil {
		t.Error("a negative event check validated")
	}
}

// TestWaitRoundChecksBetweenRounds drives the wait between two rounds with
// a fake clock: the steps it sleeps and the checks it makes.
func TestWaitRoundChecksBetweenRounds(t *testing.T) {
	s := time.Second
	for _, tc := range []struct {
		name        string
		wait, check time.Duration
		answers     []bool // moved, per check; ok is false past the list's end when short is set
		short       bool
		want        bool
		sleeps      []time.Duration
		checks      int
		checkTakes  time.Duration // each check's own time on the fake clock
	}{
		{"no change: a check a second, none at the round's time", 10 * s, s, nil, false, true, slices.Repeat([]time.Duration{s}, 10), 9, 0},
		{"a change at the third check ends the wait", 10 * s, s, []bool{false, false, true}, false, true, []time.Duration{s, s, s}, 3, 0},
		{"checks every 3 s: the last step is what is left", 10 * s, 3 * s, nil, false, true, []time.Duration{3 * s, 3 * s, 3 * s, s}, 3, 0},
		{"no check: one wait", 10 * s, 0, nil, false, true, []time.Duration{10 * s}, 0, 0},
		{"a check longer than the wait: one wait", 2 * s, 5 * s, nil, false, true, []time.Duration{2 * s}, 0, 0},
		{"an adapter that cannot count: the rest in one wait", 10 * s, s, []bool{}, true, true, []time.Duration{s, 9 * s}, 1, 0},
		{"slow checks do not push the round back", 10 * s, s, nil, false, true, []time.Duration{s, s, s, s}, 4, 1500 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var sleeps []time.Duration
			checks := 0
			clock := time.Unix(1_000_000, 0)
			now := func() time.Time { return clock }
			sleep := func(_ context.Context, d time.Duration) bool {
				sleeps = append(sleeps, d)
				clock = clock.Add(d)
				return true
			}
			moved := func(context.Context) (bool, bool) {
				clock = clock.Add(tc.checkTakes)
				checks++
				if checks <= len(tc.answers) {
					return tc.answers[checks-1], true
				}
				return false, !tc.short
			}
			start := clock
			got := waitRound(context.Background(), tc.wait, tc.check, now, sleep, moved)
			if got != tc.want || !slices.Equal(sleeps, tc.sleeps) || checks != tc.checks {
				t.Errorf("returned %v after sleeping %v with %d checks; want %v, %v, %d", got, sleeps, checks, tc.want, tc.sleeps, tc.checks)
			}
			if len(tc.answers) == 0 && !tc.short && clock.Sub(start) > tc.wait+tc.checkTakes {
				t.Errorf("the round came %v after the last, want at most %v", clock.Sub(start), tc.wait+tc.checkTakes)
			}
		})
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if waitRound(ctx, 10*s, s, time.Now, func(context.Context, time.Duration) bool { return false }, nil) {
		t.Error("waitRound went on after its context ended")
	}
}

// TestTheInstrumentedAdapterKeepsTheEventCount: the agent checks through
// the metrics wrapper; a wrapper that hid JobEvents turned the check off
// in the real agent (found on the mini-cluster: a burst waited for the
// 10 s poll).
func TestTheInstrumentedAdapterKeepsTheEventCount(t *testing.T) {
	ctx := context.Background()
	m := NewMetrics(nil)
	a := &counting{Memory: adaptertest.NewMemory(4), n: 7}
	r := NewReconciler(m.InstrumentAdapter(a), nil, testConfig(), nil)
	r.EventsMoved(ctx)
	a.n = 8
	if moved, ok, err := r.EventsMoved(ctx); !moved || !ok || err != nil {
		t.Errorf("through the metrics wrapper: moved %v, ok %v, err %v; want true, true, nil", moved, ok, err)
	}
	plain := NewReconciler(m.InstrumentAdapter(adaptertest.NewMemory(4)), nil, testConfig(), nil)
	if _, ok, err := plain.EventsMoved(ctx); ok || err != nil {
		t.Errorf("a wrapped adapter without a count: ok %v, err %v; want false, nil", ok, err)
	}
}
