package core_test

import (
	"testing"
	"time"

	"github.com/harvest-hpc/harvest/master/core"
)

func TestFitBatch(t *testing.T) {
	s := time.Second
	cases := []struct {
		name                  string
		want, outstanding, sl int
		d, remaining          time.Duration
		fit                   int
	}{
		{"a worker without deadline takes the whole batch", 10, 0, 1, s, -1, 10},
		{"an unknown duration does not shrink the batch", 10, 0, 1, 0, time.Minute, 10},
		{"an unknown duration at the very end gets nothing", 10, 0, 1, 0, 0, 0},
		{"one slot and 3.5 task-times left fits 3 tasks", 10, 0, 1, s, 3500 * time.Millisecond, 3},
		{"four slots run four tasks per wave", 10, 0, 4, s, 2 * s, 8},
		{"tasks already handed to the worker count first", 10, 5, 4, s, 2 * s, 3},
		{"a worker whose queue already fills its time gets nothing", 10, 8, 4, s, 2 * s, 0},
		{"less than one task-time left leaves the worker idle", 10, 0, 8, 10 * s, 9 * s, 0},
		{"a fitting batch is never enlarged", 2, 0, 4, s, time.Hour, 2},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := core.FitBatch(tc.want, tc.outstanding, tc.sl, tc.d, tc.remaining); got != tc.fit {
				t.Fatalf("FitBatch = %d, want %d", got, tc.fit)
			}
		})
	}
}

func TestEstimatorPlansWithAHighValue(t *testing.T) {
	var e core.Estimator
	if _, ok := e.Estimate(); ok {
		t.Fatal("an estimator without observations claims an estimate")
	}
	for _, d := range []time.Duration{10, 12, 8, 10, 11, 9, 10} {
		e.Observe(d * time.Second)
	}
	got, ok := e.Estimate()
	if !ok || got < 10*time.Second || got > 16*time.Second {
		t.Fatalf("estimate %s for tasks of 8-12 s: want above the mean, below 16 s", got)
	}
	for i := 0; i < 30; i++ {
		e.Observe(60 * time.Second) // the job's tasks got longer
	}
	if got, _ := e.Estimate(); got < 55*time.Second {
		t.Fatalf("estimate %s did not follow tasks that now take 60 s", got)
	}
}
