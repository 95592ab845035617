// Package quantile computes quantiles by the nearest-rank method, for the
// figures that harvest prints (the simulator's waits, the replay's
// fidelity, the host probe's computations).
package quantile

import (
	"cmp"
	"math"
	"slices"
)

// Of returns the q-quantile (0 < q <= 1) of xs by the nearest-rank
// method: the smallest value with at least q of the values at or below
// it. xs is sorted in place; the zero value for none.
func Of[T cmp.Ordered](xs []T, q float64) T {
	var zero T
	if len(xs) == 0 {
		return zero
	}
	slices.Sort(xs)
	return Sorted(xs, q)
}

// Sorted is Of for xs already sorted.
func Sorted[T cmp.Ordered](xs []T, q float64) T {
	var zero T
	if len(xs) == 0 {
		return zero
	}
	k := int(math.Ceil(q*float64(len(xs)))) - 1
	return xs[min(max(k, 0), len(xs)-1)]
}
