package master_test

import (
	"context"
	"testing"
	"time"

	"github.com/harvest-hpc/harvest/master"
	"github.com/harvest-hpc/harvest/pilotproto"
	"github.com/harvest-hpc/harvest/queue/api"
	"github.com/harvest-hpc/harvest/worker"
)

func TestJobCompletesOnSeveralWorkersEachTaskOnce(t *testing.T) {
	e := startQueue(t)
	job := e.submit(t, 600, 8, nil)
	q := watch(e.Q)
	rm := startMaster(t, q, t.TempDir(), "p1", nil, nil)
	var ep endpoint
	ep.set(rm.srv.URL)
	for _, id := range []string{"w1", "w2", "w3"} {
		startWorker(t, fastWorkerConfig(id, 4, worker.SleepRunner{D: time.Millisecond}), ep.resolve)
	}
	checkDone(t, waitJob(t, e, q, job.ID, 20*time.Second), 600)
	if d := q.dups(); d != 0 {
		t.Errorf("a single master reported %d duplicate results", d)
	}
}

func TestMasterDroppedMidRunIsReplacedWithoutLossOrDoubleCount(t *testing.T) {
	const ttl = 5 * time.Second
	e := startQueue(t, withTTL(ttl))
	job := e.submit(t, 300, 4, nil)
	q := watch(e.Q)
	dir := t.TempDir()
	a := startMaster(t, q, dir, "pA", nil, nil)
	var ep endpoint
	ep.set(a.srv.URL)
	for _, id := range []string{"w1", "w2", "w3"} {
		startWorker(t, fastWorkerConfig(id, 2, worker.SleepRunner{D: 20 * time.Millisecond}), ep.resolve)
	}
	// Let work flow, then kill the master while batches are in flight.
	waitFor(t, a.m, "60 results reported", 10*time.Second, func(s master.Stats) bool { return s.Reported >= 60 })
	a.crash()
	if j := e.job(t, job.ID); j.Tasks.Done >= 300 {
		t.Fatalf("the crash happened after the job finished (%+v): the test proves nothing", j.Tasks)
	}
	e.Clock.Advance(ttl) // the dead master's lease expires
	b := startMaster(t, q, dir, "pB", nil, nil)
	ep.set(b.srv.URL)
	checkDone(t, waitJob(t, e, q, job.ID, 30*time.Second), 300)
	// The deposed master must not be able to write any more.
	if err := a.stop(); err == nil {
		t.Errorf("the old master stopped cleanly after being deposed; want a fencing error")
	}
}

func TestWorkerStoppingReportsInterruptedTasksThatRunElsewhereAtOnce(t *testing.T) {
	e := startQueue(t)
	one := 1 // an interrupted task must not burn its only attempt
	job := e.submit(t, 40, 4, func(s *api.JobSpec) { s.MaxAttempts = &one })
	q := watch(e.Q)
	rm := startMaster(t, q, t.TempDir(), "p1", nil, nil)
	var ep endpoint
	ep.set(rm.srv.URL)
	slow := startWorker(t, fastWorkerConfig("slow", 4, worker.SleepRunner{D: 10 * time.Second}), ep.resolve)
	waitFor(t, rm.m, "the slow worker gets batches", 5*time.Second, func(s master.Stats) bool { return s.Assigned > 0 })
	start := time.Now()
	slow.stop() // what SIGTERM does
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("worker took %s to stop; want seconds at most", d)
	}
	startWorker(t, fastWorkerConfig("fast", 4, worker.SleepRunner{D: time.Millisecond}), ep.resolve)
	// Well within the slow worker's timeout (1 s) plus its 10 s tasks: the
	// interrupted tasks were requeued at once.
	checkDone(t, waitJob(t, e, q, job.ID, 5*time.Second), 40)
}

func TestCancelledJobStopsItsRunningTasks(t *testing.T) {
	e := startQueue(t)
	j1, j2 := e.submit(t, 20, 2, nil), e.submit(t, 10, 2, nil)
	rm := startMaster(t, e.Q, t.TempDir(), "p1", nil, nil)
	var ep endpoint
	ep.set(rm.srv.URL)
	w := startWorker(t, fastWorkerConfig("w1", 4, worker.SleepRunner{D: 30 * time.Second}), ep.resolve)
	waitFor(t, rm.m, "the worker gets tasks", 5*time.Second, func(s master.Stats) bool { return s.Assigned > 0 })
	held := rm.m.Stats().Assigned
	e.cancel(t, j1.ID)
	e.cancel(t, j2.ID)
	// The worker's 30 s tasks must be stopped and reported, not left to
	// finish: the master then holds nothing in flight.
	waitFor(t, rm.m, "the cancelled tasks in flight end", 3*time.Second, func(s master.Stats) bool { return s.Assigned == 0 })
	if w.w.Finished() == 0 {
		t.Errorf("none of the %d running tasks was stopped", held)
	}
	for _, id := range []int64{j1.ID, j2.ID} {
		if j := e.job(t, id); j.Tasks.Done != 0 || j.State != api.JobKilled {
			t.Errorf("cancelled job %d: %s %+v, want KILLED with nothing done", id, j.State, j.Tasks)
		}
	}
}

func TestQueueOutageMidRunDelaysReportsButLosesNothing(t *testing.T) {
	e := startQueue(t)
	job := e.submit(t, 200, 5, nil)
	q := watch(e.Q)
	rm := startMaster(t, q, t.TempDir(), "p1", nil, nil)
	var ep endpoint
	ep.set(rm.srv.URL)
	startWorker(t, fastWorkerConfig("w1", 4, worker.SleepRunner{D: 5 * time.Millisecond}), ep.resolve)
	waitFor(t, rm.m, "20 results reported", 10*time.Second, func(s master.Stats) bool { return s.Reported >= 20 })
	rm.q.cut.Store(true) // the agent restarts
	waitFor(t, rm.m, "results wait for the queue", 5*time.Second, func(s master.Stats) bool { return s.Unreported >= 8 })
	rm.q.cut.Store(false)
	checkDone(t, waitJob(t, e, q, job.ID, 20*time.Second), 200)
}

func TestResultsAcknowledgedToWorkersSurviveAMasterCrashBeforeTheQueueSawThem(t *testing.T) {
	const ttl = 5 * time.Second
	e := startQueue(t, withTTL(ttl))
	job := e.submit(t, 40, 4, nil)
	q := watch(e.Q)
	dir := t.TempDir()
	a := startMaster(t, q, dir, "pA", nil, nil)
	var ep endpoint
	ep.set(a.srv.URL)
	w := startWorker(t, fastWorkerConfig("w1", 4, worker.SleepRunner{D: time.Millisecond}), ep.resolve)
	// Let the first pull through, then cut the queue: results pile up in
	// the checkpoint, acknowledged to the worker, unknown to the queue.
	waitFor(t, a.m, "tasks handed out", 5*time.Second, func(s master.Stats) bool { return s.Assigned > 0 })
	a.q.cut.Store(true)
	waitFor(t, a.m, "results held by the master only", 5*time.Second, func(s master.Stats) bool { return s.Unreported >= 8 })
	held := a.m.Stats().Unreported
	a.crash()
	w.stop() // the worker goes too: only the checkpoint knows those results
	e.Clock.Advance(ttl)
	b := startMaster(t, q, dir, "pB", nil, func(m *master.Master) {
		if st := m.Stats(); st.Unreported < held {
			t.Fatalf("the new master restored %d unreported results, the old one held %d", st.Unreported, held)
		}
	})
	ep.set(b.srv.URL)
	startWorker(t, fastWorkerConfig("w2", 4, worker.SleepRunner{D: time.Millisecond}), ep.resolve)
	checkDone(t, waitJob(t, e, q, job.ID, 20*time.Second), 40)
}

func TestAGracefullyStoppingMasterReleasesTheLeaseAndTheNextTakesOverAtOnce(t *testing.T) {
	e := startQueue(t, withTTL(time.Hour)) // a takeover can only come from the release
	job := e.submit(t, 100, 4, nil)
	q := watch(e.Q)
	dir := t.TempDir()
	a := startMaster(t, q, dir, "pA", nil, nil)
	var ep endpoint
	ep.set(a.srv.URL)
	startWorker(t, fastWorkerConfig("w1", 2, worker.SleepRunner{D: 10 * time.Millisecond}), ep.resolve)
	waitFor(t, a.m, "20 results reported", 10*time.Second, func(s master.Stats) bool { return s.Reported >= 20 })
	if err := a.stop(); err != nil {
		t.Fatalf("graceful stop: %v", err)
	}
	b := startMaster(t, q, dir, "pB", nil, nil) // fails the test if the lease is not free
	ep.set(b.srv.URL)
	checkDone(t, waitJob(t, e, q, job.ID, 30*time.Second), 100)
}

// TestAShortLeaseIsRenewedFromTheTTLTheQueueGrants: the master's renewal
// period (10 s here) is far longer than the queue's TTL (600 ms); the
// master renews from the granted TTL, so a pilot asking for the lease all
// along never gets it while the job runs for several TTLs.
func TestAShortLeaseIsRenewedFromTheTTLTheQueueGrants(t *testing.T) {
	// A TTL of 2 s (renewal every ~0.7 s) keeps a stalled scheduler on a
	// loaded machine from expiring it by accident; the job runs 5 s, more
	// than two TTLs, so the master must renew.
	e := startQueue(t, withRealClock, withTTL(2*time.Second))
	job := e.submit(t, 20, 1, nil)
	q := watch(e.Q)
	rm := startMaster(t, q, t.TempDir(), "p1", func(c *master.Config) {
		// Nothing else touches the lease: no heartbeat, no pull after the first.
		c.LeaseRenewInterval, c.HeartbeatInterval, c.IdlePoll = 10*time.Second, 10*time.Second, 10*time.Second
	}, nil)
	var ep endpoint
	ep.set(rm.srv.URL)
	startWorker(t, fastWorkerConfig("w1", 1, worker.SleepRunner{D: 250 * time.Millisecond}), ep.resolve)
	// A pilot that wants to be master asks every 20 ms, as workers of a
	// lost master do.
	ctx, stop := context.WithCancel(context.Background())
	taken := make(chan pilotproto.Lease, 1)
	go func() {
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			if l, err := e.Q.Lease(ctx, pilotproto.LeaseRequest{PilotID: "rival", Address: "http://rival"}); err == nil && l.Granted {
				taken <- l
				return
			}
		}
	}()
	defer stop()
	deadline := time.After(20 * time.Second)
	for {
		ch := q.next()
		if j := e.job(t, job.ID); final(j.State) {
			checkDone(t, j, 20)
			return
		}
		select {
		case <-ch:
		case l := <-taken:
			t.Fatalf("the lease expired while the master ran: the rival got epoch %d", l.Epoch)
		case <-deadline:
			t.Fatalf("job not final after 20 s: %+v", e.job(t, job.ID))
		}
	}
}
