package quantile

import (
	"testing"
	"time"
)

func TestOfIsTheNearestRank(t *testing.T) {
	xs := []int64{50, 10, 40, 20, 30, 60, 70, 80, 90, 100}
	for _, tc := range []struct {
		q    float64
		want int64
	}{{0.5, 50}, {0.9, 90}, {0.99, 100}, {1, 100}, {0.01, 10}} {
		if got := Of(xs, tc.q); got != tc.want {
			t.Errorf("q%.2f = %d, want %d", tc.q, got, tc.want)
		}
	}
	if got := Of([]int64(nil), 0.99); got != 0 {
		t.Errorf("no values: %d, want 0", got)
	}
	// 1,000 values: p99.9 is the 999th, not the last.
	ds := make([]time.Duration, 1000)
	for i := range ds {
		ds[i] = time.Duration(1000-i) * time.Millisecond
	}
	if got := Of(ds, 0.999); got != 999*time.Millisecond {
		t.Errorf("p99.9 of 1..1000 ms = %s, want 999ms", got)
	}
}
