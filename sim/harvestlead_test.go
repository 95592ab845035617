package sim

import (
	"context"
	"errors"
	"testing"

	"github.com/harvest-hpc/harvest/capacity"
)

// A harvest started a lead before From (a pool already running when the
// window opens, as `harvest replay --lead` starts its agent) holds the
// nodes at From that the pool reaches by then; the figures stay the
// window's: same span, same foreign jobs, polls counted from From, and
// pilot time before From not counted.
func TestHarvestLeadStartsThePoolBeforeTheWindow(t *testing.T) {
	w := lightWorkload(3, 20)
	// The window opens 100 s before the first job: the pool grows
	// under the master's capacity rule (4 pilots, then 8, 16).
	from := w.Jobs[0].Submit - 100
	if from < 600 {
		t.Fatalf("the workload starts at %d: the lead needs 10 minutes before it", from)
	}
	to := from + 20*3600
	for _, gb := range []GiveBack{Polling, Preemption} {
		mod := func(c *Config) {
			cc := capacity.DefaultConfig()
			c.GiveBack, c.From, c.To, c.TaskSeconds, c.Capacity = gb, from, to, 60, &cc
		}
		cold := runMode(t, w, Harvest, mod)
		warm := runMode(t, w, Harvest, func(c *Config) { mod(c); c.HarvestLead = 600 })
		if warm.From != from || warm.SpanS != to-from || warm.Foreign.Jobs != cold.Foreign.Jobs {
			t.Errorf("%s: from %d span %d foreign %d, want the window's %d, %d, %d", gb, warm.From, warm.SpanS, warm.Foreign.Jobs, from, to-from, cold.Foreign.Jobs)
		}
		if h := heldAt(warm, from); h != 16 {
			t.Errorf("%s: pilots held %d nodes when the window opened after a lead, want all 16", gb, h)
		}
		if h := heldAt(cold, from); h >= 16 {
			t.Errorf("%s: pilots held %d nodes at the window's start without a lead", gb, h)
		}
		// The pool's growth happens in the lead: more of the window used.
		if !(warm.Utilization > cold.Utilization) || warm.Utilization > 1 {
			t.Errorf("%s: utilisation %.4f with the lead, %.4f without", gb, warm.Utilization, cold.Utilization)
		}
		// Polls of the window only: the lead's (one a poll) are not the
		// window's load on the scheduler.
		if d := warm.Harvest.Polls - cold.Harvest.Polls; d > 2 || d < -2 {
			t.Errorf("%s: %d polls with the lead, %d without", gb, warm.Harvest.Polls, cold.Harvest.Polls)
		}
	}
	// Baseline has no harvest to start: the lead changes nothing.
	b := runMode(t, w, Baseline, func(c *Config) { c.From, c.To = from, to })
	bl := runMode(t, w, Baseline, func(c *Config) { c.From, c.To, c.HarvestLead = from, to, 600 })
	if b.Utilization != bl.Utilization || b.Foreign.MeanWaitS != bl.Foreign.MeanWaitS {
		t.Errorf("baseline with a lead: %+v, without: %+v", bl.Foreign, b.Foreign)
	}
}

func TestHarvestLeadRejectsWhatCannotRun(t *testing.T) {
	w := lightWorkload(3, 5)
	for name, mod := range map[string]func(*Config){
		"negative":             func(c *Config) { c.HarvestLead = -1 },
		"before the trace's 0": func(c *Config) { c.From, c.HarvestLead = 100, 101 },
		"with a warm start":    func(c *Config) { c.Warm, c.HarvestLead = true, 10 },
	} {
		cfg := DefaultConfig()
		cfg.HarvestBacklog = 10
		mod(&cfg)
		if _, err := Run(context.Background(), w, cfg); !errors.Is(err, ErrInvalidConfig) {
			t.Errorf("%s: %v, want ErrInvalidConfig", name, err)
		}
	}
}

// heldAt is the nodes pilots held at t.
func heldAt(r Result, t int64) int {
	n := 0
	for _, s := range r.Usage {
		if s.T > t {
			break
		}
		n = s.PilotBusy + s.PilotIdle
	}
	return n
}
