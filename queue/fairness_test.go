package queue_test

import (
	"context"
	"sort"
	"testing"
	"time"

	"github.com/harvest-hpc/harvest/pilotproto"
	"github.com/harvest-hpc/harvest/queue"
	"github.com/harvest-hpc/harvest/queue/api"
	"github.com/harvest-hpc/harvest/queue/fairshare"
	"github.com/harvest-hpc/harvest/queue/queuetest"
)

type simUser struct {
	name     string
	priority float64
	maxCores int
	tasks    int
}

type simReport struct {
	work    map[string]float64 // core-seconds received while every user still had work
	nuwt    map[string]float64
	jain    float64
	steps   int
	contSt  int // steps while every user still had work
	makespn time.Duration
}

// simulateIntake runs a pool of slots in virtual time: each step the
// master pulls as many tasks as slots are free, every task runs taskDur,
// and the results come back at the end of the step.
func simulateIntake(t *testing.T, users []simUser, slots int, taskDur time.Duration) simReport {
	t.Helper()
	return simulateBatchIntake(t, users, slots, taskDur, 1)
}

// simulateBatchIntake is simulateIntake with jobs of the given batch size.
func simulateBatchIntake(t *testing.T, users []simUser, slots int, taskDur time.Duration, batch int) simReport {
	t.Helper()
	e := queuetest.New(t, func(c *queue.Config) { c.LeaseTTL = 365 * 24 * time.Hour })
	ctx := context.Background()
	for _, u := range users {
		s := api.UserSettings{Priority: queuetest.Ptr(u.priority), Create: true}
		if u.maxCores > 0 {
			s.MaxCores = queuetest.Ptr(u.maxCores)
		}
		if _, err := e.Q.SetUser(ctx, u.name, s); err != nil {
			t.Fatal(err)
		}
		if _, err := e.Q.Submit(ctx, u.name, api.JobSpec{Dataset: e.Dataset("ds-"+u.name, u.tasks), Command: []string{"p"}, BatchSize: batch}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := e.Q.Lease(ctx, pilotproto.LeaseRequest{PilotID: "m"}); err != nil {
		t.Fatal(err)
	}
	rep := simReport{work: map[string]float64{}, nuwt: map[string]float64{}}
	remaining := map[string]int{}
	for _, u := range users {
		remaining[u.name] = u.tasks
	}
	contended := true
	start := e.Clock.Now()
	for step := 0; step < 100_000; step++ {
		p, err := e.Q.Pull(ctx, pilotproto.PullRequest{Epoch: 1, Max: slots})
		if err != nil {
			t.Fatal(err)
		}
		if len(p.Tasks) == 0 {
			break
		}
		rep.steps++
		if contended {
			rep.contSt++
		}
		e.Clock.Advance(taskDur)
		var res []pilotproto.Result
		for _, tk := range p.Tasks {
			res = append(res, pilotproto.Result{TaskID: tk.ID, Attempt: tk.Attempt, Status: pilotproto.StatusDone, DurationMS: taskDur.Milliseconds()})
			if contended {
				rep.work[tk.Owner] += float64(tk.Cores) * taskDur.Seconds()
			}
			remaining[tk.Owner]--
		}
		if _, err := e.Q.ReportResults(ctx, pilotproto.ResultsRequest{Epoch: 1, Results: res}); err != nil {
			t.Fatal(err)
		}
		for _, n := range remaining {
			if n == 0 {
				contended = false
			}
		}
	}
	rep.makespn = e.Clock.Now().Sub(start)
	shares := make([]float64, 0, len(users))
	for _, u := range users {
		var wait, work float64
		// Every entry's wait is its first grant's hand-out less its job's
		// submission (nothing fails here: no retries); the work is the
		// logged usage (cores x run time).
		e.QueryRow(`SELECT coalesce(sum((g.last_idx - g.first_idx + 1) * (g.assigned_at - j.submitted_at)), 0) / 1000.0
			FROM grants g JOIN jobs j ON j.id = g.job_id WHERE j.owner = $1 AND g.attempt = 1`, u.name).Scan(&wait)
		e.QueryRow(`SELECT coalesce(sum(cpu_s), 0) FROM usage_log WHERE owner = $1`, u.name).Scan(&work)
		rep.nuwt[u.name] = fairshare.NUWT(wait, work)
		shares = append(shares, rep.work[u.name]/u.priority) // share normalised by entitlement
	}
	rep.jain = fairshare.Jain(shares)
	return rep
}

func logReport(t *testing.T, rep simReport) {
	names := make([]string, 0, len(rep.work))
	for n := range rep.work {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		t.Logf("user %-6s work under contention %8.0f core-s, NUWT %.3f", n, rep.work[n], rep.nuwt[n])
	}
	t.Logf("Jain's index %.4f over %d steps, makespan %v", rep.jain, rep.steps, rep.makespn)
}

func TestFairShareIntake(t *testing.T) {
	t.Run("four equal users interleave and share equally", func(t *testing.T) {
		users := []simUser{{"u1", 1, 0, 120}, {"u2", 1, 0, 120}, {"u3", 1, 0, 120}, {"u4", 1, 0, 120}}
		rep := simulateIntake(t, users, 16, time.Minute)
		logReport(t, rep)
		if rep.jain < 0.99 {
			t.Fatalf("Jain's index %.4f for equal users, want >= 0.99", rep.jain)
		}
		for _, u := range users {
			if d := rep.nuwt[u.name] - rep.nuwt["u1"]; d > 0.05 || d < -0.05 {
				t.Fatalf("NUWT of %s is %.3f, of u1 %.3f: equal users must wait alike", u.name, rep.nuwt[u.name], rep.nuwt["u1"])
			}
		}
	})
	t.Run("a user with twice the baseline priority gets more", func(t *testing.T) {
		users := []simUser{{"hi", 2, 0, 200}, {"lo", 1, 0, 200}}
		rep := simulateIntake(t, users, 20, time.Minute)
		logReport(t, rep)
		if rep.work["hi"] <= 1.5*rep.work["lo"] {
			t.Fatalf("hi got %.0f, lo %.0f: the higher priority must get clearly more", rep.work["hi"], rep.work["lo"])
		}
		if rep.nuwt["hi"] >= rep.nuwt["lo"] {
			t.Fatalf("hi waits %.3f, lo %.3f: the higher priority must wait less", rep.nuwt["hi"], rep.nuwt["lo"])
		}
	})
	t.Run("a user at the cores quota gets nothing more", func(t *testing.T) {
		users := []simUser{{"capped", 1, 2, 50}, {"free", 1, 0, 50}}
		rep := simulateIntake(t, users, 20, time.Minute)
		logReport(t, rep)
		// 20 slots: the capped user holds 2 cores at a time, the other the rest.
		if rep.work["capped"] != 2*60*float64(rep.contSt) {
			t.Fatalf("capped user got %.0f core-s in %d steps, the quota allows 2 cores", rep.work["capped"], rep.contSt)
		}
	})
}

// TestPullInterleavesEqualUsersWithinOnePull checks the order inside a
// single pull, not just over time.
func TestPullInterleavesEqualUsersWithinOnePull(t *testing.T) {
	e := queuetest.New(t)
	ctx := context.Background()
	for _, u := range []string{"alice", "bob"} {
		if _, err := e.Q.Submit(ctx, u, api.JobSpec{Dataset: e.Dataset("d"+u, 10), Command: []string{"p"}, BatchSize: 1}); err != nil {
			t.Fatal(err)
		}
	}
	// A second, pricier job of alice's goes first among hers.
	pricey, err := e.Q.Submit(ctx, "alice", api.JobSpec{Dataset: e.Dataset("pricey", 2), Command: []string{"p"}, BatchSize: 1, Price: queuetest.Ptr(5.0)})
	if err != nil {
		t.Fatal(err)
	}
	e.Q.Lease(ctx, pilotproto.LeaseRequest{PilotID: "m"})
	p, err := e.Q.Pull(ctx, pilotproto.PullRequest{Epoch: 1, Max: 8})
	if err != nil {
		t.Fatal(err)
	}
	var owners string
	for _, tk := range p.Tasks {
		owners += tk.Owner[:1]
	}
	if owners != "abababab" {
		t.Fatalf("pull order by owner %q, want alternating", owners)
	}
	if p.Tasks[0].JobID != pricey.ID || p.Tasks[2].JobID != pricey.ID {
		t.Fatalf("alice's pricier job must come first: %d %d", p.Tasks[0].JobID, p.Tasks[2].JobID)
	}
}

// TestOnePullHandsOutEachTaskOnce pulls more tasks than the first fetch
// of a job (the pull fetches per job in growing chunks).
func TestOnePullHandsOutEachTaskOnce(t *testing.T) {
	e := queuetest.New(t, func(c *queue.Config) { c.DefaultLimits.MaxParallelJobs = 1000 })
	ctx := context.Background()
	if _, err := e.Q.Submit(ctx, "alice", api.JobSpec{Dataset: e.Dataset("many", 300), Command: []string{"p"}, BatchSize: 1}); err != nil {
		t.Fatal(err)
	}
	e.Q.Lease(ctx, pilotproto.LeaseRequest{PilotID: "m"})
	p, err := e.Q.Pull(ctx, pilotproto.PullRequest{Epoch: 1, Max: 250})
	if err != nil {
		t.Fatal(err)
	}
	seen := map[int64]bool{}
	for i, tk := range p.Tasks {
		if seen[tk.ID] {
			t.Fatalf("task %d handed out twice", tk.ID)
		}
		seen[tk.ID] = true
		if i > 0 && tk.ID < p.Tasks[i-1].ID {
			t.Fatalf("tasks out of FIFO order at %d", i)
		}
	}
	if len(p.Tasks) != 250 {
		t.Fatalf("pulled %d, want 250", len(p.Tasks))
	}
	if p2, _ := e.Q.Pull(ctx, pilotproto.PullRequest{Epoch: 1, Max: 250}); len(p2.Tasks) != 50 {
		t.Fatalf("second pull got %d, want the 50 left", len(p2.Tasks))
	}
}
