package master

import "time"

// Estimator learns one job's task duration: an exponentially weighted mean
// and mean absolute deviation, so Estimate is a high, not a typical, value
// (mean + 2 deviations covers most tasks of a job whose tasks differ).
type Estimator struct {
	n         int
	mean, dev float64 // seconds
}

const ewmaAlpha = 0.2

// Observe adds one measured duration.
func (e *Estimator) Observe(d time.Duration) {
	x := d.Seconds()
	if e.n == 0 {
		e.mean, e.dev = x, x/4
	} else {
		diff := x - e.mean
		if diff < 0 {
			diff = -diff
		}
		e.mean += ewmaAlpha * (x - e.mean)
		e.dev += ewmaAlpha * (diff - e.dev)
	}
	e.n++
}

// Estimate returns the duration to plan with and whether anything was
// observed yet.
func (e *Estimator) Estimate() (time.Duration, bool) {
	if e.n == 0 {
		return 0, false
	}
	return time.Duration((e.mean + 2*e.dev) * float64(time.Second)), true
}

// FitBatch returns how many of want tasks (each estimated to take d) a
// worker with slots slots and outstanding tasks already handed to it can
// finish within remaining. The worker runs slots tasks at a time, so n new
// tasks finish after ceil((outstanding+n)/slots) waves of d. remaining < 0
// means no deadline. Returns 0 when not even one task fits: the worker is
// left idle so the agent can release its node.
func FitBatch(want, outstanding, slots int, d, remaining time.Duration) int {
	if want <= 0 || slots <= 0 {
		return 0
	}
	if remaining < 0 {
		return want
	}
	if d <= 0 {
		// Nothing learnt yet: any task may fit, but not past the end.
		if remaining == 0 {
			return 0
		}
		return want
	}
	waves := int(remaining / d) // whole waves that fit
	n := waves*slots - outstanding
	if n > want {
		n = want
	}
	if n < 0 {
		n = 0
	}
	return n
}
