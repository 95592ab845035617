package sim

import (
	"maps"
	"slices"

	simcluster "github.com/harvest-hpc/harvest/adapters/sim"
)

// The figures the scheduling literature compares schedules by (Klusáček
// and Rudová 2011, "Performance and fairness for users in parallel job
// scheduling"): bounded slowdown per job, and per user the normalised
// user wait time NUWT = total wait / total work (node-seconds), with the
// fairness figure F = sum over users of (mean NUWT - NUWT_user)^2 (0 when
// every user waits alike for the work asked; larger is less fair).

// Slowdown is the bounded slowdown max(1, (wait + run) / max(run, 10 s))
// over the jobs that started.
type Slowdown struct {
	Jobs int64   `json:"jobs"`
	Mean float64 `json:"mean"`
	Max  float64 `json:"max"`
}

// Users is the per-user wait figures.
type Users struct {
	Count int `json:"count"`
	// MeanNUWT is the mean over users of NUWT (seconds of wait per
	// node-second of work).
	MeanNUWT float64 `json:"mean_nuwt"`
	// Fairness is F = sum over users of (MeanNUWT - NUWT_user)^2.
	Fairness float64 `json:"fairness"`
	// NUWT is each user's total wait / total work.
	NUWT map[string]float64 `json:"nuwt"`
}

// tally gathers the jobs of one population (foreign or harvest).
type tally struct {
	jobs           int64
	bsldSum, bsMax float64
	wait, work     map[string]int64
}

// add counts one job that started after waiting wait seconds and runs
// run seconds on nodes nodes.
// add counts one job of run seconds on cores cores, k of them a node:
// its work is in node-seconds.
func (t *tally) add(user string, wait, run int64, cores int, k int64) {
	b := simcluster.BoundedSlowdown(wait, run)
	t.addMany(user, 1, wait, run*int64(cores)/k, b, b)
}

// addMany counts n jobs at once from their sums (a harvest job's tasks).
func (t *tally) addMany(user string, n, waitSum, work int64, bsldSum, bsldMax float64) {
	if n == 0 {
		return
	}
	if t.wait == nil {
		t.wait, t.work = map[string]int64{}, map[string]int64{}
	}
	t.jobs += n
	t.bsldSum += bsldSum
	t.bsMax = max(t.bsMax, bsldMax)
	t.wait[user] += waitSum
	t.work[user] += work
}

func (t *tally) slowdown() Slowdown {
	s := Slowdown{Jobs: t.jobs, Max: t.bsMax}
	if t.jobs > 0 {
		s.Mean = t.bsldSum / float64(t.jobs)
	}
	return s
}

// users returns NUWT per user (users whose jobs did no work are left
// out: their NUWT is undefined) and F.
func (t *tally) users() Users {
	u := Users{NUWT: map[string]float64{}}
	// Summed in user order: a float sum depends on its order, and the
	// output must not depend on a map's.
	var sum float64
	users := slices.Sorted(maps.Keys(t.work))
	for _, user := range users {
		work := t.work[user]
		if work <= 0 {
			continue
		}
		n := float64(t.wait[user]) / float64(work)
		u.NUWT[user] = n
		sum += n
	}
	u.Count = len(u.NUWT)
	if u.Count == 0 {
		return u
	}
	u.MeanNUWT = sum / float64(u.Count)
	for _, user := range users {
		if n, ok := u.NUWT[user]; ok {
			u.Fairness += (u.MeanNUWT - n) * (u.MeanNUWT - n)
		}
	}
	return u
}
