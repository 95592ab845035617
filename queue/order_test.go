package queue_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/harvest-hpc/harvest/pilotproto"
	"github.com/harvest-hpc/harvest/queue"
	"github.com/harvest-hpc/harvest/queue/api"
	"github.com/harvest-hpc/harvest/queue/fairshare"
	"github.com/harvest-hpc/harvest/queue/queuetest"
)

// refUser is a user as the full recompute sees them, read from the tables.
type refUser struct {
	name   string
	limits fairshare.Limits
	usage  fairshare.Usage
	jobs   []refJob // live jobs with waiting tasks: price desc, then id
	picked int
}

type refJob struct {
	id             int64
	cores, waiting int
}

// fullRecomputeFromTables is the pull's order computed the way it was
// before the incremental order: read every user's limits, running cores
// and 24 h usage and every ready job from the tables, then for each task
// recompute every user's priority and take the highest. It returns the
// job of each task, in order.
func fullRecomputeFromTables(t *testing.T, e *queuetest.Env, window time.Duration, want int) []int64 {
	t.Helper()
	users := map[string]*refUser{}
	highest := 0.0
	rows, err := e.Query(`SELECT name, priority, max_cores, max_cpu_time, max_cost FROM users`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		u := &refUser{}
		rows.Scan(&u.name, &u.limits.Priority, &u.limits.MaxParallelJobs, &u.limits.MaxTotalRunningTime, &u.limits.MaxTotalCpuCost)
		users[u.name] = u
		highest = max(highest, u.limits.Priority)
	}
	rows.Close()
	rows, _ = e.Query(`SELECT j.owner, sum(j.cores) FROM tasks t JOIN jobs j ON j.id = t.job_id
		WHERE t.state IN ('ASSIGNED', 'RUNNING', 'ZOMBIE') AND j.state IN ('WAITING', 'RUNNING') GROUP BY j.owner`)
	for rows.Next() {
		var n string
		var c int
		rows.Scan(&n, &c)
		users[n].usage.RunningCores = c
	}
	rows.Close()
	cut := e.Clock.Now().Add(-window).UnixMilli()
	rows, _ = e.Query(`SELECT owner, cpu_s, cost FROM usage_log WHERE at > $1 ORDER BY id`, cut)
	for rows.Next() {
		var n string
		var cpu, cost float64
		rows.Scan(&n, &cpu, &cost)
		users[n].usage.CPUTime24h += cpu
		users[n].usage.Cost24h += cost
	}
	rows.Close()
	rows, _ = e.Query(`SELECT id, owner, cores, n_waiting FROM jobs JOIN counts ON counts.job_id = jobs.id WHERE state IN ('WAITING', 'RUNNING') AND n_waiting > 0 ORDER BY price DESC, id`)
	for rows.Next() {
		var j refJob
		var owner string
		rows.Scan(&j.id, &owner, &j.cores, &j.waiting)
		users[owner].jobs = append(users[owner].jobs, j)
	}
	rows.Close()
	var out []int64
	for len(out) < want {
		var best *refUser
		bestPrio := 0.0
		for _, u := range users {
			if len(u.jobs) == 0 {
				continue
			}
			p := fairshare.ComputedPriority(u.limits, u.usage, highest)
			if p < 0 {
				continue
			}
			if best == nil || p > bestPrio || (p == bestPrio && (u.picked < best.picked || (u.picked == best.picked && u.name < best.name))) {
				best, bestPrio = u, p
			}
		}
		if best == nil {
			break
		}
		j := &best.jobs[0]
		out = append(out, j.id)
		best.picked++
		best.usage.RunningCores += j.cores
		if j.waiting--; j.waiting == 0 {
			best.jobs = best.jobs[1:]
		}
	}
	return out
}

// TestPullOrderEqualsAFullRecomputeFromTheTables drives a queue with
// several users (priorities, quotas, prices, cores) through pulls,
// results of every kind, cancels, new jobs, limit changes and time passing
// beyond the usage window, and checks before every pull that the
// incrementally kept order hands out exactly the tasks a full recompute
// from the tables would.
func TestPullOrderEqualsAFullRecomputeFromTheTables(t *testing.T) {
	for seed := uint64(1); seed <= 4; seed++ {
		t.Run(fmt.Sprintf("seed %d", seed), func(t *testing.T) {
			r := rand.New(rand.NewPCG(seed, 99))
			window := 6 * time.Hour
			e := queuetest.New(t, func(c *queue.Config) { c.LeaseTTL = 365 * 24 * time.Hour; c.UsageWindow = window; c.WriteChunk = 7 })
			ctx := context.Background()
			names := []string{"ann", "ben", "cat", "dan", "eve", "fay"}
			submit := func(k int) {
				u := names[r.IntN(len(names))]
				spec := api.JobSpec{Dataset: e.Dataset(fmt.Sprintf("d%d-%d", seed, k), 1+r.IntN(12)), Command: []string{"p"}, BatchSize: 1,
					Price: queuetest.Ptr(float64(1 + r.IntN(3))), Cores: queuetest.Ptr(1 + r.IntN(2))}
				if _, err := e.Q.Submit(ctx, u, spec); err != nil {
					t.Fatal(err)
				}
			}
			for i, u := range names {
				s := api.UserSettings{Priority: queuetest.Ptr(float64(1 + i%3)), Create: true}
				if i%4 == 1 {
					s.MaxCores = queuetest.Ptr(4)
				}
				if i%4 == 2 {
					s.MaxCost = queuetest.Ptr(5e4) // reached after a few long tasks
				}
				if _, err := e.Q.SetUser(ctx, u, s); err != nil {
					t.Fatal(err)
				}
			}
			for k := 0; k < 12; k++ {
				submit(k)
			}
			if _, err := e.Q.Lease(ctx, pilotproto.LeaseRequest{PilotID: "m"}); err != nil {
				t.Fatal(err)
			}
			var running []pilotproto.Task
			for step := 0; step < 40; step++ {
				want := 1 + r.IntN(25)
				exp := fullRecomputeFromTables(t, e, window, want)
				p, err := e.Q.Pull(ctx, pilotproto.PullRequest{Epoch: 1, Max: want})
				if err != nil {
					t.Fatal(err)
				}
				got := make([]int64, len(p.Tasks))
				for i, tk := range p.Tasks {
					got[i] = tk.JobID
				}
				if !slices.Equal(got, exp) {
					t.Fatalf("step %d: the pull handed out tasks of jobs\n%v\nthe full recompute from the tables\n%v", step, got, exp)
				}
				running = append(running, p.Tasks...)
				// Some results of every kind, with whole-second durations so
				// the usage sums are exact either way.
				r.Shuffle(len(running), func(i, j int) { running[i], running[j] = running[j], running[i] })
				n := r.IntN(len(running) + 1)
				var res []pilotproto.Result
				for _, tk := range running[:n] {
					st := []string{pilotproto.StatusDone, pilotproto.StatusDone, pilotproto.StatusFailed, pilotproto.StatusInterrupted}[r.IntN(4)]
					res = append(res, pilotproto.Result{TaskID: tk.ID, Attempt: tk.Attempt, Status: st, DurationMS: int64(1+r.IntN(3600)) * 1000})
				}
				running = running[n:]
				if len(res) > 0 {
					if _, err := e.Q.ReportResults(ctx, pilotproto.ResultsRequest{Epoch: 1, Results: res}); err != nil {
						t.Fatal(err)
					}
				}
				switch r.IntN(6) {
				case 0:
					submit(100 + step)
				case 1:
					if l, _ := e.Q.ListJobs(ctx, queue.ListFilter{State: api.JobRunning}); len(l.Jobs) > 0 {
						j := l.Jobs[r.IntN(len(l.Jobs))]
						if _, err := e.Q.Cancel(ctx, j.Owner, true, j.ID); err != nil {
							t.Fatal(err)
						}
					}
				case 2:
					if _, err := e.Q.SetUser(ctx, names[r.IntN(len(names))], api.UserSettings{Priority: queuetest.Ptr(float64(1 + r.IntN(4)))}); err != nil {
						t.Fatal(err)
					}
				}
				e.Clock.Advance(time.Duration(r.IntN(90)) * time.Minute) // usage leaves the window
			}
		})
	}
}
