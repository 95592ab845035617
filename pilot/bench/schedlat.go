package bench

import (
	"math"
	"runtime/metrics"
)

// schedLatency is the Go scheduler's latency histogram of this process
// (how long goroutines waited runnable before they ran): a write
// transaction whose writer slept was waiting for a processor here after a
// cgo call, or for a Go lock.
const schedLatency = "/sched/latencies:seconds"

func readSchedLatency() *metrics.Float64Histogram {
	s := []metrics.Sample{{Name: schedLatency}}
	metrics.Read(s)
	if s[0].Value.Kind() != metrics.KindFloat64Histogram {
		return nil
	}
	return s[0].Value.Float64Histogram()
}

// schedQuantiles returns the q quantiles (seconds, each its bucket's upper
// bound) and the upper bound of the highest non-empty bucket of the
// waits between two readings of the histogram.
func schedQuantiles(before, after *metrics.Float64Histogram, qs ...float64) (out []float64, most float64) {
	out = make([]float64, len(qs))
	if before == nil || after == nil || len(before.Counts) != len(after.Counts) {
		return out, 0
	}
	counts := make([]uint64, len(after.Counts))
	var n uint64
	for i := range counts {
		counts[i] = after.Counts[i] - before.Counts[i]
		n += counts[i]
		if counts[i] > 0 {
			most = upper(after.Buckets, i)
		}
	}
	if n == 0 {
		return out, 0
	}
	for j, q := range qs {
		need := uint64(math.Ceil(q * float64(n)))
		var seen uint64
		for i, c := range counts {
			if seen += c; seen >= need {
				out[j] = upper(after.Buckets, i)
				break
			}
		}
	}
	return out, most
}

// upper is bucket i's upper bound (Buckets has one more entry than Counts;
// the last may be +Inf: then the lower bound).
func upper(b []float64, i int) float64 {
	if math.IsInf(b[i+1], 1) {
		return b[i]
	}
	return b[i+1]
}
