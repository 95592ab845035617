package store

import (
	"github.com/harvest-hpc/harvest/internal/pgtest"

	"cmp"
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/harvest-hpc/harvest/pilotproto"
)

// leasedStore opens a store in a temporary directory, closed when the
// benchmark ends, whose local pool's lease p1 holds (epoch 1) for a day.
func leasedStore(b *testing.B) *Store {
	s, err := Open(pgtest.DB(b, filepath.Join(b.TempDir(), "q.db")))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.Close() })
	if _, _, err := s.DecideLease(context.Background(), "local", pilotproto.LeaseRequest{PilotID: "p1"}, t0, 24*time.Hour); err != nil {
		b.Fatal(err)
	}
	return s
}

// BenchmarkAssign250Jobs assigns one task of each of 250 jobs (the worst
// case of fair share: every pick a different user) in one transaction.
func BenchmarkAssign250Jobs(b *testing.B) {
	s := leasedStore(b)
	ctx := context.Background()
	names := make([]string, 200)
	for i := range names {
		names[i] = fmt.Sprintf("t%03d", i)
	}
	var jobs []int64
	for u := 0; u < 1000; u++ {
		id, _ := s.CreateJob(ctx, NewJob{Owner: fmt.Sprintf("u%04d", u), Dataset: "/d", Command: []string{"p"}, BatchSize: 1, Price: 1, Cores: 1, MaxAttempts: 1, Submitted: t0, Expires: t0.Add(time.Hour)})
		s.InsertTasks(ctx, id, names, 1000, nil)
		s.ActivateJob(ctx, id, "/o", 200)
		jobs = append(jobs, id)
	}
	s.WriteStats(true)
	k := 0
	for b.Loop() {
		takes := map[int64]int{}
		for range 250 {
			takes[jobs[k%len(jobs)]] = 1
			k++
		}
		if _, err := s.Assign(ctx, "local", 1, t0, takes); err != nil {
			b.Fatal(err)
		}
	}
	ws := s.WriteStats(false)
	b.ReportMetric(float64(ws.Longest.Microseconds())/1000, "longest-tx-ms")
}

// BenchmarkAssignRetriesOf250Jobs assigns two tasks of each of 250 jobs
// whose failed entries wait to be retried (each job's two lowest retries
// handed out, attempt 2), in one transaction; each round's results fail
// them again, not timed, so every pull finds retries. It reports the
// store's write-lock time per pull.
func BenchmarkAssignRetriesOf250Jobs(b *testing.B) {
	s := leasedStore(b)
	ctx := context.Background()
	names := make([]string, 8)
	for i := range names {
		names[i] = fmt.Sprintf("t%03d", i)
	}
	takes := map[int64]int{}
	var first int64
	for u := range 250 {
		id, _ := s.CreateJob(ctx, NewJob{Owner: fmt.Sprintf("u%04d", u), Dataset: "/d", Command: []string{"p"}, BatchSize: 1, Price: 1, Cores: 1, MaxAttempts: 1 << 30, Submitted: t0, Expires: t0.Add(time.Hour)})
		s.InsertTasks(ctx, id, names, 1000, nil)
		s.ActivateJob(ctx, id, "/o", len(names))
		takes[id] = len(names)
		first = cmp.Or(first, id)
	}
	fail := func(got Taken) {
		var rs []pilotproto.Result
		for _, ts := range got.Tasks {
			for _, tk := range ts {
				rs = append(rs, pilotproto.Result{TaskID: tk.ID, Attempt: tk.Attempt, Status: pilotproto.StatusFailed, Pilot: "p1"})
			}
		}
		if _, err := s.ApplyResults(ctx, "local", 1, t0, rs); err != nil {
			b.Fatal(err)
		}
	}
	got, err := s.Assign(ctx, "local", 1, t0, takes) // every entry handed out, then failed: all retries
	if err != nil {
		b.Fatal(err)
	}
	fail(got)
	for id := range takes {
		takes[id] = 2
	}
	var lock time.Duration
	for b.Loop() {
		s.WriteStats(true)
		got, err := s.Assign(ctx, "local", 1, t0, takes)
		if err != nil || len(got.Tasks) != len(takes) || got.Tasks[first][0].Attempt < 2 {
			b.Fatalf("%d jobs served, %v", len(got.Tasks), err)
		}
		lock += s.WriteStats(true).Total
		b.StopTimer()
		fail(got)
		b.StartTimer()
	}
	b.ReportMetric(float64(lock.Microseconds())/float64(b.N)/1000, "lock-ms/pull")
}
