package master_test

import (
	"context"
	"testing"
	"time"

	"github.com/harvest-hpc/harvest/master"
	"github.com/harvest-hpc/harvest/master/core"
	"github.com/harvest-hpc/harvest/pilotproto"
	"github.com/harvest-hpc/harvest/worker"
)

func TestJobCompletesOnSeveralWorkersEachTaskOnce(t *testing.T) {
	q := master.NewMemQueue()
	q.Add(tasks(1, 600, 8)...)
	rm := startMaster(t, q, t.TempDir(), "p1", nil)
	var ep endpoint
	ep.set(rm.srv.URL)
	for _, id := range []string{"w1", "w2", "w3"} {
		startWorker(t, fastWorkerConfig(id, 4, worker.SleepRunner{D: time.Millisecond}), ep.resolve)
	}
	waitFinal(t, q, 20*time.Second)
	checkExactlyOnce(t, q)
	if s := q.Stats(); s.Duplicates != 0 {
		t.Errorf("a single master reported %d duplicate results", s.Duplicates)
	}
}

func TestMasterDroppedMidRunIsReplacedWithoutLossOrDoubleCount(t *testing.T) {
	q := master.NewMemQueue()
	q.TTL = 500 * time.Millisecond
	q.Add(tasks(1, 300, 4)...)
	dir := t.TempDir()
	a := startMaster(t, q, dir, "pA", nil)
	var ep endpoint
	ep.set(a.srv.URL)
	var ws []*runningWorker
	for _, id := range []string{"w1", "w2", "w3"} {
		ws = append(ws, startWorker(t, fastWorkerConfig(id, 2, worker.SleepRunner{D: 20 * time.Millisecond}), ep.resolve))
	}
	// Let work flow, then kill the master while batches are in flight.
	deadline := time.Now().Add(10 * time.Second)
	for q.Stats().Done < 60 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	a.crash()
	before := q.Stats().Done
	time.Sleep(600 * time.Millisecond) // the lease expires
	b := startMaster(t, q, dir, "pB", nil)
	ep.set(b.srv.URL)
	waitFinal(t, q, 30*time.Second)
	checkExactlyOnce(t, q)
	if before >= 300 {
		t.Fatalf("the crash happened after the job finished (%d done): the test proves nothing", before)
	}
	// The deposed master must not be able to write any more.
	if err := a.stop(); err == nil {
		t.Errorf("the old master stopped cleanly after being deposed; want a fencing error")
	}
	_ = ws
}

func TestSilentWorkerTasksAreRequeuedAndCountedOnce(t *testing.T) {
	q := master.NewMemQueue()
	q.Add(tasks(1, 200, 5)...)
	rm := startMaster(t, q, t.TempDir(), "p1", nil)
	var good, bad endpoint
	good.set(rm.srv.URL)
	p := newProxy(t, rm.srv.URL)
	bad.set(p.url())
	// The bad worker takes batches, then its network goes away while its
	// tasks run: to the master it is dead (as after kill -9). Its tasks
	// finish later and it comes back: its late results must not count twice.
	badW := startWorker(t, fastWorkerConfig("bad", 4, worker.SleepRunner{D: 1500 * time.Millisecond}), bad.resolve)
	time.Sleep(150 * time.Millisecond)
	if badW.w.Finished() != 0 || rm.m.Stats().Assigned == 0 {
		t.Fatalf("the bad worker should hold unfinished batches: %+v", rm.m.Stats())
	}
	p.cut()
	cutAt := time.Now()
	startWorker(t, fastWorkerConfig("good", 2, worker.SleepRunner{D: 5 * time.Millisecond}), good.resolve)
	waitFinal(t, q, 20*time.Second)
	checkExactlyOnce(t, q)
	time.Sleep(time.Until(cutAt.Add(1600 * time.Millisecond)))
	if badW.w.Finished() < 4 {
		t.Fatalf("the bad worker should have finished its first wave offline, has %d", badW.w.Finished())
	}
	bad.set(rm.srv.URL) // it comes back with results of tasks that were requeued and done
	time.Sleep(700 * time.Millisecond)
	checkExactlyOnce(t, q)
	if d := q.Stats().Duplicates; d != 0 {
		t.Errorf("the master passed %d late duplicate results on to the queue", d)
	}
}

func TestWorkerStoppingReportsInterruptedTasksThatRunElsewhereAtOnce(t *testing.T) {
	q := master.NewMemQueue()
	q.MaxAttempts = 1 // an interrupted task must not burn its only attempt
	q.Add(tasks(1, 40, 4)...)
	rm := startMaster(t, q, t.TempDir(), "p1", nil)
	var ep endpoint
	ep.set(rm.srv.URL)
	slow := startWorker(t, fastWorkerConfig("slow", 4, worker.SleepRunner{D: 10 * time.Second}), ep.resolve)
	time.Sleep(200 * time.Millisecond)
	if st := rm.m.Stats(); st.Assigned == 0 {
		t.Fatalf("the slow worker got no batch: %+v", st)
	}
	start := time.Now()
	slow.stop() // what SIGTERM does
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("worker took %s to stop; want seconds at most", d)
	}
	startWorker(t, fastWorkerConfig("fast", 4, worker.SleepRunner{D: time.Millisecond}), ep.resolve)
	waitFinal(t, q, 5*time.Second) // far below the 1 s worker timeout x retries: requeued at once
	checkExactlyOnce(t, q)
}

func TestNoBatchIsHandedThatCannotFinishBeforeTheWorkersDeadline(t *testing.T) {
	q := master.NewMemQueue()
	q.Add(tasks(1, 20, 10)...)
	rm := startMaster(t, q, t.TempDir(), "p1", func(c *master.Config) { c.SafetyMargin = 100 * time.Millisecond })
	var ep endpoint
	ep.set(rm.srv.URL)
	// A long-lived worker teaches the master that tasks take ~100 ms.
	long := fastWorkerConfig("long", 1, worker.SleepRunner{D: 100 * time.Millisecond})
	startWorker(t, long, ep.resolve)
	time.Sleep(500 * time.Millisecond)
	// A worker whose pilot ends in 450 ms: 450 - 100 margin leaves room
	// for about 2 tasks of ~100 ms (plus deviation), never a whole batch of 10.
	short := fastWorkerConfig("short", 1, worker.SleepRunner{D: 100 * time.Millisecond})
	short.Deadline = time.Now().Add(450 * time.Millisecond)
	sw := startWorker(t, short, ep.resolve)
	time.Sleep(450 * time.Millisecond)
	sw.stop()
	if n := sw.w.Finished(); n > 3 {
		t.Errorf("the short worker ran %d tasks in 450 ms of 100 ms tasks on one slot", n)
	}
	waitFinal(t, q, 20*time.Second)
	checkExactlyOnce(t, q)
}

func TestCancelledJobStopsItsRunningTasks(t *testing.T) {
	q := master.NewMemQueue()
	q.Add(tasks(1, 20, 2)...)
	q.Add(tasks(2, 10, 2)...)
	rm := startMaster(t, q, t.TempDir(), "p1", nil)
	var ep endpoint
	ep.set(rm.srv.URL)
	w := startWorker(t, fastWorkerConfig("w1", 4, worker.SleepRunner{D: 30 * time.Second}), ep.resolve)
	time.Sleep(200 * time.Millisecond)
	held := rm.m.Stats().Assigned
	if held == 0 {
		t.Fatal("the worker got no tasks")
	}
	q.Cancel(1)
	q.Cancel(2)
	// The worker's 30 s tasks must be stopped and reported, not left to
	// finish: the master then holds nothing in flight.
	deadline := time.Now().Add(3 * time.Second)
	for rm.m.Stats().Assigned > 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if st := rm.m.Stats(); st.Assigned != 0 {
		t.Fatalf("%d of the %d tasks the worker held are still in flight 3 s after the cancel", st.Assigned, held)
	}
	if w.w.Finished() == 0 {
		t.Error("no running task was stopped")
	}
	if s := q.Stats(); s.Done != 0 {
		t.Errorf("cancelled tasks reported done: %+v", s)
	}
}

func TestRecommendationFollowsTheBacklog(t *testing.T) {
	q := master.NewMemQueue()
	q.Add(tasks(1, 30, 5)...)
	startMaster(t, q, t.TempDir(), "p1", nil)
	deadline := time.Now().Add(3 * time.Second)
	for time.Now().Before(deadline) {
		if r := q.Stats().Recommendation; r.PendingTasks == 30 {
			if want := 30/20 + 3; r.MinNodes != want {
				t.Fatalf("min nodes for 30 left tasks: got %d want %d", r.MinNodes, want)
			}
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("no recommendation with the 30 pending tasks: %+v", q.Stats().Recommendation)
}

func TestOlderMasterIsFencedOutOfTheCheckpoint(t *testing.T) {
	dir := t.TempDir()
	old, err := master.OpenCheckpoint(dir+"/cp.db", "WAL")
	if err != nil {
		t.Fatal(err)
	}
	defer old.Close()
	if err := old.Claim(1); err != nil {
		t.Fatal(err)
	}
	newer, err := master.OpenCheckpoint(dir+"/cp.db", "WAL")
	if err != nil {
		t.Fatal(err)
	}
	defer newer.Close()
	if err := newer.Claim(2); err != nil {
		t.Fatal(err)
	}
	err = old.Commit([]core.Op{{Kind: core.OpAdd, Ref: pilotproto.TaskRef{TaskID: 1, Attempt: 1}, Task: pilotproto.Task{ID: 1, Attempt: 1}}})
	if !errorsIs(err, master.ErrFenced) {
		t.Fatalf("write of epoch 1 after epoch 2 claimed: got %v, want ErrFenced", err)
	}
	if err := old.Claim(1); !errorsIs(err, master.ErrFenced) {
		t.Fatalf("claim of epoch 1 after 2: got %v, want ErrFenced", err)
	}
	rows, _, err := newer.Load()
	if err != nil || len(rows) != 0 {
		t.Fatalf("the fenced write left rows: %v %v", rows, err)
	}
	_ = context.Background
}

func TestQueueOutageMidRunDelaysReportsButLosesNothing(t *testing.T) {
	q := master.NewMemQueue()
	q.Add(tasks(1, 200, 5)...)
	rm := startMaster(t, q, t.TempDir(), "p1", nil)
	var ep endpoint
	ep.set(rm.srv.URL)
	startWorker(t, fastWorkerConfig("w1", 4, worker.SleepRunner{D: 5 * time.Millisecond}), ep.resolve)
	for q.Stats().Done < 20 {
		time.Sleep(5 * time.Millisecond)
	}
	rm.q.cut.Store(true) // the agent restarts
	time.Sleep(time.Second)
	if st := rm.m.Stats(); st.Unreported == 0 {
		t.Fatalf("no results waited for the queue during the outage: %+v", st)
	}
	rm.q.cut.Store(false)
	waitFinal(t, q, 20*time.Second)
	checkExactlyOnce(t, q)
}

func TestResultsAcknowledgedToWorkersSurviveAMasterCrashBeforeTheQueueSawThem(t *testing.T) {
	q := master.NewMemQueue()
	q.TTL = 300 * time.Millisecond
	q.Add(tasks(1, 40, 4)...)
	dir := t.TempDir()
	a := startMaster(t, q, dir, "pA", nil)
	var ep endpoint
	ep.set(a.srv.URL)
	w := startWorker(t, fastWorkerConfig("w1", 4, worker.SleepRunner{D: time.Millisecond}), ep.resolve)
	// Let the first pull through, then cut the queue: results pile up in
	// the checkpoint, acknowledged to the worker, unknown to the queue.
	for a.m.Stats().Assigned == 0 {
		time.Sleep(5 * time.Millisecond)
	}
	a.q.cut.Store(true)
	deadline := time.Now().Add(5 * time.Second)
	for a.m.Stats().Unreported < 8 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	held := a.m.Stats().Unreported
	if held < 8 {
		t.Fatalf("want results held by the master only: master %+v, queue %+v", a.m.Stats(), q.Stats())
	}
	a.crash()
	w.stop() // the worker goes too: only the checkpoint knows those results
	time.Sleep(400 * time.Millisecond)
	b := startMasterAfter(t, q, dir, "pB", nil, func(m *master.Master) {
		if st := m.Stats(); st.Unreported < held {
			t.Fatalf("the new master restored %d unreported results, the old one held %d", st.Unreported, held)
		}
	})
	ep.set(b.srv.URL)
	startWorker(t, fastWorkerConfig("w2", 4, worker.SleepRunner{D: time.Millisecond}), ep.resolve)
	waitFinal(t, q, 20*time.Second)
	checkExactlyOnce(t, q)
}

func TestAGracefullyStoppingMasterReleasesTheLeaseAndTheNextTakesOverAtOnce(t *testing.T) {
	q := master.NewMemQueue()
	q.TTL = time.Hour // a takeover within the test can only come from the release
	q.Add(tasks(1, 100, 4)...)
	dir := t.TempDir()
	a := startMaster(t, q, dir, "pA", nil)
	var ep endpoint
	ep.set(a.srv.URL)
	startWorker(t, fastWorkerConfig("w1", 2, worker.SleepRunner{D: 10 * time.Millisecond}), ep.resolve)
	deadline := time.Now().Add(10 * time.Second)
	for q.Stats().Done < 20 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if err := a.stop(); err != nil {
		t.Fatalf("graceful stop: %v", err)
	}
	if q.Releases != 1 {
		t.Fatalf("lease releases = %d, want 1", q.Releases)
	}
	b := startMaster(t, q, dir, "pB", nil) // fails the test if the lease is not free
	ep.set(b.srv.URL)
	waitFinal(t, q, 30*time.Second)
	checkExactlyOnce(t, q)
}
