package queue

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/harvest-hpc/harvest/pilotproto"
	"github.com/harvest-hpc/harvest/queue/api"
)

// BenchmarkRecomputePriorities10kUsers recomputes and stores the
// computedPriority of 10,000 users (each with usage in its window), the
// job JAliEn's production takes 882 ms for 3,000 users. Reported: the
// total write-lock time of one full recompute and its longest transaction.
func BenchmarkRecomputePriorities10kUsers(b *testing.B) {
	e := newEnv(b)
	ctx := context.Background()
	const users = 10_000
	err := e.q.write(ctx, func(tx *sql.Tx) error {
		for i := 0; i < users; i++ {
			if _, err := tx.Exec(`INSERT INTO users (name, priority, max_cores, max_cpu_time, max_cost, created_at) VALUES (?, ?, 20, 1e7, 1e7, 0)`,
				fmt.Sprintf("user%05d", i), 1+float64(i%7)); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		b.Fatal(err)
	}
	if err := e.q.Reconcile(ctx); err != nil {
		b.Fatal(err)
	}
	now := ms(e.clock.Now())
	e.q.mu.Lock()
	i := 0
	for _, u := range e.q.users {
		u.running = i % 20
		for k := 0; k < 5; k++ {
			u.events = append(u.events, usageEvent{at: now - int64(k)*60_000, cpu: float64(i % 1000), cost: float64(i%1000) * 3})
		}
		i++
	}
	e.q.mu.Unlock()
	var total, longest time.Duration
	var txs int
	b.ResetTimer()
	for b.Loop() {
		e.q.mu.Lock()
		for _, u := range e.q.users {
			u.dirty = true
		}
		e.q.mu.Unlock()
		st, err := e.q.FlushUsage(ctx)
		if err != nil {
			b.Fatal(err)
		}
		if st.Users < users {
			b.Fatalf("flushed %d users", st.Users)
		}
		total += st.Total
		txs += st.Transactions
		longest = max(longest, st.Longest)
	}
	b.ReportMetric(float64(total.Microseconds())/1000/float64(b.N), "lock-ms/recompute")
	b.ReportMetric(float64(longest.Microseconds())/1000, "longest-tx-ms")
	b.ReportMetric(float64(total.Microseconds())/1000/float64(txs), "mean-tx-ms")
}

// BenchmarkPull100Pullers measures pull throughput with 100 concurrent
// pullers (10 tasks each per pull) over 20 users' backlog.
func BenchmarkPull100Pullers(b *testing.B) {
	e := newEnv(b, func(c *Config) {
		c.LeaseTTL = 24 * time.Hour
		c.DefaultLimits.MaxParallelJobs = 1 << 30 // measure the pull, not the quota
	})
	ctx := context.Background()
	const users, perUser = 20, 2500
	for u := 0; u < users; u++ {
		name := fmt.Sprintf("u%02d", u)
		ds := filepath.Join(e.data, name)
		for i := 0; i < perUser; i++ {
			if err := os.MkdirAll(filepath.Join(ds, fmt.Sprintf("t%05d", i)), 0o755); err != nil {
				b.Fatal(err)
			}
		}
		if _, err := e.q.Submit(ctx, name, api.JobSpec{Dataset: ds, Command: []string{"p"}, BatchSize: 10}); err != nil {
			b.Fatal(err)
		}
	}
	if _, err := e.q.Lease(ctx, pilotproto.LeaseRequest{PilotID: "m"}); err != nil {
		b.Fatal(err)
	}
	e.q.WriteStats(true)
	var pulled atomic.Int64
	b.ResetTimer()
	start := time.Now()
	for b.Loop() {
		var wg sync.WaitGroup
		for p := 0; p < 100; p++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				r, err := e.q.Pull(ctx, pilotproto.PullRequest{Epoch: 1, Max: 10})
				if err != nil {
					b.Error(err)
					return
				}
				pulled.Add(int64(len(r.Tasks)))
			}()
		}
		wg.Wait()
	}
	el := time.Since(start)
	ws := e.q.WriteStats(false)
	b.ReportMetric(float64(pulled.Load())/el.Seconds(), "tasks/s")
	b.ReportMetric(float64(ws.Longest.Microseconds())/1000, "longest-tx-ms")
	b.ReportMetric(float64(ws.Total.Microseconds())/1000/float64(max(ws.Transactions, 1)), "mean-tx-ms")
	if pulled.Load() == 0 {
		b.Fatal("nothing pulled")
	}
}

// TestSubmit100kEntries checks that a dataset of 100,000 entries is
// accepted in seconds, in short transactions.
func TestSubmit100kEntries(t *testing.T) {
	if testing.Short() {
		t.Skip("creates 100,000 files")
	}
	e := newEnv(t)
	ds := filepath.Join(e.data, "big")
	os.MkdirAll(ds, 0o755)
	for i := 0; i < 100_000; i++ {
		f, err := os.Create(filepath.Join(ds, fmt.Sprintf("f%06d", i)))
		if err != nil {
			t.Fatal(err)
		}
		f.Close()
	}
	e.q.WriteStats(true)
	start := time.Now()
	j, err := e.q.Submit(context.Background(), "alice", api.JobSpec{Dataset: ds, Command: []string{"p", "{input}"}, BatchSize: 100})
	el := time.Since(start)
	if err != nil {
		t.Fatal(err)
	}
	ws := e.q.WriteStats(false)
	t.Logf("100,000 entries accepted in %v: %d write transactions, longest %v, total lock %v", el, ws.Transactions, ws.Longest, ws.Total)
	if j.Tasks.Total != 100_000 || j.State != api.JobWaiting {
		t.Fatalf("job: %s %+v", j.State, j.Tasks)
	}
	if el > 10*time.Second {
		t.Fatalf("submit took %v, want seconds", el)
	}
}

// BenchmarkPull100PullersHTTP is the same load through the real HTTP API
// and the Go client (JSON, auth, one connection per puller).
func BenchmarkPull100PullersHTTP(b *testing.B) {
	e := newEnv(b, func(c *Config) {
		c.LeaseTTL = 24 * time.Hour
		c.DefaultLimits.MaxParallelJobs = 1 << 30
	})
	ctx := context.Background()
	const users, perUser = 20, 2500
	for u := 0; u < users; u++ {
		name := fmt.Sprintf("u%02d", u)
		ds := filepath.Join(e.data, name)
		for i := 0; i < perUser; i++ {
			if err := os.MkdirAll(filepath.Join(ds, fmt.Sprintf("t%05d", i)), 0o755); err != nil {
				b.Fatal(err)
			}
		}
		if _, err := e.q.Submit(ctx, name, api.JobSpec{Dataset: ds, Command: []string{"p"}, BatchSize: 10}); err != nil {
			b.Fatal(err)
		}
	}
	pilot := e.client("pilot")
	if _, err := pilot.Lease(ctx, pilotproto.LeaseRequest{PilotID: "m"}); err != nil {
		b.Fatal(err)
	}
	var pulled atomic.Int64
	b.ResetTimer()
	start := time.Now()
	for b.Loop() {
		var wg sync.WaitGroup
		for p := 0; p < 100; p++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				r, err := pilot.Pull(ctx, pilotproto.PullRequest{Epoch: 1, Max: 10})
				if err != nil {
					b.Error(err)
					return
				}
				pulled.Add(int64(len(r.Tasks)))
			}()
		}
		wg.Wait()
	}
	b.ReportMetric(float64(pulled.Load())/time.Since(start).Seconds(), "tasks/s")
}

// BenchmarkPullAcross1000Users pulls 1000 tasks in one call when 1000
// users compete: the fair order is recomputed after every task handed out.
func BenchmarkPullAcross1000Users(b *testing.B) {
	e := newEnv(b, func(c *Config) { c.LeaseTTL = 24 * time.Hour })
	ctx := context.Background()
	const users = 1000
	ds := filepath.Join(e.data, "shared")
	for i := 0; i < 200; i++ {
		os.MkdirAll(filepath.Join(ds, fmt.Sprintf("t%03d", i)), 0o755)
	}
	for u := 0; u < users; u++ {
		if _, err := e.q.Submit(ctx, fmt.Sprintf("u%04d", u), api.JobSpec{Dataset: ds, Command: []string{"p"}, BatchSize: 1}); err != nil {
			b.Fatal(err)
		}
	}
	e.q.Lease(ctx, pilotproto.LeaseRequest{PilotID: "m"})
	e.q.WriteStats(true)
	b.ResetTimer()
	for b.Loop() {
		r, err := e.q.Pull(ctx, pilotproto.PullRequest{Epoch: 1, Max: 1000})
		if err != nil || len(r.Tasks) != 1000 {
			b.Fatalf("pulled %d: %v", len(r.Tasks), err)
		}
	}
	ws := e.q.WriteStats(false)
	b.ReportMetric(float64(ws.Longest.Microseconds())/1000, "longest-tx-ms")
}
