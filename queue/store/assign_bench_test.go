package store

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/harvest-hpc/harvest/pilotproto"
)

// BenchmarkAssign250Jobs assigns one task of each of 250 jobs (the worst
// case of fair share: every pick a different user) in one transaction.
func BenchmarkAssign250Jobs(b *testing.B) {
	s, err := Open(filepath.Join(b.TempDir(), "q.db"))
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	t0 := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	s.DecideLease(ctx, "local", pilotproto.LeaseRequest{PilotID: "p1"}, t0, 24*time.Hour)
	names := make([]string, 200)
	for i := range names {
		names[i] = fmt.Sprintf("t%03d", i)
	}
	var jobs []int64
	for u := 0; u < 1000; u++ {
		id, _ := s.CreateJob(ctx, NewJob{Owner: fmt.Sprintf("u%04d", u), Dataset: "/d", Command: []string{"p"}, BatchSize: 1, Price: 1, Cores: 1, MaxAttempts: 1, Submitted: t0, Expires: t0.Add(time.Hour)})
		s.InsertTasks(ctx, id, names, t0, 1000, nil)
		s.ActivateJob(ctx, id, "/o", 200)
		jobs = append(jobs, id)
	}
	s.WriteStats(true)
	k := 0
	for b.Loop() {
		takes := make([]Take, 250)
		for i := range takes {
			takes[i] = Take{Job: jobs[k%len(jobs)], N: 1}
			k++
		}
		if _, err := s.Assign(ctx, "local", 1, t0, takes); err != nil {
			b.Fatal(err)
		}
	}
	ws := s.WriteStats(false)
	b.ReportMetric(float64(ws.Longest.Microseconds())/1000, "longest-tx-ms")
	b.ReportMetric(float64(ws.LongestCPU.Microseconds())/1000, "longest-tx-cpu-ms")
}
