package queue_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/harvest-hpc/harvest/pilotproto"
	"github.com/harvest-hpc/harvest/queue"
	"github.com/harvest-hpc/harvest/queue/api"
	"github.com/harvest-hpc/harvest/queue/queuetest"
)

// TestTimeDrivenTransitions covers ZOMBIE, EXPIRED with requeue, ERROR_EW
// and purge, in virtual time.
func TestTimeDrivenTransitions(t *testing.T) {
	e := queuetest.New(t, func(c *queue.Config) { c.ZombieTimeout = time.Minute; c.LeaseTTL = time.Hour })
	ctx := context.Background()
	// Two pulls of one task: two grants, whose liveness a heartbeat
	// renews apart (a heartbeat keeps a grant alive, not a task).
	j, tasks, _ := e.Handed(t, 2, 1, api.JobSpec{MaxAttempts: queuetest.Ptr(2)})
	if p, err := e.Q.Pull(ctx, pilotproto.PullRequest{Epoch: 1, Max: 1}); err != nil || len(p.Tasks) != 1 {
		t.Fatalf("second pull: %+v %v", p, err)
	} else {
		tasks = append(tasks, p.Tasks...)
	}
	state := func(id int64) string {
		var s string
		e.QueryRow(`SELECT state FROM tasks WHERE id = $1`, id).Scan(&s)
		return s
	}
	e.Clock.Advance(61 * time.Second)
	// Task 0 heartbeats in time; task 1 does not.
	if _, err := e.Q.Heartbeat(ctx, pilotproto.HeartbeatRequest{Epoch: 1, Running: []pilotproto.TaskRef{{TaskID: tasks[0].ID, Attempt: 1}}}); err != nil {
		t.Fatal(err)
	}
	if err := e.Q.Sweep(ctx); err != nil {
		t.Fatal(err)
	}
	if s0, s1 := state(tasks[0].ID), state(tasks[1].ID); s0 != api.TaskRunning || s1 != api.TaskZombie {
		t.Fatalf("after one zombie timeout: %s %s", s0, s1)
	}
	// A heartbeat brings a ZOMBIE back.
	e.Q.Heartbeat(ctx, pilotproto.HeartbeatRequest{Epoch: 1, Running: []pilotproto.TaskRef{{TaskID: tasks[0].ID, Attempt: 1}, {TaskID: tasks[1].ID, Attempt: 1}}})
	if s := state(tasks[1].ID); s != api.TaskRunning {
		t.Fatalf("heartbeat did not revive the zombie: %s", s)
	}
	e.Clock.Advance(121 * time.Second)
	e.Q.Sweep(ctx) // both ZOMBIE (no heartbeat for 121 s, but ZOMBIE only since now)
	e.Clock.Advance(1 * time.Second)
	e.Q.Sweep(ctx) // heartbeat 122 s ago > 2 x 60 s: EXPIRED, requeued (attempt 1 of 2)
	if s := state(tasks[0].ID); s != api.TaskWaiting {
		t.Fatalf("an expired task with attempts left must be requeued, is %s", s)
	}
	if u, _ := e.Q.User(ctx, "alice"); u.RunningCores != 0 {
		t.Fatalf("running cores after expiry: %d", u.RunningCores)
	}
	p2, _ := e.Q.Pull(ctx, pilotproto.PullRequest{Epoch: 1, Max: 2})
	if len(p2.Tasks) != 2 || p2.Tasks[0].Attempt != 2 {
		t.Fatalf("re-pull: %+v", p2.Tasks)
	}
	e.Clock.Advance(3 * time.Minute)
	e.Q.Sweep(ctx)
	e.Q.Sweep(ctx)
	got, _ := e.Q.Job(ctx, "alice", false, j.ID)
	if got.State != api.JobFailed || got.Tasks.Failed != 2 {
		t.Fatalf("after the last attempt expired: %s %+v", got.State, got.Tasks)
	}
	var st string
	e.QueryRow(`SELECT state FROM tasks WHERE id = $1`, tasks[0].ID).Scan(&st)
	if st != api.TaskExpired {
		t.Fatalf("final task state %s, want EXPIRED", st)
	}

	t.Run("a job still waiting past its expiry becomes ERROR_EW", func(t *testing.T) {
		w, err := e.Q.Submit(ctx, "bob", api.JobSpec{Dataset: e.Dataset("w", 2), Command: []string{"p"}, BatchSize: 1, ExpiryS: 3600})
		if err != nil {
			t.Fatal(err)
		}
		e.Clock.Advance(2 * time.Hour)
		if err := e.Q.Sweep(ctx); err != nil {
			t.Fatal(err)
		}
		got, _ := e.Q.Job(ctx, "bob", false, w.ID)
		if got.State != api.JobErrorEW || got.Tasks.Waiting != 0 {
			t.Fatalf("expired job: %s %+v", got.State, got.Tasks)
		}
	})
	t.Run("final jobs are purged after the retention", func(t *testing.T) {
		e.Clock.Advance(5*24*time.Hour + time.Minute)
		if err := e.Q.Sweep(ctx); err != nil {
			t.Fatal(err)
		}
		if n := e.Count(`SELECT count(*) FROM jobs`); n != 0 {
			t.Fatalf("%d jobs left after retention", n)
		}
		if n := e.Count(`SELECT count(*) FROM entries`) + e.Count(`SELECT count(*) FROM grants`) + e.Count(`SELECT count(*) FROM exceptions`) + e.Count(`SELECT count(*) FROM counts`); n != 0 {
			t.Fatalf("%d entry, grant, exception or counter rows left after purge", n)
		}
		if n := e.Count(`SELECT count(*) FROM usage_log`); n != 0 {
			t.Fatalf("%d usage rows older than the window left after purge", n)
		}
	})
}

func TestLeaseFencing(t *testing.T) {
	e := queuetest.New(t, func(c *queue.Config) { c.LeaseTTL = 30 * time.Second })
	ctx := context.Background()
	l1, _ := e.Q.Lease(ctx, pilotproto.LeaseRequest{PilotID: "p1", Address: "http://a1:1"})
	e.Clock.Advance(20 * time.Second)
	if l, err := e.Q.Lease(ctx, pilotproto.LeaseRequest{PilotID: "p1", Epoch: l1.Epoch}); err != nil || !l.Granted || l.Epoch != 1 || l.ExpiresAt != e.Clock.Now().Add(30*time.Second).Unix() {
		t.Fatalf("renewal: %+v %v", l, err)
	}
	e.Clock.Advance(31 * time.Second)
	if l, err := e.Q.Lease(ctx, pilotproto.LeaseRequest{PilotID: "p1", Epoch: 1}); err != nil || !l.Granted || l.Epoch != 1 {
		t.Fatalf("the holder renewing after expiry, nobody else asked: %+v %v", l, err)
	}
	e.Clock.Advance(31 * time.Second)
	l2, err := e.Q.Lease(ctx, pilotproto.LeaseRequest{PilotID: "p2", Address: "http://a2:1"})
	if err != nil || !l2.Granted || l2.Epoch != 2 || l2.Address != "http://a2:1" {
		t.Fatalf("takeover: %+v %v", l2, err)
	}
	if _, err := e.Q.Lease(ctx, pilotproto.LeaseRequest{PilotID: "p1", Epoch: 1}); !errors.Is(err, api.ErrStaleEpoch) {
		t.Fatalf("the deposed master renewing: %v", err)
	}
	if _, err := e.Q.Pull(ctx, pilotproto.PullRequest{Epoch: 1, Max: 1}); !errors.Is(err, api.ErrStaleEpoch) {
		t.Fatalf("the deposed master pulling: %v", err)
	}
	if addr, ok, err := e.Q.MasterAddress(ctx); addr != "http://a2:1" || !ok || err != nil {
		t.Fatalf("published address %q %v", addr, ok)
	}
	if id, err := e.Q.MasterPilot(ctx); id != "p2" || err != nil {
		t.Fatalf("master pilot %q %v, want p2", id, err)
	}
	if err := e.Q.Recommend(ctx, pilotproto.RecommendationRequest{Epoch: 2, MinNodes: 4, SlotsPerNode: 8}); err != nil {
		t.Fatal(err)
	}
	if r := e.Q.Recommendation(); r != 4 {
		t.Fatalf("recommendation %d", r)
	}
	if d, _ := e.Q.Demand(ctx); d.SlotsPerNode != 8 {
		t.Fatalf("slots per node %d", d.SlotsPerNode)
	}
	e.Clock.Advance(3 * time.Minute)
	if r := e.Q.Recommendation(); r != 0 {
		t.Fatalf("a stale recommendation must read 0, got %d", r)
	}
	if id, err := e.Q.MasterPilot(ctx); id != "" || err != nil {
		t.Fatalf("master pilot of an expired lease %q %v, want none", id, err)
	}
}

func TestAStoppingMasterReleasesTheLeaseSoTheNextAskerTakesOverAtOnce(t *testing.T) {
	e := queuetest.New(t)
	ctx := context.Background()
	l1, err := e.Q.Lease(ctx, pilotproto.LeaseRequest{PilotID: "p1", Address: "http://a1:1"})
	if err != nil || !l1.Granted {
		t.Fatal(l1, err)
	}
	// Somebody else may not release it, nor may the holder without its epoch.
	for _, bad := range []pilotproto.LeaseRequest{
		{PilotID: "p2", Epoch: l1.Epoch, Release: true},
		{PilotID: "p1", Release: true},
	} {
		if _, err := e.Q.Lease(ctx, bad); !errors.Is(err, api.ErrStaleEpoch) {
			t.Fatalf("release %+v: %v, want api.ErrStaleEpoch", bad, err)
		}
	}
	if l, _ := e.Q.Lease(ctx, pilotproto.LeaseRequest{PilotID: "p2", Address: "http://a2:1"}); l.Granted {
		t.Fatalf("lease granted to p2 while p1 holds it: %+v", l)
	}
	if _, err := e.Q.Lease(ctx, pilotproto.LeaseRequest{PilotID: "p1", Epoch: l1.Epoch, Release: true}); err != nil {
		t.Fatalf("release by the holder: %v", err)
	}
	if _, err := e.Q.Pull(ctx, pilotproto.PullRequest{Epoch: l1.Epoch, Max: 1}); !errors.Is(err, api.ErrLeaseExpired) {
		t.Fatalf("a released epoch may still pull: %v", err)
	}
	l2, err := e.Q.Lease(ctx, pilotproto.LeaseRequest{PilotID: "p2", Address: "http://a2:1"})
	if err != nil || !l2.Granted || l2.Epoch != l1.Epoch+1 || l2.Address != "http://a2:1" {
		t.Fatalf("the next asker after a release: %+v %v, want granted with epoch %d at once", l2, err, l1.Epoch+1)
	}
}

func TestANewMastersFirstHeartbeatRequeuesTasksNoMasterHolds(t *testing.T) {
	e := queuetest.New(t)
	ctx := context.Background()
	j, err := e.Q.Submit(ctx, "alice", api.JobSpec{Dataset: e.Dataset("orph", 5), Command: []string{"p"}, BatchSize: 1, MaxAttempts: queuetest.Ptr(2)})
	if err != nil {
		t.Fatal(err)
	}
	l1, _ := e.Q.Lease(ctx, pilotproto.LeaseRequest{PilotID: "p1", Address: "http://a1:1"})
	pulled, err := e.Q.Pull(ctx, pilotproto.PullRequest{Epoch: l1.Epoch, Max: 5})
	if err != nil || len(pulled.Tasks) != 5 {
		t.Fatalf("pull: %d tasks, %v", len(pulled.Tasks), err)
	}
	// p1 dies; it had checkpointed only the first two tasks (the answer of
	// its last pull never reached its checkpoint).
	e.Clock.Advance(31 * time.Second)
	l2, err := e.Q.Lease(ctx, pilotproto.LeaseRequest{PilotID: "p2", Address: "http://a2:1"})
	if err != nil || !l2.Granted {
		t.Fatal(l2, err)
	}
	held := []pilotproto.TaskRef{
		{TaskID: pulled.Tasks[0].ID, Attempt: pulled.Tasks[0].Attempt},
		{TaskID: pulled.Tasks[1].ID, Attempt: pulled.Tasks[1].Attempt},
	}
	if _, err := e.Q.Heartbeat(ctx, pilotproto.HeartbeatRequest{Epoch: l2.Epoch, Running: held}); err != nil {
		t.Fatal(err)
	}
	got, err := e.Q.Job(ctx, "alice", false, j.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got.Tasks.Waiting != 3 || got.Tasks.Running != 2 {
		t.Fatalf("after the new master's first heartbeat: %+v, want 3 waiting (orphans requeued at once) and 2 running", got.Tasks)
	}
	// Requeued as interrupted: no attempt counted, so they can run twice more.
	if n := e.Count(`SELECT count(*) FROM tasks WHERE job_id = $1 AND state = 'WAITING' AND tries = 0`, j.ID); n != 3 {
		t.Fatalf("%d requeued tasks with no attempt counted, want 3", n)
	}
	again, err := e.Q.Pull(ctx, pilotproto.PullRequest{Epoch: l2.Epoch, Max: 5})
	if err != nil || len(again.Tasks) != 3 {
		t.Fatalf("the new master pulls %d tasks (%v), want the 3 orphans", len(again.Tasks), err)
	}
	// Later heartbeats of the same epoch do not requeue what it pulled since.
	if _, err := e.Q.Heartbeat(ctx, pilotproto.HeartbeatRequest{Epoch: l2.Epoch, Running: held}); err != nil {
		t.Fatal(err)
	}
	if got, _ := e.Q.Job(ctx, "alice", false, j.ID); got.Tasks.Running != 5 {
		t.Fatalf("a second heartbeat changed the tasks: %+v", got.Tasks)
	}
}

// A task handed to the pool's live master and never listed by its
// heartbeats (the pull's answer was lost on the way) is requeued once the
// master has heartbeated for the grace (3 x TTL, at least 10 s) since,
// not after the zombie timeout; tasks it lists, and tasks handed out
// within the grace, are left alone.
func TestATaskItsMasterNeverListedIsRequeuedAfterTheGrace(t *testing.T) {
	e := queuetest.New(t, func(c *queue.Config) { c.ZombieTimeout = time.Hour; c.LeaseTTL = 4 * time.Second })
	ctx := context.Background()
	// Two pulls: the master got the first (two tasks), never the second
	// (one task, its own grant: a lost answer loses whole grants).
	j, tasks, epoch := e.Handed(t, 6, 2, api.JobSpec{})
	if p, err := e.Q.Pull(ctx, pilotproto.PullRequest{Epoch: epoch, Max: 1}); err != nil || len(p.Tasks) != 1 {
		t.Fatalf("second pull: %+v %v", p, err)
	} else {
		tasks = append(tasks, p.Tasks...)
	}
	lost := tasks[2] // the master never got this one
	held := []pilotproto.TaskRef{{TaskID: tasks[0].ID, Attempt: tasks[0].Attempt}, {TaskID: tasks[1].ID, Attempt: tasks[1].Attempt}}
	state := func(id int64) string {
		var s string
		e.QueryRow(`SELECT state FROM tasks WHERE id = $1`, id).Scan(&s)
		return s
	}
	var late pilotproto.Task
	for sec := 1; sec <= 14; sec++ {
		e.Clock.Advance(time.Second)
		if sec == 10 { // handed out 4 s before the sweep: within the grace
			q, err := e.Q.Pull(ctx, pilotproto.PullRequest{Epoch: epoch, Max: 1})
			if err != nil || len(q.Tasks) != 1 {
				t.Fatal(q, err)
			}
			late = q.Tasks[0]
		}
		if _, err := e.Q.Heartbeat(ctx, pilotproto.HeartbeatRequest{Epoch: epoch, Running: held}); err != nil {
			t.Fatal(err)
		}
		if err := e.Q.Sweep(ctx); err != nil {
			t.Fatal(err)
		}
		if sec == 11 && state(lost.ID) != api.TaskAssigned {
			t.Fatalf("requeued after %d s of heartbeats, before the 12 s grace: %s", sec, state(lost.ID))
		}
	}
	if s := state(lost.ID); s != api.TaskWaiting {
		t.Fatalf("a task its master never listed is %s after the grace, want WAITING", s)
	}
	if s0, s1, sl := state(tasks[0].ID), state(tasks[1].ID), state(late.ID); s0 != api.TaskRunning || s1 != api.TaskRunning || sl != api.TaskAssigned {
		t.Fatalf("listed tasks %s %s, the one handed out within the grace %s", s0, s1, sl)
	}
	got, err := e.Q.Job(ctx, "alice", false, j.ID)
	if err != nil || got.Tasks.Waiting != 3 || got.Tasks.Running != 3 || got.Tasks.Failed != 0 {
		t.Fatalf("job counters %+v (%v), want 3 waiting (2 never pulled, the requeued one) and 3 running, nothing failed", got.Tasks, err)
	}
	// The requeue counted no attempt: the task is handed out again.
	q, err := e.Q.Pull(ctx, pilotproto.PullRequest{Epoch: epoch, Max: 3})
	if err != nil {
		t.Fatal(err)
	}
	again := false
	for _, tk := range q.Tasks {
		again = again || tk.ID == lost.ID
	}
	if !again {
		t.Fatalf("the requeued task was not handed out again: %+v", q.Tasks)
	}
}
