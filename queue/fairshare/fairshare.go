// Package fairshare holds the pure fair-share arithmetic of the queue:
// JAliEn's computedPriority, and the two fairness figures the project
// reports (Jain's index and the normalised user wait, NUWT). No I/O, no
// clock: every input is an argument.
package fairshare

import (
	"errors"
	"fmt"
	"math"
)

// JAliEn's per-user defaults.
const (
	DefaultMaxParallelJobs     = 20   // cores running at once
	DefaultMaxTotalRunningTime = 1e7  // CPU seconds in the last 24 h
	DefaultMaxTotalCpuCost     = 1e7  // cost in the last 24 h
	DefaultPriority            = 1.0  // baseline priority
	boostLow                   = 1e5  // below this cost the boost is full
	boostHigh                  = 1e6  // above this cost there is no boost
	boostMax                   = 10.0 // the full boost
)

// Weights of the weighted sum.
const (
	CostWeight     = 0.1
	RunningWeight  = 0.5
	PriorityWeight = 0.4
)

// NoIntake is the computedPriority of a user over quota: nothing is handed out.
const NoIntake = -1.0

// Limits are a user's baseline priority and quotas, as the admin sets them.
type Limits struct {
	Priority            float64 `json:"priority"`
	MaxParallelJobs     int     `json:"max_cores"`
	MaxTotalRunningTime float64 `json:"max_cpu_time"`
	MaxTotalCpuCost     float64 `json:"max_cost"`
}

// DefaultLimits returns JAliEn's defaults.
func DefaultLimits() Limits {
	return Limits{
		Priority:            DefaultPriority,
		MaxParallelJobs:     DefaultMaxParallelJobs,
		MaxTotalRunningTime: DefaultMaxTotalRunningTime,
		MaxTotalCpuCost:     DefaultMaxTotalCpuCost,
	}
}

// ErrInvalidLimits is wrapped by every Limits.Validate error.
var ErrInvalidLimits = errors.New("invalid user limits")

// Validate rejects limits that would make the formula meaningless.
func (l Limits) Validate() error {
	switch {
	case !(l.Priority > 0) || math.IsInf(l.Priority, 0):
		return fmt.Errorf("%w: priority must be a positive number, got %v", ErrInvalidLimits, l.Priority)
	case l.MaxParallelJobs < 1:
		return fmt.Errorf("%w: max cores must be at least 1, got %d", ErrInvalidLimits, l.MaxParallelJobs)
	case !(l.MaxTotalRunningTime > 0) || math.IsInf(l.MaxTotalRunningTime, 0):
		return fmt.Errorf("%w: max CPU time must be a positive number of seconds, got %v", ErrInvalidLimits, l.MaxTotalRunningTime)
	case !(l.MaxTotalCpuCost > 0) || math.IsInf(l.MaxTotalCpuCost, 0):
		return fmt.Errorf("%w: max cost must be a positive number, got %v", ErrInvalidLimits, l.MaxTotalCpuCost)
	}
	return nil
}

// Usage is what a user consumes: cores running now, and CPU time and cost
// over the sliding 24-hour window.
type Usage struct {
	RunningCores int     `json:"running_cores"`
	CPUTime24h   float64 `json:"cpu_time_24h"`
	Cost24h      float64 `json:"cost_24h"`
}

// Boost is JAliEn's piecewise boost: full (10) for a light user, none
// above 1,000,000, and a rounded linear ramp in between.
func Boost(cost24h float64) float64 {
	switch {
	case cost24h < boostLow:
		return boostMax
	case cost24h > boostHigh:
		return 0
	}
	return math.Round(boostMax + (0-boostMax)/(boostHigh-boostLow)*(cost24h-boostLow))
}

// OverQuota reports whether the user gets no intake at all.
func OverQuota(l Limits, u Usage) bool {
	return u.RunningCores >= l.MaxParallelJobs ||
		u.CPUTime24h >= l.MaxTotalRunningTime ||
		u.Cost24h >= l.MaxTotalCpuCost
}

// WeightedSum is 0.1 costQuotient + 0.5 runningQuotient + 0.4
// normalizedPriority: how much of their share a user already takes, 0 for
// an idle user of the highest baseline priority. highest is the highest
// baseline priority of any user.
func WeightedSum(l Limits, u Usage, highest float64) float64 {
	costQuotient := math.Sqrt(math.Max(u.Cost24h, 0) / l.MaxTotalCpuCost)
	runningQuotient := float64(u.RunningCores) / float64(l.MaxParallelJobs)
	normalized := 0.0
	if highest > 0 {
		normalized = 1 - l.Priority/highest
	}
	return CostWeight*costQuotient + RunningWeight*runningQuotient + PriorityWeight*normalized
}

// ComputedPriority returns the user's intake priority (higher wins), or
// NoIntake (-1) when the user is over quota.
//
// DESIGN.md writes it as |weightedSum + boost - 1|. Below quota the
// weighted sum lies in [0, 1], so for any boost >= 1 that expression is
// boost - 1 + weightedSum: within a boost band the user who already takes
// more (more cores running, lower baseline priority) would win, and equal
// users would not interleave: the first to get a task keeps winning. We
// therefore use |weightedSum - boost - 1| = boost + (1 - weightedSum):
// identical to the published formula when the boost is 0, the same boost
// bands, and the direction the algorithm intends inside a band (the
// priority-sign slip is of the same kind as the maxTime one DESIGN.md
// already corrects). TestComputedPriority pins both facts.
func ComputedPriority(l Limits, u Usage, highest float64) float64 {
	if OverQuota(l, u) {
		return NoIntake
	}
	return math.Abs(WeightedSum(l, u, highest) - Boost(u.Cost24h) - 1)
}

// PublishedFormula is |weightedSum + boost - 1| exactly as published, kept
// so tests and docs can show why ComputedPriority corrects it.
func PublishedFormula(l Limits, u Usage, highest float64) float64 {
	if OverQuota(l, u) {
		return NoIntake
	}
	return math.Abs(WeightedSum(l, u, highest) + Boost(u.Cost24h) - 1)
}

// Jain returns Jain's fairness index (sum x)^2 / (n sum x^2) of the
// shares: 1 when all are equal, 1/n when one takes everything. An empty or
// all-zero input is perfectly fair (1).
func Jain(shares []float64) float64 {
	var sum, sq float64
	for _, x := range shares {
		sum += x
		sq += x * x
	}
	if sq == 0 {
		return 1
	}
	return sum * sum / (float64(len(shares)) * sq)
}

// NUWT is a user's normalised wait: total wait of their tasks divided by
// the total work (cores x runtime) they got. Lower is better; a user who
// got no work has an undefined NUWT, returned as +Inf.
func NUWT(totalWait, totalWork float64) float64 {
	if totalWork <= 0 {
		return math.Inf(1)
	}
	return totalWait / totalWork
}
