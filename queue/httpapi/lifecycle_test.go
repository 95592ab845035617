package httpapi_test

import (
	"context"
	"errors"
	"path/filepath"
	"slices"
	"testing"

	"github.com/harvest-hpc/harvest/pilotproto"
	"github.com/harvest-hpc/harvest/queue/api"
	"github.com/harvest-hpc/harvest/queue/client"
	"github.com/harvest-hpc/harvest/queue/queuetest"
)

// TestJobLifecycleOverHTTP drives a job from submit to its final state
// through the client, as the CLI and the master do.
func TestJobLifecycleOverHTTP(t *testing.T) {
	e := queuetest.New(t)
	ctx := context.Background()
	alice, admin, pilot := e.Client("alice"), e.Client("admin"), e.Client("pilot")

	ds := e.Dataset("set", 4)
	j, err := alice.Submit(ctx, api.JobSpec{Dataset: ds, Command: []string{"prog", "{input}", "{output}", "{job}", "{task}"}, BatchSize: 2, MaxAttempts: queuetest.Ptr(2), TimeoutS: 60})
	if err != nil {
		t.Fatal(err)
	}
	if j.State != api.JobWaiting || j.Tasks.Total != 4 || j.Tasks.Waiting != 4 || j.Owner != "alice" || j.MaxAttempts != 2 {
		t.Fatalf("submitted job: %+v", j)
	}
	if want := filepath.Join(e.Data, "out", "alice", "job-1"); j.OutputDir != want {
		t.Fatalf("output dir %s, want %s", j.OutputDir, want)
	}
	if _, err := e.Client("bob").Job(ctx, j.ID); !errors.Is(err, api.ErrNotFound) {
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
	if d, _ := e.Q.Demand(ctx); d.PendingTasks != 1 || d.RunningTasks != 3 {
		t.Fatalf("demand: %+v", d)
	}
	if got, _ := alice.Job(ctx, j.ID); got.State != api.JobRunning {
		t.Fatalf("job state after pull: %s", got.State)
	}
	if _, err := pilot.Heartbeat(ctx, pilotproto.HeartbeatRequest{Epoch: 1, Running: []pilotproto.TaskRef{{TaskID: t0.ID, Attempt: 1}},
		Pilots: []pilotproto.PilotStatus{{PilotID: "p1", Busy: true}}}); err != nil {
		t.Fatal(err)
	}
	if ps := e.Q.PilotStatus(); !ps["p1"].Busy {
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
	before := e.Snapshot(t)
	rr, err = pilot.Results(ctx, pilotproto.ResultsRequest{Epoch: 1, Results: res})
	if err != nil || rr.Applied != 0 || rr.Duplicates != 3 {
		t.Fatalf("duplicate results: %+v %v", rr, err)
	}
	if e.Snapshot(t) != before {
		t.Fatal("a duplicate result changed stored state")
	}
	// The failed task (attempt 1 of 2) and the interrupted one are waiting again.
	if got, _ := alice.Job(ctx, j.ID); got.Tasks.Done != 1 || got.Tasks.Waiting != 3 || got.Tasks.Running != 0 {
		t.Fatalf("counts after results: %+v", got.Tasks)
	}
	var tries int
	e.QueryRow(`SELECT tries FROM tasks WHERE id = $1`, p.Tasks[2].ID).Scan(&tries)
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
		if tk.ID&0xffffffff == 3 {
			want = 1 // the fourth entry: never handed out before
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
	u, _ := e.Q.User(ctx, "alice")
	if u.RunningCores != 0 || u.CPUTime24h != 10+1+0.5+2+2+2 {
		t.Fatalf("alice's usage: %+v", u)
	}

	t.Run("cancel kills the job and the master learns it at its next exchange", func(t *testing.T) {
		j2, err := alice.Submit(ctx, api.JobSpec{Dataset: e.Dataset("set2", 3), Command: []string{"prog"}, BatchSize: 1})
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
		if u, _ := e.Q.User(ctx, "alice"); u.RunningCores != 0 {
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
		if l, _ := e.Client("bob").Jobs(ctx, client.ListOptions{}); len(l.Jobs) != 0 {
			t.Fatalf("bob lists alice's jobs: %+v", l.Jobs)
		}
		if l, _ := admin.Jobs(ctx, client.ListOptions{User: "alice", State: api.JobKilled}); len(l.Jobs) != 1 {
			t.Fatalf("admin filter: %+v", l.Jobs)
		}
	})
}
