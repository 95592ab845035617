package replay

import (
	"testing"
	"time"
)

// The span ends where the first harvest run stopped its harvest (never
// before the window): past it that run's nodes are idle because the
// replay stopped it, and its utilisation fell by what the other run's
// foreign jobs took longer. Without harvest runs the span runs to the
// last foreign job's end.
func TestMeasuredSpanEndsWhereTheFirstHarvestStopped(t *testing.T) {
	t0 := time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)
	ended := func(endS int) map[string]Completion {
		return map[string]Completion{"1": {JobID: "1", Start: t0, End: t0.Add(time.Duration(endS) * time.Second), hasStart: true, nodeList: "n1"}}
	}
	p := Plan{SpanS: 120}
	for _, c := range []struct {
		name string
		outs []Outcome
		want int64
	}{
		{"two harvest runs", []Outcome{{Kind: Polling, T0: t0, HarvestStopS: 240, Foreign: ended(239)}, {Kind: Preemption, T0: t0, HarvestStopS: 233, Foreign: ended(233)}}, 233},
		{"with a baseline ending later", []Outcome{{Kind: Baseline, T0: t0, Foreign: ended(250)}, {Kind: Polling, T0: t0, HarvestStopS: 236, Foreign: ended(235)}}, 236},
		{"a stop before the window's end", []Outcome{{Kind: Polling, T0: t0, HarvestStopS: 90, Foreign: ended(89)}}, 120},
		{"baselines only", []Outcome{{Kind: Baseline, T0: t0, Foreign: ended(230)}, {Kind: Baseline, T0: t0, Foreign: ended(233)}}, 234},
	} {
		if got := measuredSpan(p, c.outs); got != c.want {
			t.Errorf("%s: span %d, want %d", c.name, got, c.want)
		}
	}
}
