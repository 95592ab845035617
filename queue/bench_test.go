package queue_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/harvest-hpc/harvest/pilotproto"
	"github.com/harvest-hpc/harvest/queue"
	"github.com/harvest-hpc/harvest/queue/api"
	"github.com/harvest-hpc/harvest/queue/queuetest"
)

// BenchmarkPull100Pullers measures pull throughput with 100 concurrent
// pullers (10 tasks each per pull) over 20 users' backlog.
func BenchmarkPull100Pullers(b *testing.B) {
	e := queuetest.New(b, func(c *queue.Config) {
		c.LeaseTTL = 24 * time.Hour
		c.DefaultLimits.MaxParallelJobs = 1 << 30 // measure the pull, not the quota
	})
	ctx := context.Background()
	const users, perUser = 20, 2500
	for u := 0; u < users; u++ {
		name := fmt.Sprintf("u%02d", u)
		ds := filepath.Join(e.Data, name)
		for i := 0; i < perUser; i++ {
			if err := os.MkdirAll(filepath.Join(ds, fmt.Sprintf("t%05d", i)), 0o755); err != nil {
				b.Fatal(err)
			}
		}
		if _, err := e.Q.Submit(ctx, name, api.JobSpec{Dataset: ds, Command: []string{"p"}, BatchSize: 10}); err != nil {
			b.Fatal(err)
		}
	}
	if _, err := e.Q.Lease(ctx, pilotproto.LeaseRequest{PilotID: "m"}); err != nil {
		b.Fatal(err)
	}
	e.Q.WriteStats(true)
	var pulled atomic.Int64
	b.ResetTimer()
	start := time.Now()
	for b.Loop() {
		var wg sync.WaitGroup
		for p := 0; p < 100; p++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				r, err := e.Q.Pull(ctx, pilotproto.PullRequest{Epoch: 1, Max: 10})
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
	ws := e.Q.WriteStats(false)
	b.ReportMetric(float64(pulled.Load())/el.Seconds(), "tasks/s")
	b.ReportMetric(float64(ws.Longest.Microseconds())/1000, "longest-tx-ms")
	b.ReportMetric(float64(ws.Total.Microseconds())/1000/float64(max(ws.Transactions, 1)), "mean-tx-ms")
	if pulled.Load() == 0 {
		b.Fatal("nothing pulled")
	}
}

// TestSubmit100kEntries checks that a dataset of 100,000 entries is
// accepted in short transactions: several, not one holding the write lock
// for the whole listing. Its speed is a benchmark's figure (`harvest bench
// submit`), not a wall-clock limit here that a loaded machine would break.
func TestSubmit100kEntries(t *testing.T) {
	if testing.Short() {
		t.Skip("creates 100,000 files")
	}
	e := queuetest.New(t)
	ds := filepath.Join(e.Data, "big")
	os.MkdirAll(ds, 0o755)
	for i := 0; i < 100_000; i++ {
		f, err := os.Create(filepath.Join(ds, fmt.Sprintf("f%06d", i)))
		if err != nil {
			t.Fatal(err)
		}
		f.Close()
	}
	e.Q.WriteStats(true)
	start := time.Now()
	j, err := e.Q.Submit(context.Background(), "alice", api.JobSpec{Dataset: ds, Command: []string{"p", "{input}"}, BatchSize: 100})
	el := time.Since(start)
	if err != nil {
		t.Fatal(err)
	}
	ws := e.Q.WriteStats(false)
	t.Logf("100,000 entries accepted in %v: %d write transactions, longest %v, total lock %v", el, ws.Transactions, ws.Longest, ws.Total)
	if j.Tasks.Total != 100_000 || j.State != api.JobWaiting {
		t.Fatalf("job: %s %+v", j.State, j.Tasks)
	}
	if ws.Transactions < 2 {
		t.Fatalf("100,000 entries went in %d write transaction(s), want them split", ws.Transactions)
	}
}

// BenchmarkPull100PullersHTTP is the same load through the real HTTP API
// and the Go client (JSON, auth, one connection per puller).
func BenchmarkPull100PullersHTTP(b *testing.B) {
	e := queuetest.New(b, func(c *queue.Config) {
		c.LeaseTTL = 24 * time.Hour
		c.DefaultLimits.MaxParallelJobs = 1 << 30
	})
	ctx := context.Background()
	const users, perUser = 20, 2500
	for u := 0; u < users; u++ {
		name := fmt.Sprintf("u%02d", u)
		ds := filepath.Join(e.Data, name)
		for i := 0; i < perUser; i++ {
			if err := os.MkdirAll(filepath.Join(ds, fmt.Sprintf("t%05d", i)), 0o755); err != nil {
				b.Fatal(err)
			}
		}
		if _, err := e.Q.Submit(ctx, name, api.JobSpec{Dataset: ds, Command: []string{"p"}, BatchSize: 10}); err != nil {
			b.Fatal(err)
		}
	}
	pilot := e.Client("pilot")
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

// BenchmarkPullAcrossUsers pulls 1,000 tasks in one call while 1,000 or
// 10,000 users compete with equal standing (so every task of a pull goes
// to a different user: the fair order changes at every task, and the
// writes are scattered over as many jobs). It covers the whole pull in
// process: the fair-share order, the fenced assignment transactions, the
// answer. Reported: ms per pull, the mean and longest transaction and the
// share of transactions over 5 ms.
func BenchmarkPullAcrossUsers(b *testing.B) {
	for _, users := range []int{1000, 10_000} {
		b.Run(fmt.Sprintf("users=%d", users), func(b *testing.B) {
			e := queuetest.New(b, func(c *queue.Config) { c.LeaseTTL = 24 * time.Hour })
			ctx := context.Background()
			ds := filepath.Join(e.Data, "shared")
			for i := 0; i < 4; i++ {
				os.MkdirAll(filepath.Join(ds, fmt.Sprintf("t%03d", i)), 0o755)
			}
			for u := 0; u < users; u++ {
				if _, err := e.Q.Submit(ctx, fmt.Sprintf("u%05d", u), api.JobSpec{Dataset: ds, Command: []string{"p"}, BatchSize: 1}); err != nil {
					b.Fatal(err)
				}
			}
			e.Q.Lease(ctx, pilotproto.LeaseRequest{PilotID: "m"})
			pulls := 0
			e.Q.WriteStats(true)
			var longest, total time.Duration
			b.ResetTimer()
			for b.Loop() {
				if pulls*1000 >= 4*users { // every task handed out: hand them back
					b.StopTimer()
					requeueAll(b, e)
					pulls = 0
					b.StartTimer()
				}
				t0 := time.Now()
				r, err := e.Q.Pull(ctx, pilotproto.PullRequest{Epoch: 1, Max: 1000})
				d := time.Since(t0)
				if err != nil || len(r.Tasks) != 1000 {
					b.Fatalf("pulled %d: %v", len(r.Tasks), err)
				}
				total += d
				longest = max(longest, d)
				pulls++
			}
			b.StopTimer()
			ws := e.Q.WriteStats(false)
			b.Logf("longest write transaction: %v in %s", ws.Longest, ws.LongestIn)
			b.ReportMetric(float64(total.Microseconds())/1000/float64(b.N), "ms/pull")
			b.ReportMetric(float64(longest.Microseconds())/1000, "max-ms/pull")
			b.ReportMetric(float64(ws.Longest.Microseconds())/1000, "longest-tx-ms")
			b.ReportMetric(float64(ws.Total.Microseconds())/1000/float64(max(ws.Transactions, 1)), "mean-tx-ms")
			b.ReportMetric(100*float64(ws.Slow)/float64(max(ws.Transactions, 1)), "slow-tx-%")
		})
	}
}

// requeueAll reports every assigned task interrupted (requeued at once,
// no attempt counted), so a benchmark can pull again.
func requeueAll(b *testing.B, e *queuetest.Env) {
	rows, err := e.Query(`SELECT id, attempt FROM tasks WHERE state = 'ASSIGNED'`)
	if err != nil {
		b.Fatal(err)
	}
	var res []pilotproto.Result
	for rows.Next() {
		var r pilotproto.Result
		rows.Scan(&r.TaskID, &r.Attempt)
		r.Status = pilotproto.StatusInterrupted
		res = append(res, r)
	}
	rows.Close()
	for len(res) > 0 {
		n := min(len(res), 10_000)
		if _, err := e.Q.ReportResults(context.Background(), pilotproto.ResultsRequest{Epoch: 1, Results: res[:n]}); err != nil {
			b.Fatal(err)
		}
		res = res[n:]
	}
}

// cpuTime is the CPU time (user and system) this process used so far:
// less sensitive than wall time to other programs on a shared machine.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkDispatchCycle is the queue's share of `harvest bench dispatch`,
// in process: while 1,000 users compete with equal standing, a master
// pulls 100 tasks (every one of another user's job) and reports them
// done. One op is one task pulled and its result applied. Reported: us
// per task, the write lock per task, the mean and longest transaction, the
// share of transactions over 5 ms.
func BenchmarkDispatchCycle(b *testing.B) {
	e := queuetest.New(b, func(c *queue.Config) {
		c.LeaseTTL = 24 * time.Hour
		c.DefaultLimits.MaxParallelJobs = 1 << 30
	})
	dispatchCycle(b, e, e.Q.Pool("local"))
}

// BenchmarkDispatchCycleTwoSites is DispatchCycle with a second live site:
// each site's master pulls in turn, under its site's allowance (both
// report slots enough not to be held back), so every pull also counts the
// tasks each pool holds.
func BenchmarkDispatchCycleTwoSites(b *testing.B) {
	e, _ := twoSites(b, func(c *queue.Config) {
		c.LeaseTTL = 24 * time.Hour
		c.DefaultLimits.MaxParallelJobs = 1 << 30
	})
	dispatchCycle(b, e, e.Q.Pool("local"), e.Q.Pool("b"))
}

// dispatchCycle stores one job for each of 1,000 users, takes each pool's
// lease (with slots enough not to be held back when several sites are
// live), then, timed, has the pools' masters in turn pull 100 tasks and
// report them done until b.N tasks are, and folds what is left.
func dispatchCycle(b *testing.B, e *queuetest.Env, pools ...queue.Pool) {
	const users, chunk = 1000, 100
	ctx := context.Background()
	ds := e.Dataset("shared", b.N/users+2)
	for u := 0; u < users; u++ {
		if _, err := e.Q.Submit(ctx, fmt.Sprintf("u%05d", u), api.JobSpec{Dataset: ds, Command: []string{"p", "{input}"}, BatchSize: 100}); err != nil {
			b.Fatal(err)
		}
	}
	epochs := make([]int64, len(pools))
	for i, p := range pools {
		l, err := p.Lease(ctx, pilotproto.LeaseRequest{PilotID: "m"})
		if err != nil || !l.Granted {
			b.Fatalf("lease: %+v %v", l, err)
		}
		epochs[i] = l.Epoch
		if len(pools) > 1 {
			if err := p.Recommend(ctx, pilotproto.RecommendationRequest{Epoch: l.Epoch, Slots: 1 << 20, SlotsPerNode: 1}); err != nil {
				b.Fatal(err)
			}
		}
	}
	e.Q.WriteStats(true)
	cpu0 := cpuTime()
	b.ResetTimer()
	for done, i := 0, 0; done < b.N; i++ {
		p, epoch := pools[i%len(pools)], epochs[i%len(pools)]
		r, err := p.Pull(ctx, pilotproto.PullRequest{Epoch: epoch, Max: min(chunk, b.N-done)})
		if err != nil || len(r.Tasks) == 0 {
			b.Fatalf("pulled %d: %v", len(r.Tasks), err)
		}
		res := make([]pilotproto.Result, len(r.Tasks))
		for i, t := range r.Tasks {
			res[i] = pilotproto.Result{TaskID: t.ID, Attempt: t.Attempt, Status: pilotproto.StatusDone, StartedAt: 1, DurationMS: 1, Pilot: "m"}
		}
		a, err := p.ReportResults(ctx, pilotproto.ResultsRequest{Epoch: epoch, Results: res})
		if err != nil || a.Applied != len(res) {
			b.Fatalf("applied %d of %d: %v", a.Applied, len(res), err)
		}
		done += len(res)
	}
	b.StopTimer()
	cpu := cpuTime() - cpu0
	ws := e.Q.WriteStats(false)
	b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N), "us/task")
	b.ReportMetric(float64(cpu.Microseconds())/float64(b.N), "cpu-us/task")
	b.ReportMetric(float64(ws.Total.Microseconds())/float64(b.N), "lock-us/task")
	b.ReportMetric(float64(ws.Transactions)/float64(b.N)*100, "tx/100-tasks")
	b.ReportMetric(float64(ws.Longest.Microseconds())/1000, "longest-tx-ms")
	b.ReportMetric(float64(ws.Total.Microseconds())/1000/float64(max(ws.Transactions, 1)), "mean-tx-ms")
	b.ReportMetric(100*float64(ws.Slow)/float64(max(ws.Transactions, 1)), "slow-tx-%")
}
