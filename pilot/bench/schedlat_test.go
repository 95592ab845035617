package bench

import (
	"math"
	"runtime/metrics"
	"testing"
)

// The quantiles of the waits between two readings are taken from the
// difference of the counts, each as its bucket's upper bound.
func TestSchedQuantilesOfTheWaitsBetweenTwoReadings(t *testing.T) {
	b := []float64{0, 1e-6, 1e-3, 5e-3, math.Inf(1)}
	before := &metrics.Float64Histogram{Buckets: b, Counts: []uint64{100, 50, 0, 0}}
	after := &metrics.Float64Histogram{Buckets: b, Counts: []uint64{190, 59, 0, 1}}
	// Between them: 90 waits under 1 us, 9 under 1 ms, 1 over 5 ms.
	q, most := schedQuantiles(before, after, 0.5, 0.99, 1)
	if q[0] != 1e-6 || q[1] != 1e-3 || q[2] != 5e-3 || most != 5e-3 {
		t.Fatalf("quantiles %v, most %v; want 1 us, 1 ms, 5 ms (the open bucket's lower bound), 5 ms", q, most)
	}
	if q, most := schedQuantiles(before, before, 0.99); q[0] != 0 || most != 0 {
		t.Fatalf("no waits: %v %v", q, most)
	}
	if h := readSchedLatency(); h == nil || len(h.Buckets) != len(h.Counts)+1 {
		t.Fatalf("the runtime's histogram: %+v", h)
	}
}
