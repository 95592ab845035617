package main

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/harvest-hpc/harvest/queue/api"
)

// burstyRun replays a job as `submit --wait` sees it, with an injected
// clock: nothing for the first 20 s (pilots starting), then workers that
// each finish a batch of 5 tasks every 2.5 s, staggered, polled every
// 2 s; workers(t) says how many work at time t. It returns the ETA and
// the rate at every poll from warmup on (zero where there is none yet).
func burstyRun(tau time.Duration, total int, workers func(t float64) int, warmup float64) (etas []time.Duration, rates []float64) {
	est := newRateEstimator(tau)
	t0 := time.Unix(1_700_000_000, 0)
	batches := func(t float64, w, of int) float64 { // batches worker w finished by t
		return math.Max(0, math.Floor((t-20-2.5*float64(w)/float64(of))/2.5))
	}
	fin := 0
	for step := 0; ; step++ {
		t := float64(step) * 2
		n := workers(t)
		for w := range n {
			fin += 5 * int(batches(t, w, n)-batches(t-2, w, n))
		}
		fin = min(fin, total)
		est.Observe(t0.Add(time.Duration(t*float64(time.Second))), fin)
		if fin >= total {
			return etas, rates
		}
		if t >= warmup {
			d, _ := est.ETA(total - fin)
			r, _ := est.Rate()
			etas, rates = append(etas, d), append(rates, r)
		}
	}
}

func TestTheETAFollowsASmoothedRateAndDoesNotJumpWithEveryBatch(t *testing.T) {
	steady := func(float64) int { return 4 } // 4 workers x 5 tasks / 2.5 s = 8 tasks/s
	// Relative jump of the ETA from one poll to the next, beyond the 2 s
	// that pass between them.
	maxJump := func(etas []time.Duration) float64 {
		worst := 0.0
		for i := 1; i < len(etas); i++ {
			prev, cur := etas[i-1].Seconds(), etas[i].Seconds()
			if prev < 20 {
				break // the last seconds round to whole seconds
			}
			worst = max(worst, math.Abs(cur-(prev-2))/prev)
		}
		return worst
	}
	etas, rates := burstyRun(etaTau, 4000, steady, 60)
	if j := maxJump(etas); j > 0.05 {
		t.Errorf("smoothed ETA jumps by up to %.0f%% between polls, want at most 5%%: %v", 100*j, etas[:10])
	}
	if r := rates[len(rates)-1]; math.Abs(r-8)/8 > 0.1 {
		t.Errorf("smoothed rate %.2f tasks/s, want 8 within 10%%", r)
	}
	// The same bursts with no smoothing (the rate of the last poll alone)
	// jump by far more: the test can tell the difference.
	raw, _ := burstyRun(time.Millisecond, 4000, steady, 60)
	if j := maxJump(raw); j < 0.2 {
		t.Errorf("unsmoothed ETA jumps by only %.0f%%: the scenario does not exercise the smoothing", 100*j)
	}
}

func TestTheSmoothedRateFollowsMorePilotsWithinAMinuteOrTwo(t *testing.T) {
	// 2 workers (4 tasks/s) until t = 120 s, then 6 (12 tasks/s).
	workers := func(t float64) int {
		if t < 120 {
			return 2
		}
		return 6
	}
	_, rates := burstyRun(etaTau, 100_000, workers, 0)
	at := func(t float64) float64 { return rates[int(t/2)] }
	if r := at(118); math.Abs(r-4)/4 > 0.15 {
		t.Errorf("rate before more pilots came %.2f, want 4 within 15%%", r)
	}
	if r := at(240); math.Abs(r-12)/12 > 0.1 {
		t.Errorf("rate two minutes after more pilots came %.2f, want 12 within 10%%", r)
	}
}

func TestProgressLineShowsTheETAAndTheRate(t *testing.T) {
	j := api.Job{State: "RUNNING", Tasks: api.TaskCounts{Total: 100, Done: 40, Failed: 10, Running: 5}}
	est := newRateEstimator(etaTau)
	if got := progressLine(j, est); !strings.Contains(got, "ETA --") {
		t.Fatalf("no progress yet must show an unknown ETA: %q", got)
	}
	t0 := time.Unix(1_700_000_000, 0)
	est.Observe(t0, 0)
	est.Observe(t0.Add(100*time.Second), 50) // 0.5 tasks/s: 50 left take 100 s
	got := progressLine(j, est)
	for _, want := range []string{"[###############...............]", "40/100 done", "10 failed", "5 running", "ETA 1m40s at 0.5 tasks/s", "RUNNING"} {
		if !strings.Contains(got, want) {
			t.Fatalf("progress line %q lacks %q", got, want)
		}
	}
	done := api.Job{State: "DONE", Tasks: api.TaskCounts{Total: 100, Done: 100}}
	if got := progressLine(done, est); strings.Contains(got, "ETA") {
		t.Fatalf("a finished job shows an ETA: %q", got)
	}
}

func TestRateString(t *testing.T) {
	for _, tc := range []struct {
		perSecond float64
		want      string
	}{{42.4, "42 tasks/s"}, {4.26, "4.3 tasks/s"}, {0.3, "18 tasks/min"}, {0.01, "0.6 tasks/min"}} {
		if got := rateString(tc.perSecond); got != tc.want {
			t.Errorf("rateString(%v) = %q, want %q", tc.perSecond, got, tc.want)
		}
	}
}
