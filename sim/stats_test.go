package sim

import "testing"

func TestQuantileIsTheNearestRank(t *testing.T) {
	xs := []int64{50, 10, 40, 20, 30, 60, 70, 80, 90, 100}
	for _, tc := range []struct {
		q    float64
		want int64
	}{{0.5, 50}, {0.9, 90}, {0.99, 100}, {1, 100}, {0.01, 10}} {
		if got := Quantile(xs, tc.q); got != tc.want {
			t.Errorf("q%.2f = %d, want %d", tc.q, got, tc.want)
		}
	}
	if got := Quantile(nil, 0.99); got != 0 {
		t.Errorf("no values: %d, want 0", got)
	}
}
