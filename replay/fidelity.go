package replay

import (
	"math"

	"github.com/harvest-hpc/harvest/internal/quantile"
	"github.com/harvest-hpc/harvest/sim"
)

// Shift counts, job by job, the foreign jobs of run that started more
// than Threshold seconds later (or not at all) or earlier than in base.
// Two runs of the same thing on a real scheduler differ too: run against
// a second baseline run, it is the noise floor.
type Shift struct {
	ThresholdS int64 `json:"threshold_s"`
	Jobs       int   `json:"jobs"`
	Later      int   `json:"later"`
	Earlier    int   `json:"earlier"`
	NotStarted int   `json:"not_started"`
	MaxLaterS  int64 `json:"max_later_s"`
	// LateS is the foreign jobs' late job-seconds: the sum of every
	// positive delay against base, threshold or not, a job not started
	// counting until the end of the run (sim.CompareStarts, the figure
	// of `harvest sim --give-back`).
	LateS int64 `json:"late_s"`
}

// CompareShift compares run with base.
func CompareShift(base, run sim.Result, threshold int64) Shift {
	s := Shift{ThresholdS: threshold, LateS: sim.CompareStarts(base, run).TotalS}
	starts := foreignStarts(run)
	for name, b := range foreignStarts(base) {
		s.Jobs++
		r, ok := starts[name]
		switch {
		case !ok:
			s.NotStarted++
			s.Later++
		case r-b > threshold:
			s.Later++
		case b-r > threshold:
			s.Earlier++
		}
		if ok {
			s.MaxLaterS = max(s.MaxLaterS, r-b)
		}
	}
	return s
}

func foreignStarts(r sim.Result) map[string]int64 {
	out := map[string]int64{}
	for _, rec := range r.Records {
		if !rec.Pilot && rec.Label == "foreign" && rec.Start >= 0 {
			out[rec.Name] = rec.Start
		}
	}
	return out
}

// Fidelity is how far the simulator was from the real scheduler on the
// same scaled window: per foreign job, the simulated start minus the real
// one (seconds of replay time), and the utilisations.
type Fidelity struct {
	Jobs int `json:"jobs"`
	// MeanS is the mean signed difference (positive: the simulator
	// started jobs later); P50S, P90S and MaxS are of its absolute value.
	MeanS float64 `json:"mean_s"`
	P50S  int64   `json:"p50_s"`
	P90S  int64   `json:"p90_s"`
	MaxS  int64   `json:"max_s"`
	// Exact counts jobs started in the same second.
	Exact int `json:"exact"`
	// Utilization is the simulator's minus the real one.
	Utilization float64 `json:"utilization"`
	// SimMeanWaitS and RealMeanWaitS are the two mean waits.
	SimMeanWaitS  float64 `json:"sim_mean_wait_s"`
	RealMeanWaitS float64 `json:"real_mean_wait_s"`
}

// CompareFidelity compares a simulated run with the real one.
func CompareFidelity(simulated, real sim.Result) Fidelity {
	f := Fidelity{Utilization: simulated.Utilization - real.Utilization,
		SimMeanWaitS: simulated.Foreign.MeanWaitS, RealMeanWaitS: real.Foreign.MeanWaitS}
	ss := foreignStarts(simulated)
	var abs []int64
	var sum int64
	for name, r := range foreignStarts(real) {
		s, ok := ss[name]
		if !ok {
			continue
		}
		d := s - r
		sum += d
		if d == 0 {
			f.Exact++
		}
		abs = append(abs, int64(math.Abs(float64(d))))
	}
	f.Jobs = len(abs)
	if f.Jobs == 0 {
		return f
	}
	f.MeanS, f.P50S, f.P90S, f.MaxS = float64(sum)/float64(f.Jobs), quantile.Of(abs, 0.5), quantile.Of(abs, 0.9), quantile.Of(abs, 1)
	return f
}
