package fairshare

import (
	"math"
	"testing"
)

func TestBoost(t *testing.T) {
	for _, tc := range []struct {
		name string
		cost float64
		want float64
	}{
		{"a user who spent nothing gets the full boost", 0, 10},
		{"a user just below 100,000 still gets the full boost", 99_999, 10},
		{"at 100,000 the ramp starts at 10", 100_000, 10},
		{"at 350,000 the ramp gives 7", 350_000, 7},
		{"half way up the ramp gives 5", 550_000, 5},
		{"at 1,000,000 the ramp ends at 0", 1_000_000, 0},
		{"above 1,000,000 there is no boost", 1_000_001, 0},
		{"a heavy user gets no boost", 5e6, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Boost(tc.cost); got != tc.want {
				t.Fatalf("Boost(%v) = %v, want %v", tc.cost, got, tc.want)
			}
		})
	}
}

func TestComputedPriority(t *testing.T) {
	def := DefaultLimits()
	low := def
	low.Priority = 0.5
	for _, tc := range []struct {
		name    string
		limits  Limits
		usage   Usage
		highest float64
		want    float64
	}{
		{"an idle top-priority user gets boost + 1", def, Usage{}, 1, 11},
		{"running cores at the quota give no intake", def, Usage{RunningCores: 20}, 1, NoIntake},
		{"running cores above the quota give no intake", def, Usage{RunningCores: 25}, 1, NoIntake},
		{"CPU time at the quota gives no intake", def, Usage{CPUTime24h: 1e7}, 1, NoIntake},
		{"cost at the quota gives no intake", def, Usage{Cost24h: 1e7}, 1, NoIntake},
		{"half the cores running costs 0.25", def, Usage{RunningCores: 10}, 1, 10.75},
		{"half the top priority costs 0.2", low, Usage{}, 1, 10.8},
		{"a heavy user without boost gets 1 - weightedSum", def, Usage{Cost24h: 4e6}, 1, 1 - 0.1*math.Sqrt(0.4)},
		{"cost 350,000 gives boost 7", def, Usage{Cost24h: 350_000}, 1, 8 - 0.1*math.Sqrt(0.035)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := ComputedPriority(tc.limits, tc.usage, tc.highest)
			if math.Abs(got-tc.want) > 1e-9 {
				t.Fatalf("ComputedPriority = %v, want %v", got, tc.want)
			}
		})
	}

	t.Run("without boost the published formula and ours agree", func(t *testing.T) {
		u := Usage{RunningCores: 3, Cost24h: 2e6, CPUTime24h: 1e5}
		if a, b := ComputedPriority(low, u, 1), PublishedFormula(low, u, 1); math.Abs(a-b) > 1e-12 {
			t.Fatalf("ours %v, published %v", a, b)
		}
	})
	t.Run("within a boost band the published formula favours the user who takes more, ours does not", func(t *testing.T) {
		idle, busy := Usage{}, Usage{RunningCores: 10}
		if PublishedFormula(def, busy, 1) <= PublishedFormula(def, idle, 1) {
			t.Fatal("expected the published formula to favour the busy user (the reason for the correction)")
		}
		if ComputedPriority(def, busy, 1) >= ComputedPriority(def, idle, 1) {
			t.Fatal("the busy user must rank below the idle one")
		}
	})
	t.Run("a lighter boost band always ranks below a heavier one", func(t *testing.T) {
		heavy := Usage{Cost24h: 400_000, RunningCores: 0}
		light := Usage{Cost24h: 0, RunningCores: 19}
		if ComputedPriority(def, heavy, 1) >= ComputedPriority(low, light, 1) {
			t.Fatal("a user with a full boost must outrank one with boost 7")
		}
	})
}

func TestLimitsValidate(t *testing.T) {
	for _, tc := range []struct {
		name string
		mod  func(*Limits)
		ok   bool
	}{
		{"the defaults are valid", func(*Limits) {}, true},
		{"a zero priority is rejected", func(l *Limits) { l.Priority = 0 }, false},
		{"a NaN priority is rejected", func(l *Limits) { l.Priority = math.NaN() }, false},
		{"zero max cores is rejected", func(l *Limits) { l.MaxParallelJobs = 0 }, false},
		{"a negative CPU time quota is rejected", func(l *Limits) { l.MaxTotalRunningTime = -1 }, false},
		{"an infinite cost quota is rejected", func(l *Limits) { l.MaxTotalCpuCost = math.Inf(1) }, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := DefaultLimits()
			tc.mod(&l)
			if err := l.Validate(); (err == nil) != tc.ok {
				t.Fatalf("Validate() = %v, want ok=%v", err, tc.ok)
			}
		})
	}
}

func TestJainAndNUWT(t *testing.T) {
	if got := Jain([]float64{1, 1, 1, 1}); got != 1 {
		t.Fatalf("equal shares: Jain = %v, want 1", got)
	}
	if got := Jain([]float64{1, 0, 0, 0}); got != 0.25 {
		t.Fatalf("one user takes all: Jain = %v, want 1/4", got)
	}
	if got := Jain(nil); got != 1 {
		t.Fatalf("no users: Jain = %v, want 1", got)
	}
	if got := NUWT(50, 100); got != 0.5 {
		t.Fatalf("NUWT = %v, want 0.5", got)
	}
	if got := NUWT(50, 0); !math.IsInf(got, 1) {
		t.Fatalf("NUWT without work = %v, want +Inf", got)
	}
}
