package sim

import (
	"context"
	"errors"
	"testing"
)

// A harvest stopped at a second (harvest replay cancels its pilots once
// its run's last foreign job ended) holds no node after it: every pilot
// ends by then and none starts later, the foreign jobs run as before, and
// the utilisation drops by the pilots' node time after the stop.
func TestHarvestStopCancelsEveryPilotThenAndSubmitsNoMore(t *testing.T) {
	w := lightWorkload(3, 20)
	from := w.Jobs[0].Submit
	stop := from + 20*3600
	for _, gb := range []GiveBack{Polling, Preemption} {
		mod := func(c *Config) { c.GiveBack, c.From, c.To = gb, from, from+30*3600 }
		all := runMode(t, w, Harvest, mod)
		cut := runMode(t, w, Harvest, func(c *Config) { mod(c); c.HarvestStop = stop })
		pilots := 0
		for _, r := range cut.Records {
			if !r.Pilot || r.Start < 0 {
				continue
			}
			pilots++
			if r.Start >= stop || r.End < 0 || r.End > stop {
				t.Errorf("%s: pilot %s ran %d-%d, the harvest stopped at %d", gb, r.ID, r.Start, r.End, stop)
			}
		}
		if pilots == 0 {
			t.Fatalf("%s: no pilot ran before the stop", gb)
		}
		for id, s := range startsOf(cut) {
			if s < stop && startsOf(all)[id] != s {
				t.Errorf("%s: job %s started at %d, %d without the stop", gb, id, s, startsOf(all)[id])
			}
		}
		if !(cut.Utilization < all.Utilization) {
			t.Errorf("%s: utilisation %.4f with the stop, %.4f without", gb, cut.Utilization, all.Utilization)
		}
	}
	cfg := DefaultConfig()
	cfg.HarvestStop = -1
	if err := cfg.Validate(); !errors.Is(err, ErrInvalidConfig) {
		t.Errorf("a negative harvest stop: %v, want ErrInvalidConfig", err)
	}
	if _, err := Run(context.Background(), w, cfg); err == nil {
		t.Error("Run accepted a negative harvest stop")
	}
}
