package queue

import (
	"context"
	"errors"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/harvest-hpc/harvest/pilotproto"
	"github.com/harvest-hpc/harvest/queue/api"
	"github.com/harvest-hpc/harvest/queue/client"
)

func TestJobStateFollowsTasks(t *testing.T) {
	for _, tc := range []struct {
		name    string
		cur     string
		started bool
		c       counts
		want    string
	}{
		{"a job with only waiting tasks is WAITING", api.JobWaiting, false, counts{total: 3, waiting: 3}, api.JobWaiting},
		{"a job with an assigned task is RUNNING", api.JobWaiting, true, counts{total: 3, waiting: 2, active: 1}, api.JobRunning},
		{"a started job whose tasks were all requeued stays RUNNING", api.JobRunning, true, counts{total: 3, waiting: 3}, api.JobRunning},
		{"all tasks done is DONE", api.JobRunning, true, counts{total: 3, done: 3}, api.JobDone},
		{"some failed permanently is DONE_WARN", api.JobRunning, true, counts{total: 3, done: 2, failed: 1}, api.JobDoneWarn},
		{"all failed is FAILED", api.JobRunning, true, counts{total: 2, failed: 2}, api.JobFailed},
		{"a killed job stays KILLED", api.JobKilled, true, counts{total: 2, killed: 2}, api.JobKilled},
		{"an expired job stays ERROR_EW", api.JobErrorEW, false, counts{total: 2, killed: 2}, api.JobErrorEW},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := jobState(tc.cur, tc.started, tc.c); got != tc.want {
				t.Fatalf("jobState = %s, want %s", got, tc.want)
			}
		})
	}
}

// TestJobLifecycleOverHTTP drives a job from submit to its final state
// through the client, as the CLI and the master do.
func TestJobLifecycleOverHTTP(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	alice, admin, pilot := e.client("alice"), e.client("admin"), e.client("pilot")

	ds := e.dataset("set", 4)
	j, err := alice.Submit(ctx, api.JobSpec{Dataset: ds, Command: []string{"prog", "{input}", "{output}", "{job}", "{task}"}, BatchSize: 2, MaxAttempts: ptr(2), TimeoutS: 60})
	if err != nil {
		t.Fatal(err)
	}
	if j.State != api.JobWaiting || j.Tasks.Total != 4 || j.Tasks.Waiting != 4 || j.Owner != "alice" || j.MaxAttempts != 2 {
		t.Fatalf("submitted job: %+v", j)
	}
	if want := filepath.Join(e.data, "out", "alice", "job-1"); j.OutputDir != want {
		t.Fatalf("output dir %s, want %s", j.OutputDir, want)
	}
	if _, err := e.client("bob").Job(ctx, j.ID); !errors.Is(err, api.ErrNotFound) {
		t.Fatalf("bob sees alice's job: %v", err)
	}
	if got, err := admin.Job(ctx, j.ID); err != nil || got.ID != j.ID {
		t.Fatalf("admin cannot see alice's job: %v", err)
	}

	l, err := pilot.Lease(ctx, pilotproto.LeaseRequest{PilotID: "p1", Address: "http://n1:7000"})
	if err != nil || !l.Granted || l.Epoch != 1 {
		t.Fatalf("lease: %+v %v", l, err)
	}
	if l2, err := pilot.Lease(ctx, pilotproto.LeaseRequest{PilotID: "p2", Address: "http://n2:7000"}); err != nil || l2.Granted || l2.Address != "http://n1:7000" {
		t.Fatalf("second asker: %+v %v", l2, err)
	}
	if l3, err := pilot.Lease(ctx, pilotproto.LeaseRequest{PilotID: "p1", Address: "http://n1:7000"}); err != nil || !l3.Granted || l3.Epoch != 1 {
		t.Fatalf("the holder asking again must keep its epoch: %+v %v", l3, err)
	}

	p, err := pilot.Pull(ctx, pilotproto.PullRequest{Epoch: 1, Max: 3})
	if err != nil || len(p.Tasks) != 3 {
		t.Fatalf("pull: %+v %v", p, err)
	}
	t0 := p.Tasks[0]
	if t0.Attempt != 1 || t0.Input != filepath.Join(ds, "e00000") || t0.Output != filepath.Join(j.OutputDir, "e00000") || t0.BatchSize != 2 || t0.TimeoutS != 60 {
		t.Fatalf("task: %+v", t0)
	}
	if d, _ := e.q.Demand(ctx); d.PendingTasks != 1 || d.RunningTasks != 3 {
		t.Fatalf("demand: %+v", d)
	}
	if got, _ := alice.Job(ctx, j.ID); got.State != api.JobRunning {
		t.Fatalf("job state after pull: %s", got.State)
	}
	if _, err := pilot.Heartbeat(ctx, pilotproto.HeartbeatRequest{Epoch: 1, Running: []pilotproto.TaskRef{{TaskID: t0.ID, Attempt: 1}},
		Pilots: []pilotproto.PilotStatus{{PilotID: "p1", Busy: true}}}); err != nil {
		t.Fatal(err)
	}
	if ps := e.q.PilotStatus(); !ps["p1"].Busy {
		t.Fatalf("pilot status: %+v", ps)
	}

	res := []pilotproto.Result{
		{TaskID: p.Tasks[0].ID, Attempt: 1, Status: pilotproto.StatusDone, DurationMS: 10_000},
		{TaskID: p.Tasks[1].ID, Attempt: 1, Status: pilotproto.StatusFailed, ExitCode: 3, DurationMS: 1000, ErrorTail: "boom"},
		{TaskID: p.Tasks[2].ID, Attempt: 1, Status: pilotproto.StatusInterrupted, DurationMS: 500},
	}
	rr, err := pilot.Results(ctx, pilotproto.ResultsRequest{Epoch: 1, Results: res})
	if err != nil || rr.Applied != 3 || rr.Duplicates != 0 {
		t.Fatalf("results: %+v %v", rr, err)
	}
	before := snapshot(t, e.q)
	rr, err = pilot.Results(ctx, pilotproto.ResultsRequest{Epoch: 1, Results: res})
	if err != nil || rr.Applied != 0 || rr.Duplicates != 3 {
		t.Fatalf("duplicate results: %+v %v", rr, err)
	}
	if snapshot(t, e.q) != before {
		t.Fatal("a duplicate result changed stored state")
	}
	// The failed task (attempt 1 of 2) and the interrupted one are waiting again.
	if got, _ := alice.Job(ctx, j.ID); got.Tasks.Done != 1 || got.Tasks.Waiting != 3 || got.Tasks.Running != 0 {
		t.Fatalf("counts after results: %+v", got.Tasks)
	}
	var tries int
	e.q.r.QueryRow(`SELECT tries FROM tasks WHERE id = ?`, p.Tasks[2].ID).Scan(&tries)
	if tries != 0 {
		t.Fatalf("an interrupted task counted an attempt: tries = %d", tries)
	}

	p2, err := pilot.Pull(ctx, pilotproto.PullRequest{Epoch: 1, Max: 10})
	if err != nil || len(p2.Tasks) != 3 {
		t.Fatalf("second pull: %+v %v", p2, err)
	}
	var results []pilotproto.Result
	for _, tk := range p2.Tasks {
		want := 2 // requeued (failed or interrupted)
		if tk.ID == 4 {
			want = 1 // never handed out before
		}
		if tk.Attempt != want {
			t.Fatalf("task %d has attempt %d, want %d", tk.ID, tk.Attempt, want)
		}
		st := pilotproto.StatusDone
		if tk.ID == p.Tasks[1].ID {
			st = pilotproto.StatusFailed // second failure: out of attempts
		}
		results = append(results, pilotproto.Result{TaskID: tk.ID, Attempt: tk.Attempt, Status: st, DurationMS: 2000})
	}
	// A late result for attempt 1 of a requeued task is ignored.
	results = append(results, pilotproto.Result{TaskID: p.Tasks[2].ID, Attempt: 99, Status: pilotproto.StatusDone})
	rr, err = pilot.Results(ctx, pilotproto.ResultsRequest{Epoch: 1, Results: results})
	if err != nil || rr.Applied != 3 || rr.Ignored != 1 {
		t.Fatalf("final results: %+v %v", rr, err)
	}
	got, _ := alice.Job(ctx, j.ID)
	if got.State != api.JobDoneWarn || got.Tasks.Done != 3 || got.Tasks.Failed != 1 || got.FinishedAt == 0 {
		t.Fatalf("final job: %s %+v", got.State, got.Tasks)
	}
	u, _ := e.q.User(ctx, "alice")
	if u.RunningCores != 0 || u.CPUTime24h != 10+1+0.5+2+2+2 {
		t.Fatalf("alice's usage: %+v", u)
	}

	t.Run("cancel kills the job and the master learns it at its next exchange", func(t *testing.T) {
		j2, err := alice.Submit(ctx, api.JobSpec{Dataset: e.dataset("set2", 3), Command: []string{"prog"}, BatchSize: 1})
		if err != nil {
			t.Fatal(err)
		}
		p, err := pilot.Pull(ctx, pilotproto.PullRequest{Epoch: 1, Max: 1})
		if err != nil || len(p.Tasks) != 1 {
			t.Fatalf("pull: %+v %v", p, err)
		}
		k, err := alice.Cancel(ctx, j2.ID)
		if err != nil || k.State != api.JobKilled || k.Tasks.Killed != 3 {
			t.Fatalf("cancel: %+v %v", k, err)
		}
		hb, err := pilot.Heartbeat(ctx, pilotproto.HeartbeatRequest{Epoch: 1})
		if err != nil || !slices.Contains(hb.CancelledJobs, j2.ID) {
			t.Fatalf("heartbeat after cancel: %+v %v", hb, err)
		}
		rr, err := pilot.Results(ctx, pilotproto.ResultsRequest{Epoch: 1, Results: []pilotproto.Result{{TaskID: p.Tasks[0].ID, Attempt: 1, Status: pilotproto.StatusKilled}}})
		if err != nil || rr.Applied != 0 || rr.Ignored != 1 {
			t.Fatalf("result of a killed task: %+v %v", rr, err)
		}
		if u, _ := e.q.User(ctx, "alice"); u.RunningCores != 0 {
			t.Fatalf("running cores after cancel: %d", u.RunningCores)
		}
		if p, _ := pilot.Pull(ctx, pilotproto.PullRequest{Epoch: 1, Max: 10}); len(p.Tasks) != 0 {
			t.Fatalf("pulled %d tasks of a killed job", len(p.Tasks))
		}
	})

	t.Run("pagination walks every job once", func(t *testing.T) {
		for i := 0; i < 3; i++ {
			if _, err := alice.Submit(ctx, api.JobSpec{Dataset: ds, Command: []string{"prog"}, BatchSize: 1}); err != nil {
				t.Fatal(err)
			}
		}
		var ids []int64
		cursor := int64(0)
		for {
			page, err := alice.Jobs(ctx, client.ListOptions{Limit: 2, Cursor: cursor})
			if err != nil {
				t.Fatal(err)
			}
			for _, j := range page.Jobs {
				ids = append(ids, j.ID)
			}
			if page.NextCursor == 0 {
				break
			}
			cursor = page.NextCursor
		}
		if !slices.Equal(ids, []int64{5, 4, 3, 2, 1}) {
			t.Fatalf("pages gave %v", ids)
		}
		if l, _ := e.client("bob").Jobs(ctx, client.ListOptions{}); len(l.Jobs) != 0 {
			t.Fatalf("bob lists alice's jobs: %+v", l.Jobs)
		}
		if l, _ := admin.Jobs(ctx, client.ListOptions{User: "alice", State: api.JobKilled}); len(l.Jobs) != 1 {
			t.Fatalf("admin filter: %+v", l.Jobs)
		}
	})
}

// TestTimeDrivenTransitions covers ZOMBIE, EXPIRED with requeue, ERROR_EW
// and purge, in virtual time.
func TestTimeDrivenTransitions(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.ZombieTimeout = time.Minute; c.LeaseTTL = time.Hour })
	ctx := context.Background()
	j, err := e.q.Submit(ctx, "alice", api.JobSpec{Dataset: e.dataset("z", 2), Command: []string{"p"}, BatchSize: 1, MaxAttempts: ptr(2)})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.q.Lease(ctx, pilotproto.LeaseRequest{PilotID: "p1"}); err != nil {
		t.Fatal(err)
	}
	p, err := e.q.Pull(ctx, pilotproto.PullRequest{Epoch: 1, Max: 2})
	if err != nil || len(p.Tasks) != 2 {
		t.Fatal(p, err)
	}
	state := func(id int64) string {
		var s string
		e.q.r.QueryRow(`SELECT state FROM tasks WHERE id = ?`, id).Scan(&s)
		return s
	}
	e.clock.Advance(61 * time.Second)
	// Task 0 heartbeats in time; task 1 does not.
	if _, err := e.q.Heartbeat(ctx, pilotproto.HeartbeatRequest{Epoch: 1, Running: []pilotproto.TaskRef{{TaskID: p.Tasks[0].ID, Attempt: 1}}}); err != nil {
		t.Fatal(err)
	}
	if err := e.q.Sweep(ctx); err != nil {
		t.Fatal(err)
	}
	if s0, s1 := state(p.Tasks[0].ID), state(p.Tasks[1].ID); s0 != api.TaskRunning || s1 != api.TaskZombie {
		t.Fatalf("after one zombie timeout: %s %s", s0, s1)
	}
	// A heartbeat brings a ZOMBIE back.
	e.q.Heartbeat(ctx, pilotproto.HeartbeatRequest{Epoch: 1, Running: []pilotproto.TaskRef{{TaskID: p.Tasks[0].ID, Attempt: 1}, {TaskID: p.Tasks[1].ID, Attempt: 1}}})
	if s := state(p.Tasks[1].ID); s != api.TaskRunning {
		t.Fatalf("heartbeat did not revive the zombie: %s", s)
	}
	e.clock.Advance(121 * time.Second)
	e.q.Sweep(ctx) // both ZOMBIE (no heartbeat for 121 s, but ZOMBIE only since now)
	e.clock.Advance(1 * time.Second)
	e.q.Sweep(ctx) // heartbeat 122 s ago > 2 x 60 s: EXPIRED, requeued (attempt 1 of 2)
	if s := state(p.Tasks[0].ID); s != api.TaskWaiting {
		t.Fatalf("an expired task with attempts left must be requeued, is %s", s)
	}
	if u, _ := e.q.User(ctx, "alice"); u.RunningCores != 0 {
		t.Fatalf("running cores after expiry: %d", u.RunningCores)
	}
	p2, _ := e.q.Pull(ctx, pilotproto.PullRequest{Epoch: 1, Max: 2})
	if len(p2.Tasks) != 2 || p2.Tasks[0].Attempt != 2 {
		t.Fatalf("re-pull: %+v", p2.Tasks)
	}
	e.clock.Advance(3 * time.Minute)
	e.q.Sweep(ctx)
	e.q.Sweep(ctx)
	got, _ := e.q.Job(ctx, "alice", false, j.ID)
	if got.State != api.JobFailed || got.Tasks.Failed != 2 {
		t.Fatalf("after the last attempt expired: %s %+v", got.State, got.Tasks)
	}
	var st string
	e.q.r.QueryRow(`SELECT state FROM tasks WHERE id = ?`, p.Tasks[0].ID).Scan(&st)
	if st != api.TaskExpired {
		t.Fatalf("final task state %s, want EXPIRED", st)
	}

	t.Run("a job still waiting past its expiry becomes ERROR_EW", func(t *testing.T) {
		w, err := e.q.Submit(ctx, "bob", api.JobSpec{Dataset: e.dataset("w", 2), Command: []string{"p"}, BatchSize: 1, ExpiryS: 3600})
		if err != nil {
			t.Fatal(err)
		}
		e.clock.Advance(2 * time.Hour)
		if err := e.q.Sweep(ctx); err != nil {
			t.Fatal(err)
		}
		got, _ := e.q.Job(ctx, "bob", false, w.ID)
		if got.State != api.JobErrorEW || got.Tasks.Waiting != 0 {
			t.Fatalf("expired job: %s %+v", got.State, got.Tasks)
		}
	})
	t.Run("final jobs are purged after the retention", func(t *testing.T) {
		e.clock.Advance(5*24*time.Hour + time.Minute)
		if err := e.q.Sweep(ctx); err != nil {
			t.Fatal(err)
		}
		if n := count(t, e.q.r, `SELECT count(*) FROM jobs`); n != 0 {
			t.Fatalf("%d jobs left after retention", n)
		}
		if n := count(t, e.q.r, `SELECT count(*) FROM tasks`) + count(t, e.q.r, `SELECT count(*) FROM results`); n != 0 {
			t.Fatalf("%d task/result rows left after purge", n)
		}
	})
}

func TestLeaseFencing(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	l1, _ := e.q.Lease(ctx, pilotproto.LeaseRequest{PilotID: "p1", Address: "a1"})
	e.clock.Advance(20 * time.Second)
	if l, err := e.q.Lease(ctx, pilotproto.LeaseRequest{PilotID: "p1", Epoch: l1.Epoch}); err != nil || !l.Granted || l.Epoch != 1 || l.ExpiresAt != e.clock.Now().Add(30*time.Second).Unix() {
		t.Fatalf("renewal: %+v %v", l, err)
	}
	e.clock.Advance(31 * time.Second)
	if l, err := e.q.Lease(ctx, pilotproto.LeaseRequest{PilotID: "p1", Epoch: 1}); err != nil || !l.Granted || l.Epoch != 1 {
		t.Fatalf("the holder renewing after expiry, nobody else asked: %+v %v", l, err)
	}
	e.clock.Advance(31 * time.Second)
	l2, err := e.q.Lease(ctx, pilotproto.LeaseRequest{PilotID: "p2", Address: "a2"})
	if err != nil || !l2.Granted || l2.Epoch != 2 || l2.Address != "a2" {
		t.Fatalf("takeover: %+v %v", l2, err)
	}
	if _, err := e.q.Lease(ctx, pilotproto.LeaseRequest{PilotID: "p1", Epoch: 1}); !errors.Is(err, api.ErrStaleEpoch) {
		t.Fatalf("the deposed master renewing: %v", err)
	}
	if _, err := e.q.Pull(ctx, pilotproto.PullRequest{Epoch: 1, Max: 1}); !errors.Is(err, api.ErrStaleEpoch) {
		t.Fatalf("the deposed master pulling: %v", err)
	}
	if addr, ok := e.q.MasterAddress(); addr != "a2" || !ok {
		t.Fatalf("published address %q %v", addr, ok)
	}
	if err := e.q.Recommend(ctx, pilotproto.RecommendationRequest{Epoch: 2, MinNodes: 4, SlotsPerNode: 8}); err != nil {
		t.Fatal(err)
	}
	if r := e.q.Recommendation(); r != 4 {
		t.Fatalf("recommendation %d", r)
	}
	if d, _ := e.q.Demand(ctx); d.SlotsPerNode != 8 {
		t.Fatalf("slots per node %d", d.SlotsPerNode)
	}
	e.clock.Advance(3 * time.Minute)
	if r := e.q.Recommendation(); r != 0 {
		t.Fatalf("a stale recommendation must read 0, got %d", r)
	}
}

func TestAStoppingMasterReleasesTheLeaseSoTheNextAskerTakesOverAtOnce(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	l1, err := e.q.Lease(ctx, pilotproto.LeaseRequest{PilotID: "p1", Address: "a1"})
	if err != nil || !l1.Granted {
		t.Fatal(l1, err)
	}
	// Somebody else may not release it, nor may the holder without its epoch.
	for _, bad := range []pilotproto.LeaseRequest{
		{PilotID: "p2", Epoch: l1.Epoch, Release: true},
		{PilotID: "p1", Release: true},
	} {
		if _, err := e.q.Lease(ctx, bad); !errors.Is(err, api.ErrStaleEpoch) {
			t.Fatalf("release %+v: %v, want api.ErrStaleEpoch", bad, err)
		}
	}
	if l, _ := e.q.Lease(ctx, pilotproto.LeaseRequest{PilotID: "p2", Address: "a2"}); l.Granted {
		t.Fatalf("lease granted to p2 while p1 holds it: %+v", l)
	}
	if _, err := e.q.Lease(ctx, pilotproto.LeaseRequest{PilotID: "p1", Epoch: l1.Epoch, Release: true}); err != nil {
		t.Fatalf("release by the holder: %v", err)
	}
	if _, err := e.q.Pull(ctx, pilotproto.PullRequest{Epoch: l1.Epoch, Max: 1}); !errors.Is(err, api.ErrLeaseExpired) {
		t.Fatalf("a released epoch may still pull: %v", err)
	}
	l2, err := e.q.Lease(ctx, pilotproto.LeaseRequest{PilotID: "p2", Address: "a2"})
	if err != nil || !l2.Granted || l2.Epoch != l1.Epoch+1 || l2.Address != "a2" {
		t.Fatalf("the next asker after a release: %+v %v, want granted with epoch %d at once", l2, err, l1.Epoch+1)
	}
}

func TestANewMastersFirstHeartbeatRequeuesTasksNoMasterHolds(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	j, err := e.q.Submit(ctx, "alice", api.JobSpec{Dataset: e.dataset("orph", 5), Command: []string{"p"}, BatchSize: 1, MaxAttempts: ptr(2)})
	if err != nil {
		t.Fatal(err)
	}
	l1, _ := e.q.Lease(ctx, pilotproto.LeaseRequest{PilotID: "p1", Address: "a1"})
	pulled, err := e.q.Pull(ctx, pilotproto.PullRequest{Epoch: l1.Epoch, Max: 5})
	if err != nil || len(pulled.Tasks) != 5 {
		t.Fatalf("pull: %d tasks, %v", len(pulled.Tasks), err)
	}
	// p1 dies; it had checkpointed only the first two tasks (the answer of
	// its last pull never reached its checkpoint).
	e.clock.Advance(31 * time.Second)
	l2, err := e.q.Lease(ctx, pilotproto.LeaseRequest{PilotID: "p2", Address: "a2"})
	if err != nil || !l2.Granted {
		t.Fatal(l2, err)
	}
	held := []pilotproto.TaskRef{
		{TaskID: pulled.Tasks[0].ID, Attempt: pulled.Tasks[0].Attempt},
		{TaskID: pulled.Tasks[1].ID, Attempt: pulled.Tasks[1].Attempt},
	}
	if _, err := e.q.Heartbeat(ctx, pilotproto.HeartbeatRequest{Epoch: l2.Epoch, Running: held}); err != nil {
		t.Fatal(err)
	}
	got, err := e.q.Job(ctx, "alice", false, j.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got.Tasks.Waiting != 3 || got.Tasks.Running != 2 {
		t.Fatalf("after the new master's first heartbeat: %+v, want 3 waiting (orphans requeued at once) and 2 running", got.Tasks)
	}
	// Requeued as interrupted: no attempt counted, so they can run twice more.
	if n := count(t, e.q.r, `SELECT count(*) FROM tasks WHERE job_id = ? AND state = 'WAITING' AND tries = 0`, j.ID); n != 3 {
		t.Fatalf("%d requeued tasks with no attempt counted, want 3", n)
	}
	again, err := e.q.Pull(ctx, pilotproto.PullRequest{Epoch: l2.Epoch, Max: 5})
	if err != nil || len(again.Tasks) != 3 {
		t.Fatalf("the new master pulls %d tasks (%v), want the 3 orphans", len(again.Tasks), err)
	}
	// Later heartbeats of the same epoch do not requeue what it pulled since.
	if _, err := e.q.Heartbeat(ctx, pilotproto.HeartbeatRequest{Epoch: l2.Epoch, Running: held}); err != nil {
		t.Fatal(err)
	}
	if got, _ := e.q.Job(ctx, "alice", false, j.ID); got.Tasks.Running != 5 {
		t.Fatalf("a second heartbeat changed the tasks: %+v", got.Tasks)
	}
}
