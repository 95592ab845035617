package queue_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/harvest-hpc/harvest/pilotproto"
	"github.com/harvest-hpc/harvest/queue"
	"github.com/harvest-hpc/harvest/queue/api"
	"github.com/harvest-hpc/harvest/queue/queuetest"
)

// runs is the pull's tasks as runs of one job each: "owner initial x
// length" per run, e.g. "a3 b3".
func runs(tasks []pilotproto.Task) string {
	var out []string
	for i := 0; i < len(tasks); {
		k := i + 1
		for k < len(tasks) && tasks[k].JobID == tasks[i].JobID {
			k++
		}
		out = append(out, fmt.Sprintf("%s%d", tasks[i].Owner[:1], k-i))
		i = k
	}
	return strings.Join(out, " ")
}

// TestPullPicksBatches: each pick gives the chosen job a run of its batch
// size (bounded by its waiting tasks and what is left of the pull), users
// of equal standing alternate by batches, and the picks of one job in
// one transaction are one grant.
func TestPullPicksBatches(t *testing.T) {
	e := queuetest.New(t)
	ctx := context.Background()
	for _, u := range []string{"alice", "bob"} {
		if _, err := e.Q.Submit(ctx, u, api.JobSpec{Dataset: e.Dataset("d"+u, 7), Command: []string{"p"}, BatchSize: 3}); err != nil {
			t.Fatal(err)
		}
	}
	e.Q.Lease(ctx, pilotproto.LeaseRequest{PilotID: "m"})
	p, err := e.Q.Pull(ctx, pilotproto.PullRequest{Epoch: 1, Max: 13})
	if err != nil {
		t.Fatal(err)
	}
	// 7 tasks in batches of 3: 3, 3, 1; the pull's last pick gets what is left of it.
	if got, want := runs(p.Tasks), "a3 b3 a3 b3 a1"; got != want {
		t.Fatalf("pull runs %q, want %q", got, want)
	}
	for i := 1; i < len(p.Tasks); i++ {
		if p.Tasks[i].JobID == p.Tasks[i-1].JobID && p.Tasks[i].ID <= p.Tasks[i-1].ID {
			t.Fatalf("a run is not in FIFO order at %d", i)
		}
	}
	var grants int
	if err := e.QueryRow(`SELECT count(*) FROM grants`).Scan(&grants); err != nil {
		t.Fatal(err)
	}
	if grants != 2 {
		t.Fatalf("%d grants for one transaction's picks of 2 jobs, want 2", grants)
	}
	p, err = e.Q.Pull(ctx, pilotproto.PullRequest{Epoch: 1, Max: 13})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := runs(p.Tasks), "b1"; got != want {
		t.Fatalf("second pull runs %q, want %q", got, want)
	}
}

// TestPullBatchesNeverExceedTheCoresQuota drives users with cores quotas
// through pulls of random sizes with jobs of random batch sizes and
// results coming back, and checks after every pull that no user runs more
// cores than its quota and that a user with room and work got some.
func TestPullBatchesNeverExceedTheCoresQuota(t *testing.T) {
	type user struct {
		name         string
		quota, cores int
	}
	users := []user{{"one", 7, 1}, {"two", 6, 2}, {"three", 9, 3}, {"free", 20, 1}}
	r := rand.New(rand.NewPCG(7, 29))
	e := queuetest.New(t, func(c *queue.Config) { c.LeaseTTL = 365 * 24 * time.Hour; c.WriteChunk = 3 })
	ctx := context.Background()
	for _, u := range users {
		if _, err := e.Q.SetUser(ctx, u.name, api.UserSettings{MaxCores: queuetest.Ptr(u.quota), Create: true}); err != nil {
			t.Fatal(err)
		}
		for k := 0; k < 3; k++ {
			spec := api.JobSpec{Dataset: e.Dataset(fmt.Sprintf("%s-%d", u.name, k), 5+r.IntN(30)), Command: []string{"p"},
				BatchSize: 1 + r.IntN(9), Cores: queuetest.Ptr(u.cores)}
			if _, err := e.Q.Submit(ctx, u.name, spec); err != nil {
				t.Fatal(err)
			}
		}
	}
	e.Q.Lease(ctx, pilotproto.LeaseRequest{PilotID: "m"})
	running := map[string][]pilotproto.Task{}
	cores := func(name string) int {
		n := 0
		for _, tk := range running[name] {
			n += tk.Cores
		}
		return n
	}
	handed := 0
	for step := 0; step < 60; step++ {
		p, err := e.Q.Pull(ctx, pilotproto.PullRequest{Epoch: 1, Max: 1 + r.IntN(40)})
		if err != nil {
			t.Fatal(err)
		}
		handed += len(p.Tasks)
		for _, tk := range p.Tasks {
			running[tk.Owner] = append(running[tk.Owner], tk)
		}
		for _, u := range users {
			if c := cores(u.name); c > u.quota {
				t.Fatalf("step %d: %s runs %d cores, quota %d (pull %s)", step, u.name, c, u.quota, runs(p.Tasks))
			}
		}
		var res []pilotproto.Result
		for _, u := range users {
			ts := running[u.name]
			n := r.IntN(len(ts) + 1)
			for _, tk := range ts[:n] {
				res = append(res, pilotproto.Result{TaskID: tk.ID, Attempt: tk.Attempt, Status: pilotproto.StatusDone, DurationMS: 1000})
			}
			running[u.name] = ts[n:]
		}
		if len(res) > 0 {
			if _, err := e.Q.ReportResults(ctx, pilotproto.ResultsRequest{Epoch: 1, Results: res}); err != nil {
				t.Fatal(err)
			}
		}
	}
	if handed < 100 {
		t.Fatalf("only %d tasks handed out in 60 pulls: the quota check starves users", handed)
	}
}

// TestFairShareIntakeByBatches: with batches as the unit, equal users
// still share equally (Jain's index as high as task by task) and a higher
// priority still gets clearly more.
func TestFairShareIntakeByBatches(t *testing.T) {
	equal := []simUser{{"u1", 1, 0, 120}, {"u2", 1, 0, 120}, {"u3", 1, 0, 120}, {"u4", 1, 0, 120}}
	one := simulateIntake(t, equal, 16, time.Minute)
	for _, batch := range []int{4, 10} {
		rep := simulateBatchIntake(t, equal, 16, time.Minute, batch)
		t.Logf("batch size %d:", batch)
		logReport(t, rep)
		if rep.jain < 0.99 || rep.jain < one.jain-0.005 {
			t.Fatalf("Jain's index %.4f with batches of %d, %.4f task by task: want as high", rep.jain, batch, one.jain)
		}
	}
	rep := simulateBatchIntake(t, []simUser{{"hi", 2, 0, 200}, {"lo", 1, 0, 200}}, 20, time.Minute, 5)
	logReport(t, rep)
	if rep.work["hi"] <= 1.5*rep.work["lo"] {
		t.Fatalf("hi got %.0f, lo %.0f with batches of 5: the higher priority must get clearly more", rep.work["hi"], rep.work["lo"])
	}
	rep = simulateBatchIntake(t, []simUser{{"capped", 1, 4, 50}, {"free", 1, 0, 50}}, 20, time.Minute, 10)
	logReport(t, rep)
	if rep.work["capped"] != 4*60*float64(rep.contSt) {
		t.Fatalf("capped user got %.0f core-s in %d steps with batches of 10, the quota allows 4 cores", rep.work["capped"], rep.contSt)
	}
}
