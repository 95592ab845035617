package queue

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/harvest-hpc/harvest/internal/pgtest"
	"github.com/harvest-hpc/harvest/pilotproto"
	"github.com/harvest-hpc/harvest/queue/store"
)

func TestResultsChunkBoundsRowsAndBytes(t *testing.T) {
	results := func(n, tail int) []pilotproto.Result {
		rs := make([]pilotproto.Result, n)
		for i := range rs {
			rs[i] = pilotproto.Result{TaskID: int64(i + 1), Attempt: 1, Status: pilotproto.StatusFailed, ErrorTail: strings.Repeat("x", tail)}
		}
		return rs
	}
	for _, c := range []struct {
		n, tail, limit, want int
	}{
		{0, 0, 100, 0},
		{250, 0, 100, 100}, // the row limit
		{250, 2048, 100, chunkBytes / (2048 + resultOverhead)}, // the default worker's tails: 30
		{5, 64 << 10, 100, 1}, // the API's largest: one each
		{5, 1 << 20, 100, 1},  // never none
		{5, 0, 0, 1},          // a limit under 1 is 1
	} {
		if got := resultsChunk(results(c.n, c.tail), c.limit); got != c.want {
			t.Errorf("%d results with %d-byte tails, limit %d: a chunk of %d, want %d", c.n, c.tail, c.limit, got, c.want)
		}
	}
}

// Fresh successes write no row of their own: those of one job go up to
// 4 x the row limit in one transaction, those of as many jobs as
// results by the row limit, and a retry's or a failure's count a row.
func TestResultsChunkCountsFreshSuccessesByJob(t *testing.T) {
	done := func(n, jobs int) []pilotproto.Result { // n successes, job by job in runs
		rs := make([]pilotproto.Result, n)
		for i := range rs {
			job := int64(i*jobs/n + 1)
			rs[i] = pilotproto.Result{TaskID: job<<32 | int64(i), Attempt: 1, Status: pilotproto.StatusDone, Pilot: "p1", DurationMS: 3}
		}
		return rs
	}
	retried := done(250, 1)
	for i := range retried {
		retried[i].Attempt = 2
	}
	failed := done(250, 1)
	failed[3].Status = pilotproto.StatusFailed
	for _, c := range []struct {
		what        string
		rs          []pilotproto.Result
		limit, want int
	}{
		{"one job's 250", done(250, 1), 100, 250},
		{"one job's 1000", done(1000, 1), 100, 400},
		{"250 of 2 jobs", done(250, 2), 100, 250},
		{"250 of 250 jobs", done(250, 250), 100, 100},
		{"250 of 125 jobs", done(250, 125), 100, 200},
		{"one job's 250, second attempts", retried, 100, 100},
		{"one job's 250, the fourth failed", failed, 1, 3}, // the failure is the second row
		{"one job's 10, limit 0", done(10, 1), 0, 4},
	} {
		if got := resultsChunk(c.rs, c.limit); got != c.want {
			t.Errorf("%s, limit %d: a chunk of %d, want %d", c.what, c.limit, got, c.want)
		}
	}
}

var t0 = time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)

// leasedStore opens a store in a temporary directory, closed when the
// benchmark ends, whose local pool's lease p1 holds (epoch 1) for a day.
func leasedStore(b *testing.B) *store.Store {
	s, err := store.Open(pgtest.DB(b, filepath.Join(b.TempDir(), "q.db")))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.Close() })
	if _, _, err := s.DecideLease(context.Background(), "local", pilotproto.LeaseRequest{PilotID: "p1"}, t0, 24*time.Hour); err != nil {
		b.Fatal(err)
	}
	return s
}

// BenchmarkFailedResultsWithLongTails is a pool's round with failing
// tasks: it hands out 100 tasks (retried ones after the first round),
// applies their failed results in the chunks the queue makes
// (resultsChunk). It reports the longest time one of
// these write transactions held the lock, and how many held it over 5 ms.
// The store alone: no HTTP, no queue service above it.
func BenchmarkFailedResultsWithLongTails(b *testing.B) {
	for _, tail := range []int{2 << 10, 64 << 10} {
		b.Run(fmt.Sprintf("tail=%dKiB", tail>>10), func(b *testing.B) {
			s := leasedStore(b)
			ctx := context.Background()
			id, _ := s.CreateJob(ctx, store.NewJob{Owner: "alice", Dataset: "/d", Command: []string{"p"}, BatchSize: 1, Price: 1, Cores: 1, MaxAttempts: 1 << 30, Submitted: t0, Expires: t0.Add(time.Hour)})
			names := make([]string, 100)
			for i := range names {
				names[i] = fmt.Sprintf("t%03d", i)
			}
			s.InsertTasks(ctx, id, names, 1000, nil)
			s.ActivateJob(ctx, id, "/o", len(names))
			msg := strings.Repeat("e", tail)
			var longest time.Duration
			var slow int64
			s.WriteStats(true)
			for b.Loop() {
				got, err := s.Assign(ctx, "local", 1, t0, map[int64]int{id: 100})
				if err != nil || len(got.Tasks[id]) != 100 {
					b.Fatalf("assign: %d tasks %v", len(got.Tasks[id]), err)
				}
				var rs []pilotproto.Result
				for _, tk := range got.Tasks[id] {
					rs = append(rs, pilotproto.Result{TaskID: tk.ID, Attempt: tk.Attempt, Status: pilotproto.StatusFailed, ExitCode: 1, DurationMS: 10, ErrorTail: msg})
				}
				for len(rs) > 0 {
					k := resultsChunk(rs, 100)
					if _, err := s.ApplyResults(ctx, "local", 1, t0, rs[:k]); err != nil {
						b.Fatal(err)
					}
					rs = rs[k:]
				}
				ws := s.WriteStats(true)
				longest, slow = max(longest, ws.Longest), slow+ws.Slow
			}
			b.ReportMetric(float64(longest.Microseconds())/1000, "longest-ms")
			b.ReportMetric(float64(slow), "over-5ms")
		})
	}
}
