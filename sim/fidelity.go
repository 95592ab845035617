package sim

import (
	"math"
	"slices"

	simcluster "github.com/harvest-hpc/harvest/adapters/sim"
)

// Recorded compares, job by job, the waits of a run with the waits a
// trace recorded (or a replay measured): the foreign jobs that started in
// the window and have a recorded wait.
type Recorded struct {
	Jobs int `json:"jobs"`
	// MeanWaitS is the recorded mean wait of those jobs; SimMeanWaitS
	// theirs in this run.
	MeanWaitS    float64 `json:"mean_wait_s"`
	SimMeanWaitS float64 `json:"sim_mean_wait_s"`
	// Pearson and Spearman are the correlations of the two waits, job by
	// job (Spearman: of their ranks, so a few very long waits do not
	// decide it). 0 when undefined (fewer than two jobs, or no spread).
	Pearson  float64 `json:"pearson"`
	Spearman float64 `json:"spearman"`
}

// compareRecorded pairs each started foreign job's wait with its recorded
// one; nil when the workload recorded none.
func compareRecorded(recs []simcluster.Record, recorded map[string]int64, to int64) *Recorded {
	var sim, rec []float64
	for _, r := range recs {
		w, ok := recorded[r.Name]
		if !ok || r.Pilot || r.Label != "foreign" || r.Start < 0 || r.Start > to {
			continue
		}
		sim = append(sim, float64(r.Start-r.Submit))
		rec = append(rec, float64(w))
	}
	if len(sim) == 0 {
		return nil
	}
	return &Recorded{Jobs: len(sim), MeanWaitS: mean(rec), SimMeanWaitS: mean(sim), Pearson: pearson(sim, rec), Spearman: pearson(ranks(sim), ranks(rec))}
}

func mean(xs []float64) float64 {
	var s float64
	for _, x := range xs {
		s += x
	}
	return s / float64(len(xs))
}

// pearson is the correlation coefficient of xs and ys (same length), 0 if
// either has no spread.
func pearson(xs, ys []float64) float64 {
	if len(xs) < 2 {
		return 0
	}
	mx, my := mean(xs), mean(ys)
	var sxy, sxx, syy float64
	for i := range xs {
		dx, dy := xs[i]-mx, ys[i]-my
		sxy += dx * dy
		sxx += dx * dx
		syy += dy * dy
	}
	if sxx == 0 || syy == 0 {
		return 0
	}
	return sxy / math.Sqrt(sxx*syy)
}

// ranks returns the rank of each value (1 = smallest), ties sharing the
// mean of their ranks.
func ranks(xs []float64) []float64 {
	idx := make([]int, len(xs))
	for i := range idx {
		idx[i] = i
	}
	slices.SortStableFunc(idx, func(a, b int) int {
		switch {
		case xs[a] < xs[b]:
			return -1
		case xs[a] > xs[b]:
			return 1
		}
		return 0
	})
	out := make([]float64, len(xs))
	for i := 0; i < len(idx); {
		k := i
		for k+1 < len(idx) && xs[idx[k+1]] == xs[idx[i]] {
			k++
		}
		r := float64(i+k)/2 + 1
		for m := i; m <= k; m++ {
			out[idx[m]] = r
		}
		i = k + 1
	}
	return out
}
