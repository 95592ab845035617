package main

import (
	"fmt"
	"math"
	"time"
)

// etaTau is the time constant of the smoothed completion rate: a change
// in the rate shows within about a minute, while the bursts of a batch
// finishing at once (batch-size tasks per worker, seen at poll times)
// average out.
const etaTau = 30 * time.Second

// rateEstimator smooths the rate at which a job's tasks finish, so that
// the ETA of `submit --wait` does not jump with every batch: completions
// and elapsed time are both summed with weights that decay exponentially
// with age (time constant tau), and the rate is their ratio. Early on it
// is the plain average since waiting began; later the time before the
// pilots started, and any old pace, fade out. It reads no clock: the
// caller passes the time of each observation.
type rateEstimator struct {
	tau time.Duration

	started bool
	last    time.Time
	lastFin int
	tasks   float64 // decayed completions
	seconds float64 // decayed elapsed time
}

func newRateEstimator(tau time.Duration) *rateEstimator { return &rateEstimator{tau: tau} }

// Observe records that fin tasks had finished at t.
func (e *rateEstimator) Observe(t time.Time, fin int) {
	if !e.started {
		e.started, e.last, e.lastFin = true, t, fin
		return
	}
	dt := t.Sub(e.last).Seconds()
	if dt <= 0 {
		return // the same instant (or a clock step back): wait for time to pass
	}
	decay := math.Exp(-dt / e.tau.Seconds())
	e.tasks = e.tasks*decay + float64(max(0, fin-e.lastFin))
	e.seconds = e.seconds*decay + dt
	e.last, e.lastFin = t, fin
}

// Rate returns the smoothed completions per second, and whether there has
// been any progress to tell it from.
func (e *rateEstimator) Rate() (float64, bool) {
	if e.tasks <= 0 || e.seconds <= 0 {
		return 0, false
	}
	return e.tasks / e.seconds, true
}

// ETA returns the time left for left more tasks at the smoothed rate.
func (e *rateEstimator) ETA(left int) (time.Duration, bool) {
	r, ok := e.Rate()
	if !ok || left < 0 {
		return 0, false
	}
	return time.Duration(float64(left) / r * float64(time.Second)).Round(time.Second), true
}

// rateString writes a rate for people: "4.3 tasks/s", "12 tasks/min".
func rateString(perSecond float64) string {
	switch {
	case perSecond >= 10:
		return fmt.Sprintf("%.0f tasks/s", perSecond)
	case perSecond >= 0.5:
		return fmt.Sprintf("%.1f tasks/s", perSecond)
	case perSecond*60 >= 10:
		return fmt.Sprintf("%.0f tasks/min", perSecond*60)
	}
	return fmt.Sprintf("%.1f tasks/min", perSecond*60)
}
