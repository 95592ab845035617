package sim

import (
	"math"
	"slices"
)

// Quantile returns the q-quantile (0 < q <= 1) of xs by the nearest-rank
// method: the smallest value with at least q of the values at or below it.
// xs is sorted in place; 0 for none.
func Quantile(xs []int64, q float64) int64 {
	if len(xs) == 0 {
		return 0
	}
	slices.Sort(xs)
	k := int(math.Ceil(q*float64(len(xs)))) - 1
	return xs[min(max(k, 0), len(xs)-1)]
}
