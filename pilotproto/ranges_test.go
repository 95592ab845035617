package pilotproto_test

import (
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/harvest-hpc/harvest/pilotproto"
)

func TestRangesOfMergesConsecutiveIDs(t *testing.T) {
	refs := []pilotproto.TaskRef{
		{TaskID: 1<<32 + 2, Attempt: 1}, {TaskID: 1<<32 + 0, Attempt: 1}, {TaskID: 1<<32 + 1, Attempt: 1},
		{TaskID: 1<<32 + 3, Attempt: 2},                                  // another attempt
		{TaskID: 1<<32 - 1, Attempt: 1}, {TaskID: 2<<32 - 1, Attempt: 1}, // next to another job's ids
		{TaskID: 1<<32 + 1, Attempt: 1}, // listed twice
	}
	got := pilotproto.RangesOf(refs)
	want := []pilotproto.TaskRange{
		{First: 1<<32 - 1, Last: 1<<32 - 1, Attempt: 1},
		{First: 1 << 32, Last: 1<<32 + 1, Attempt: 1},
		{First: 1<<32 + 1, Last: 1<<32 + 2, Attempt: 1},
		{First: 2<<32 - 1, Last: 2<<32 - 1, Attempt: 1},
		{First: 1<<32 + 3, Last: 1<<32 + 3, Attempt: 2},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got %+v, want %+v", got, want)
	}
	w := wireOf[pilotproto.Ranges](t, pilotproto.PackRanges(got))
	back, err := w.Unpack(100)
	if err != nil || !reflect.DeepEqual(back, want) {
		t.Fatalf("unpacked %+v, %v", back, err)
	}
}

func wireOf[T any](t *testing.T, v any) T {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	var out T
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	return out
}

func TestRangesUnpackRefusesMalformedLists(t *testing.T) {
	for _, tc := range []struct {
		name string
		r    pilotproto.Ranges
		msg  string
	}{
		{"fewer attempts", pilotproto.Ranges{First: []int64{1, 1}, N: []int64{1, 1}, Attempts: []int{1}}, "as many"},
		{"an empty range", pilotproto.Ranges{First: []int64{1}, N: []int64{0}, Attempts: []int{1}}, "want 1.."},
		{"a range past the bound", pilotproto.Ranges{First: []int64{1}, N: []int64{11}, Attempts: []int{1}}, "want 1..10"},
		{"more tasks than the bound", pilotproto.Ranges{First: []int64{1, 100}, N: []int64{6, 6}, Attempts: []int{1, 1}}, "at most 10"},
		{"across two jobs", pilotproto.Ranges{First: []int64{1<<32 - 1}, N: []int64{2}, Attempts: []int{1}}, "two jobs"},
		{"an id not positive", pilotproto.Ranges{First: []int64{5, -5}, N: []int64{1, 1}, Attempts: []int{1, 1}}, "positive"},
		{"ids that overflow", pilotproto.Ranges{First: []int64{1 << 62, 1 << 62}, N: []int64{1, 1}, Attempts: []int{1, 1}}, "positive"},
		{"attempt 0", pilotproto.Ranges{First: []int64{1}, N: []int64{1}, Attempts: []int{0}}, "attempt"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := tc.r.Unpack(10); err == nil || !strings.Contains(err.Error(), tc.msg) {
				t.Fatalf("got %v, want an error containing %q", err, tc.msg)
			}
		})
	}
	// In a report: a range's run time must be there and not negative.
	for body, msg := range map[string]string{
		`{"epoch": 1, "ranges": {"first": [5], "n": [2], "attempts": [1]}}`:                          "duration_ms",
		`{"epoch": 1, "ranges": {"first": [5], "n": [2], "attempts": [1], "duration_ms": [-1]}}`:     "negative",
		`{"epoch": 1, "ranges": {"first": [5], "n": [100001], "attempts": [1], "duration_ms": [1]}}`: "want 1..",
	} {
		var w pilotproto.ResultsWire
		if err := json.Unmarshal([]byte(body), &w); err != nil {
			t.Fatal(err)
		}
		if _, err := w.Unpack(); err == nil || !strings.Contains(err.Error(), msg) {
			t.Fatalf("%s: got %v, want an error containing %q", body, err, msg)
		}
	}
}

// TestWireSizes prints the bytes of a heartbeat of a pool holding n tasks
// and of a report of 1,000 plain successes, in the previous form and in
// ranges: with 1 job (one grant), and with 1,000 jobs of one task each
// (1,000 users competing: a grant per task, the worst case for ranges).
func TestWireSizes(t *testing.T) {
	size := func(v any) int {
		b, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		return len(b)
	}
	for _, n := range []int{1000, 10000} {
		for _, jobs := range []int{1, 100, n} {
			refs := make([]pilotproto.TaskRef, n)
			for i := range refs {
				job := int64(4711 + i%jobs)
				refs[i] = pilotproto.TaskRef{TaskID: job<<32 | int64(i/jobs), Attempt: 1}
			}
			held := pilotproto.PackRanges(pilotproto.RangesOf(refs))
			old, now := size(pilotproto.HeartbeatRequest{Epoch: 3, Running: refs}), size(pilotproto.HeartbeatRequest{Epoch: 3, Ranges: &held})
			t.Logf("heartbeat, %d tasks of %d jobs: %d bytes as tasks, %d as %d ranges", n, jobs, old, now, held.Len())
			if now > old {
				t.Errorf("ranges take more bytes than tasks")
			}
		}
	}
	for _, jobs := range []int{1, 10, 1000} {
		rs := make([]pilotproto.Result, 1000)
		for i := range rs {
			job := int64(4711 + i%jobs)
			rs[i] = pilotproto.Result{TaskID: job<<32 | int64(i/jobs), JobID: job, Attempt: 1, Status: pilotproto.StatusDone,
				StartedAt: 1795000000000 + int64(i)*37, DurationMS: 2000 + int64(i%7)*113, Pilot: fmt.Sprint(1234567 + i%4)}
		}
		w := pilotproto.PackResults(pilotproto.ResultsRequest{Epoch: 3, Results: rs})
		var prev pilotproto.ResultsWire
		prev.Epoch, prev.Plain, prev.Results = 3, nil, nil
		prev.Plain, _ = pilotproto.PackPlain(rs)
		old, now := size(prev), size(w)
		t.Logf("results, 1000 plain successes of %d jobs: %d bytes as plain lists, %d as %d ranges", jobs, old, now, w.Ranges.Len())
		if now > old {
			t.Errorf("ranges take more bytes than plain lists")
		}
	}
}
