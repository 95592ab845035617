package master_test

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/harvest-hpc/harvest/master"
	"github.com/harvest-hpc/harvest/pilotproto"
	"github.com/harvest-hpc/harvest/worker"
)

// renewalClock records when the master's lease renewals reach the queue.
type renewalClock struct {
	pilotproto.Queue
	mu    sync.Mutex
	times []time.Time
}

func (r *renewalClock) Lease(ctx context.Context, req pilotproto.LeaseRequest) (pilotproto.Lease, error) {
	if !req.Release && req.Epoch != 0 {
		r.mu.Lock()
		r.times = append(r.times, time.Now())
		r.mu.Unlock()
	}
	return r.Queue.Lease(ctx, req)
}

// BenchmarkLeaseRenewalOnFUSE measures how late the master's lease
// renewals come with the production settings (4 s lease, renewals every
// second, the default commit delay) while its checkpoint is on a FUSE
// mount (bindfs, as scripts/e2e-slurm.sh --fuse-state) and three workers
// report results as fast as they can: the gap between two renewals past
// the renewal period is how long a renewal waited. It covers the master's
// loop, its checkpoint commits on FUSE and the real queue in process; it
// skips the network (the queue and the workers are in process). Run it
// once: go test -run '^$' -bench LeaseRenewalOnFUSE -benchtime 1x ./master
func BenchmarkLeaseRenewalOnFUSE(b *testing.B) {
	dir, _ := twoHosts(b)
	const ttl = 4 * time.Second
	const run = 30 * time.Second
	e := startQueue(b, withTTL(ttl), withRealClock)
	e.submit(b, 80_000, 4, nil)
	q := &renewalClock{Queue: e.Q}
	var ep endpoint
	for _, id := range []string{"w1", "w2", "w3"} {
		startWorker(b, fastWorkerConfig(id, 2, worker.SleepRunner{}), ep.resolve)
	}
	prod := master.DefaultConfig()
	rm := startMaster(b, q, dir, "p1", func(c *master.Config) {
		c.PullWait, c.IdlePoll, c.RetryInterval = prod.PullWait, prod.IdlePoll, prod.RetryInterval
		c.HeartbeatInterval, c.LeaseRenewInterval = prod.HeartbeatInterval, prod.LeaseRenewInterval
		c.WorkerTimeout, c.ReconnectGrace = prod.WorkerTimeout, prod.ReconnectGrace
	}, nil)
	ep.set(rm.srv.URL)
	commits0 := master.Commits(rm.m)
	b.ResetTimer()
	select {
	case <-time.After(run):
	case <-rm.m.Done():
		b.Logf("the master stopped: %v", <-rm.done)
	}
	b.StopTimer()
	commits := master.Commits(rm.m) - commits0
	reported := rm.m.Stats().Reported
	q.mu.Lock()
	times := slices.Clone(q.times)
	q.mu.Unlock()
	var gaps []time.Duration
	for i := 1; i < len(times); i++ {
		gaps = append(gaps, times[i].Sub(times[i-1]))
	}
	if len(gaps) == 0 {
		b.Fatal("no lease renewal")
	}
	slices.Sort(gaps)
	period := prod.LeaseRenewInterval
	late := 0
	for _, g := range gaps {
		if g > period+period/2 {
			late++
		}
	}
	b.ReportMetric(float64(len(gaps)), "renewals")
	b.ReportMetric(float64(gaps[len(gaps)/2]-period)/1e6, "median-wait-ms")
	b.ReportMetric(float64(gaps[len(gaps)-1]-period)/1e6, "max-wait-ms")
	b.ReportMetric(float64(late), "late-renewals")
	b.ReportMetric(float64(commits), "commits")
	b.ReportMetric(float64(reported), "results")
}
