package queue

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/harvest-hpc/harvest/queue/store"
)

// BenchmarkRecomputePriorities10kUsers recomputes and stores the
// computedPriority of 10,000 users (each with usage in its window), the
// job JAliEn's production takes 882 ms for 3,000 users. Reported: the
// total write-lock time of one full recompute and its longest transaction.
func BenchmarkRecomputePriorities10kUsers(b *testing.B) {
	dir := b.TempDir()
	os.MkdirAll(filepath.Join(dir, "data"), 0o755)
	cfg := DefaultConfig()
	cfg.DBPath = filepath.Join(dir, "queue.db")
	cfg.AllowedRoots = []string{filepath.Join(dir, "data")}
	cfg.SweepInterval, cfg.FlushInterval, cfg.ReconcileInterval = time.Hour, time.Hour, time.Hour
	cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	q, err := Open(cfg)
	if err != nil {
		b.Fatal(err)
	}
	defer q.Close()
	ctx := context.Background()
	const users = 10_000
	l := cfg.DefaultLimits
	for i := 0; i < users; i++ {
		l.Priority = 1 + float64(i%7)
		if err := q.st.PutUser(ctx, fmt.Sprintf("user%05d", i), l, q.now()); err != nil {
			b.Fatal(err)
		}
	}
	if err := q.Reconcile(ctx); err != nil {
		b.Fatal(err)
	}
	now := q.now().UnixMilli()
	q.mu.Lock()
	i := 0
	for _, u := range q.users {
		u.running = i % 20
		for k := 0; k < 5; k++ {
			u.events = append(u.events, store.UsageEvent{At: now - int64(k)*60_000, CPU: float64(i % 1000), Cost: float64(i%1000) * 3})
		}
		i++
	}
	q.mu.Unlock()
	var total, longest time.Duration
	var txs int
	b.ResetTimer()
	for b.Loop() {
		q.mu.Lock()
		for _, u := range q.users {
			u.dirty = true
		}
		q.mu.Unlock()
		st, err := q.FlushUsage(ctx)
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
