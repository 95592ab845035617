package sim

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/harvest-hpc/harvest/adapters"
	"github.com/harvest-hpc/harvest/cluster"
)

type fj struct {
	name          string
	nodes         int
	limit, run    int64
	submit        int64
	wantStart     int64
	wantEnd       int64
	wantKilled    bool
	unlimitedTime bool
}

func newCluster(t *testing.T, nodes int, latency int64) *Cluster {
	t.Helper()
	cfg := DefaultConfig()
	cfg.Nodes, cfg.Latency = nodes, latency
	c, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestScheduleHandComputed(t *testing.T) {
	tests := []struct {
		name    string
		nodes   int
		latency int64
		// bf is Config.BackfillInterval, busy Config.BackfillBusy.
		bf   int64
		busy bool
		jobs []fj
	}{
		{
			name: "a short job backfills into the hole before the top job's reservation, a long one waits",
			// J2 needs all 4 nodes and is reserved at 100 (J1's limit).
			// J3 fits in the hole (ends by 52). J4 would overlap J2's
			// reservation, so it waits until J2 ends.
			nodes: 4,
			jobs: []fj{
				{name: "J1", nodes: 2, limit: 100, run: 100, submit: 0, wantStart: 0, wantEnd: 100},
				{name: "J2", nodes: 4, limit: 100, run: 100, submit: 1, wantStart: 100, wantEnd: 200},
				{name: "J3", nodes: 2, limit: 50, run: 50, submit: 2, wantStart: 2, wantEnd: 52},
				{name: "J4", nodes: 2, limit: 200, run: 10, submit: 3, wantStart: 200, wantEnd: 210},
			},
		},
		{
			name:  "a job running past its limit is killed at the limit",
			nodes: 2,
			jobs: []fj{
				{name: "J1", nodes: 2, limit: 300, run: 500, wantStart: 0, wantEnd: 300, wantKilled: true},
				{name: "J2", nodes: 1, limit: 10, run: 5, submit: 1, wantStart: 300, wantEnd: 305},
			},
		},
		{
			name: "the top job starts as soon as a job ends before its limit",
			// J2's reservation is at 100 but J1 really ends at 60.
			nodes: 3,
			jobs: []fj{
				{name: "J1", nodes: 2, limit: 100, run: 60, wantStart: 0, wantEnd: 60},
				{name: "J2", nodes: 3, limit: 100, run: 100, submit: 1, wantStart: 60, wantEnd: 160},
			},
		},
		{
			name: "a backfill candidate judged by its limit, not its run time, is held back",
			// J3 would really end at 20, but its limit (150) overlaps J2's
			// reservation at 100, so it waits behind J2.
			nodes: 4,
			jobs: []fj{
				{name: "J1", nodes: 2, limit: 100, run: 100, wantStart: 0, wantEnd: 100},
				{name: "J2", nodes: 4, limit: 100, run: 100, submit: 1, wantStart: 100, wantEnd: 200},
				{name: "J3", nodes: 1, limit: 150, run: 20, submit: 2, wantStart: 200, wantEnd: 220},
			},
		},
		{
			name: "a backfill job may outlive the reservation if it uses nodes the top job does not need",
			// J2 needs 3 of 4 nodes at 100; one node stays free for J3.
			nodes: 4,
			jobs: []fj{
				{name: "J1", nodes: 3, limit: 100, run: 100, wantStart: 0, wantEnd: 100},
				{name: "J2", nodes: 3, limit: 100, run: 100, submit: 1, wantStart: 100, wantEnd: 200},
				{name: "J3", nodes: 1, limit: 1000, run: 500, submit: 2, wantStart: 2, wantEnd: 502},
			},
		},
		{
			name: "an unlimited job never frees its nodes for a reservation",
			// J2 (3 nodes) can never start: J1 holds 2 of 3 nodes for ever.
			nodes: 3,
			jobs: []fj{
				{name: "J1", nodes: 2, unlimitedTime: true, run: 1000, wantStart: 0, wantEnd: 1000},
				{name: "J2", nodes: 3, limit: 100, run: 100, submit: 1, wantStart: 1000, wantEnd: 1100},
				{name: "J3", nodes: 1, limit: 50, run: 50, submit: 2, wantStart: 2, wantEnd: 52},
			},
		},
		{
			name:    "the scheduler reacts after its latency",
			nodes:   2,
			latency: 10,
			jobs: []fj{
				{name: "J1", nodes: 2, limit: 100, run: 50, wantStart: 10, wantEnd: 60},
				{name: "J2", nodes: 2, limit: 100, run: 50, submit: 20, wantStart: 70, wantEnd: 120},
			},
		},
		{
			name: "with a backfill interval a job only backfill may start waits for the backfill pass",
			// The main passes at 1 and 2 stop at J2 (4 nodes, 2 free);
			// the first backfill pass, 30 s after the start, reserves J2
			// at 100 and starts J3 in the hole. With every pass
			// backfilling J3 ran 2-52 and J2 started at 60, J1's end;
			// now J3 holds 2 nodes until 80.
			nodes: 4,
			bf:    30,
			jobs: []fj{
				{name: "J1", nodes: 2, limit: 100, run: 60, wantStart: 0, wantEnd: 60},
				{name: "J2", nodes: 4, limit: 100, run: 100, submit: 1, wantStart: 80, wantEnd: 180},
				{name: "J3", nodes: 2, limit: 50, run: 50, submit: 2, wantStart: 30, wantEnd: 80},
			},
		},
		{
			name: "a job's end starts the top job at once (main pass), before backfill can give its nodes to a lower job",
			// J3 arrives at 35, after the backfill pass of 30; the next is
			// due at 60. J1 ends at 40 and the main pass starts J2 on the
			// 4 free nodes. With every pass backfilling, J3 took 2 of
			// them at 35 (it ends by 85, before J2's reservation at 100)
			// and J2 waited until 85.
			nodes: 4,
			bf:    30,
			jobs: []fj{
				{name: "J1", nodes: 2, limit: 100, run: 40, wantStart: 0, wantEnd: 40},
				{name: "J2", nodes: 4, limit: 100, run: 100, submit: 1, wantStart: 40, wantEnd: 140},
				{name: "J3", nodes: 2, limit: 50, run: 50, submit: 35, wantStart: 140, wantEnd: 190},
			},
		},
		{
			name: "an idle backfill thread runs at the first change once its interval has passed",
			// The last backfill pass ran at 30; J3's arrival at 200 is the
			// first change since, and backfill starts it then.
			nodes: 2,
			bf:    30,
			jobs: []fj{
				{name: "J1", nodes: 1, limit: 1000, run: 1000, wantStart: 0, wantEnd: 1000},
				{name: "J2", nodes: 2, limit: 100, run: 100, submit: 1, wantStart: 1000, wantEnd: 1100},
				{name: "J3", nodes: 1, limit: 50, run: 50, submit: 200, wantStart: 200, wantEnd: 250},
			},
		},
		{
			name:  "a busy backfill thread runs every interval, and J3 waits for the pass at 210",
			nodes: 2,
			bf:    30,
			busy:  true,
			jobs: []fj{
				{name: "J1", nodes: 1, limit: 1000, run: 1000, wantStart: 0, wantEnd: 1000},
				{name: "J2", nodes: 2, limit: 100, run: 100, submit: 1, wantStart: 1000, wantEnd: 1100},
				{name: "J3", nodes: 1, limit: 50, run: 50, submit: 200, wantStart: 210, wantEnd: 260},
			},
		},
		{
			// The first change at 37 does not move the passes: a busy thread
			// cycles at the clock's phase (60, 90, ... 210), so a harvest run
			// whose agent acts at another second than its baseline's first
			// job backfills at the same instants (before: 37, 67, ... 217).
			name:  "a busy backfill thread keeps the clock's phase whenever the first change comes: J3 still starts at 210",
			nodes: 2,
			bf:    30,
			busy:  true,
			jobs: []fj{
				{name: "J1", nodes: 1, limit: 1000, run: 1000, submit: 37, wantStart: 37, wantEnd: 1037},
				{name: "J2", nodes: 2, limit: 100, run: 100, submit: 38, wantStart: 1037, wantEnd: 1137},
				{name: "J3", nodes: 1, limit: 50, run: 50, submit: 200, wantStart: 210, wantEnd: 260},
			},
		},
		{
			name:    "with a latency the busy passes come that much after the clock's multiples: J3 starts at 212",
			nodes:   2,
			latency: 2,
			bf:      30,
			busy:    true,
			jobs: []fj{
				{name: "J1", nodes: 1, limit: 1000, run: 1000, submit: 7, wantStart: 9, wantEnd: 1009},
				{name: "J2", nodes: 2, limit: 100, run: 100, submit: 8, wantStart: 1011, wantEnd: 1111},
				{name: "J3", nodes: 1, limit: 50, run: 50, submit: 200, wantStart: 212, wantEnd: 262},
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg := DefaultConfig()
			cfg.Nodes, cfg.Latency, cfg.BackfillInterval, cfg.BackfillBusy = tc.nodes, tc.latency, tc.bf, tc.busy
			c, err := New(cfg)
			if err != nil {
				t.Fatal(err)
			}
			ids := map[string]string{}
			for _, j := range tc.jobs {
				lim := cluster.Seconds(j.limit)
				if j.unlimitedTime {
					lim = cluster.Unlimited
				}
				id, err := c.AddJob(JobSpec{Name: j.name, Nodes: j.nodes, TimeLimit: lim, RunTime: j.run, Submit: j.submit})
				if err != nil {
					t.Fatal(err)
				}
				ids[j.name] = id
			}
			if err := c.AdvanceTo(10000); err != nil {
				t.Fatal(err)
			}
			recs := c.Records()
			for _, j := range tc.jobs {
				var r Record
				for _, x := range recs {
					if x.ID == ids[j.name] {
						r = x
					}
				}
				if r.Start != j.wantStart || r.End != j.wantEnd || r.Killed != j.wantKilled {
					t.Errorf("%s: start %d end %d killed %v, want %d %d %v", j.name, r.Start, r.End, r.Killed, j.wantStart, j.wantEnd, j.wantKilled)
				}
			}
		})
	}
}

func TestSnapshotReportsTheReservationAsExpectedStart(t *testing.T) {
	c := newCluster(t, 4, 0)
	mustAdd(t, c, JobSpec{Name: "a", Nodes: 3, TimeLimit: 100, RunTime: 100})
	mustAdd(t, c, JobSpec{Name: "b", Nodes: 4, TimeLimit: 100, RunTime: 100, Submit: 1})
	mustAdd(t, c, JobSpec{Name: "c", Nodes: 2, TimeLimit: 100, RunTime: 100, Submit: 1})
	if err := c.AdvanceTo(30); err != nil {
		t.Fatal(err)
	}
	s, err := c.Snapshot(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Validate(); err != nil {
		t.Fatal(err)
	}
	if s.Now != 30 || s.IdleNodes != 1 || len(s.Jobs) != 3 {
		t.Fatalf("snapshot %+v", s)
	}
	if j := s.Jobs[0]; j.State != cluster.Running || j.RunTime != 30 || j.Name != "a" {
		t.Errorf("running job %+v", j)
	}
	if j := s.Jobs[1]; j.Name != "b" || j.State != cluster.Pending || j.ExpectedStart != 100 {
		t.Errorf("top pending job %+v, want b expected at 100", j)
	}
	if j := s.Jobs[2]; j.Name != "c" || j.ExpectedStart != 0 {
		t.Errorf("second pending job %+v", j)
	}
}

func mustAdd(t *testing.T, c *Cluster, s JobSpec) string {
	t.Helper()
	id, err := c.AddJob(s)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

func TestPilots(t *testing.T) {
	ctx := context.Background()
	spec := func(l cluster.Limit) adapters.PilotSpec {
		return adapters.PilotSpec{TimeLimit: l, Command: []string{"harvest", "pilot"}}
	}
	t.Run("a pilot's limit is rounded down to the minute and it is killed there", func(t *testing.T) {
		c := newCluster(t, 2, 0)
		id, err := c.Submit(ctx, spec(150))
		if err != nil {
			t.Fatal(err)
		}
		_ = c.AdvanceTo(1000)
		r := c.Records()[0]
		if string(id) != r.ID || !r.Pilot || r.Limit != 120 || r.Start != 0 || r.End != 120 || !r.Killed {
			t.Errorf("record %+v", r)
		}
	})
	t.Run("an unlimited pilot gets the partition's MaxTime", func(t *testing.T) {
		cfg := DefaultConfig()
		cfg.MaxTime = 3600
		c := newClusterCfg(t, cfg)
		if _, err := c.Submit(ctx, spec(cluster.Unlimited)); err != nil {
			t.Fatal(err)
		}
		s, _ := c.Snapshot(ctx)
		if s.PartitionMaxTime() != 3600 || s.Pilots()[0].TimeLimit != 3600 {
			t.Errorf("max time %v, pilot %+v", s.PartitionMaxTime(), s.Pilots()[0])
		}
		_ = c.AdvanceTo(5000)
		if r := c.Records()[0]; r.End != 3600 || !r.Killed {
			t.Errorf("record %+v", r)
		}
	})
	t.Run("a limit below the granularity is refused and nothing is submitted", func(t *testing.T) {
		c := newCluster(t, 2, 0)
		if _, err := c.Submit(ctx, spec(59)); !errors.Is(err, adapters.ErrInvalidSpec) {
			t.Fatalf("err %v", err)
		}
		if len(c.Records()) != 0 {
			t.Error("a job was created")
		}
	})
	t.Run("cancel is idempotent, stops a running pilot and refuses foreign jobs", func(t *testing.T) {
		c := newCluster(t, 2, 0)
		fid := mustAdd(t, c, JobSpec{Nodes: 1, TimeLimit: 100, RunTime: 100})
		id, _ := c.Submit(ctx, spec(cluster.Unlimited))
		_ = c.AdvanceTo(40)
		s, _ := c.Snapshot(ctx)
		if len(s.Pilots()) != 1 || s.Pilots()[0].State != cluster.Running || s.Pilots()[0].TimeLimit != cluster.Unlimited {
			t.Fatalf("pilots %+v", s.Pilots())
		}
		for range 2 {
			if err := c.Cancel(ctx, id); err != nil {
				t.Fatal(err)
			}
		}
		if err := c.Cancel(ctx, "999"); err != nil {
			t.Errorf("unknown id: %v", err)
		}
		if err := c.Cancel(ctx, adapters.PilotID(fid)); !errors.Is(err, adapters.ErrNotPilot) {
			t.Errorf("foreign job: %v", err)
		}
		r := c.Records()[1]
		if r.End != 40 || !r.Cancelled || r.Killed {
			t.Errorf("record %+v", r)
		}
		s, _ = c.Snapshot(ctx)
		if len(s.Pilots()) != 0 || s.IdleNodes != 1 {
			t.Errorf("after cancel: %+v", s)
		}
	})
}

func TestHarvestWork(t *testing.T) {
	ctx := context.Background()
	tests := []struct {
		name      string
		timeAware bool
		cancelAt  int64
		limit     cluster.Limit
		wantDone  int64
		wantLost  int64
	}{
		{name: "a time-aware pilot only takes tasks it can finish before its limit", timeAware: true, wantDone: 200, wantLost: 0},
		{name: "a pilot that is not time-aware loses the task in progress at its limit", timeAware: false, wantDone: 200, wantLost: 40},
		{name: "a cancelled pilot loses the task in progress", timeAware: true, cancelAt: 130, wantDone: 100, wantLost: 30},
		{name: "a task due exactly at the pilot's limit completes", timeAware: true, limit: 300, wantDone: 300, wantLost: 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg := DefaultConfig()
			cfg.Nodes, cfg.TimeAware = 1, tc.timeAware
			c, _ := New(cfg)
			if err := c.AddWork(Work{ID: "w", NodeSeconds: 1000, TaskSeconds: 100}); err != nil {
				t.Fatal(err)
			}
			limit := tc.limit
			if limit == 0 {
				limit = 240
			}
			id, err := c.Submit(ctx, adapters.PilotSpec{TimeLimit: limit, Command: []string{"x"}})
			if err != nil {
				t.Fatal(err)
			}
			if tc.cancelAt > 0 {
				_ = c.AdvanceTo(tc.cancelAt)
				d, busy := c.Demand()
				if !busy[string(id)] || d.RunningTasks != 1 || d.PendingTasks != 8 {
					t.Errorf("demand %+v busy %v", d, busy)
				}
				_ = c.Cancel(ctx, id)
			}
			_ = c.AdvanceTo(1000)
			w := c.WorkRecords()[0]
			if w.DoneSeconds != tc.wantDone || c.LostTaskSeconds() != tc.wantLost || w.Finish != -1 {
				t.Errorf("done %d lost %d finish %d, want %d %d -1", w.DoneSeconds, c.LostTaskSeconds(), w.Finish, tc.wantDone, tc.wantLost)
			}
			if d, _ := c.Demand(); d.PendingTasks != int(10-tc.wantDone/100) || d.RunningTasks != 0 {
				t.Errorf("lost task not requeued: %+v", d)
			}
		})
	}
}

func TestWorkFinishesAcrossPilots(t *testing.T) {
	ctx := context.Background()
	c := newCluster(t, 2, 0)
	_ = c.AddWork(Work{ID: "w", Submit: 10, NodeSeconds: 250, TaskSeconds: 100})
	for range 2 {
		if _, err := c.Submit(ctx, adapters.PilotSpec{TimeLimit: cluster.Unlimited, Command: []string{"x"}}); err != nil {
			t.Fatal(err)
		}
	}
	_ = c.AdvanceTo(500)
	// Tasks 100, 100 start at 10 on both pilots; the 50 s remainder at 110.
	if w := c.WorkRecords()[0]; w.Finish != 160 || w.DoneSeconds != 250 {
		t.Errorf("work %+v, want finish 160", w)
	}
	s := c.Samples()
	last := s[len(s)-1]
	if last.PilotIdle != 2 || last.PilotBusy != 0 || last.T != 160 {
		t.Errorf("last sample %+v", last)
	}
}

func TestStartsAndEndsAreObservedInOrder(t *testing.T) {
	c := newCluster(t, 2, 0)
	var seen []string
	c.OnStartEnd(func(r Record) {
		ev := "start"
		if r.End >= 0 {
			ev = "end"
		}
		seen = append(seen, fmt.Sprintf("%s %s@%d", ev, r.Name, max(r.Start, r.End)))
	})
	mustAdd(t, c, JobSpec{Name: "a", Nodes: 2, TimeLimit: 100, RunTime: 50})
	mustAdd(t, c, JobSpec{Name: "b", Nodes: 1, TimeLimit: 100, RunTime: 200, Submit: 10})
	_ = c.AdvanceTo(1000)
	want := "start a@0,end a@50,start b@50,end b@150"
	if got := strings.Join(seen, ","); got != want {
		t.Errorf("observed %s, want %s", got, want)
	}
}

func TestSnapshotsNameJobsByTheWorkloadsIDs(t *testing.T) {
	ctx := context.Background()
	c := newCluster(t, 4, 0)
	a := mustAdd(t, c, JobSpec{Name: "6556", User: "u7", Nodes: 4, TimeLimit: 100, RunTime: 100})
	b := mustAdd(t, c, JobSpec{Name: "6556", Nodes: 4, TimeLimit: 100, RunTime: 100})
	p, err := c.Submit(ctx, adapters.PilotSpec{TimeLimit: 600, Command: []string{"harvest", "pilot"}})
	if err != nil {
		t.Fatal(err)
	}
	if a != "6556" || b != "6556#2" || p != "pilot-3" {
		t.Fatalf("ids %q %q %q, want the workload's id, a unique variant of it, pilot-3", a, b, p)
	}
	advance(t, c, 0)
	s, _ := c.Snapshot(ctx)
	users := map[string]string{}
	for _, j := range s.Jobs {
		users[j.ID] = j.User
	}
	if len(users) != 3 || users["6556"] != "u7" || users["6556#2"] != "user" || users["pilot-3"] != "harvest" {
		t.Fatalf("snapshot ids and users %v", users)
	}
	if err := c.Cancel(ctx, adapters.PilotID(a)); !errors.Is(err, adapters.ErrNotPilot) {
		t.Fatalf("cancelling a foreign job by its workload id: %v", err)
	}
	if err := c.Cancel(ctx, p); err != nil {
		t.Fatal(err)
	}
	if r := c.Records()[2]; !r.Cancelled || r.ID != "pilot-3" {
		t.Fatalf("pilot record %+v", r)
	}
}

// Under contention a task that starts while more than Contention tasks
// run is stretched in proportion; the master hears each task's run time
// and the pool size it started at.
func TestTasksSlowDownPastTheContention(t *testing.T) {
	ctx := context.Background()
	cfg := DefaultConfig()
	cfg.Nodes, cfg.Contention = 4, 2
	c, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	c.WatchTasks()
	_ = c.AddWork(Work{ID: "w", NodeSeconds: 400, TaskSeconds: 100})
	for range 4 {
		if _, err := c.Submit(ctx, adapters.PilotSpec{TimeLimit: cluster.Unlimited, Command: []string{"x"}}); err != nil {
			t.Fatal(err)
		}
	}
	_ = c.AdvanceTo(1000)
	// The four pilots start at once, one after the other, each taking a
	// task as it starts: tasks 1 and 2 run at full speed, task 3 starts
	// with 3 running (150 s), task 4 with 4 (200 s).
	runs := c.TaskRuns()
	slices.SortFunc(runs, func(a, b TaskRun) int { return a.Size - b.Size })
	want := []TaskRun{{"w", 1, 100}, {"w", 2, 100}, {"w", 3, 150}, {"w", 4, 200}}
	if !slices.Equal(runs, want) {
		t.Fatalf("runs %+v, want %+v", runs, want)
	}
	if w := c.WorkRecords()[0]; w.DoneSeconds != 400 || w.Finish != 200 {
		t.Fatalf("work %+v: the work done is the tasks' length, finishing at 200", w)
	}
	if len(c.TaskRuns()) != 0 {
		t.Fatal("TaskRuns returned the same runs twice")
	}
	if err := (Config{Nodes: 1, Granularity: 1, Reservations: 1, Contention: -1}).Validate(); err == nil {
		t.Fatal("a negative contention was accepted")
	}
}

func TestFinishedPilotsKeepTheirWholeRecord(t *testing.T) {
	// Finished pilots are kept compact (retire); their records must read
	// back as they were when they ended: killed, cancelled (running and
	// pending), preempted, shrunk, unlimited.
	ctx := context.Background()
	cfg := DefaultConfig()
	cfg.Nodes, cfg.Preemption = 3, true
	c, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	atEnd := map[string]Record{}
	c.OnStartEnd(func(r Record) {
		if r.End >= 0 {
			atEnd[r.ID] = r
		}
	})
	submit := func(l cluster.Limit, preemptible bool) string {
		id, err := c.Submit(ctx, adapters.PilotSpec{TimeLimit: l, Preemptible: preemptible, Command: []string{"harvest", "pilot"}})
		if err != nil {
			t.Fatal(err)
		}
		return string(id)
	}
	killed := submit(120, false)
	cancelled := submit(cluster.Unlimited, false)
	shrunk := submit(600, false)
	_ = c.AdvanceTo(10)
	pending := submit(60, false) // no node left: cancelled while pending
	if err := c.Cancel(ctx, adapters.PilotID(cancelled)); err != nil {
		t.Fatal(err)
	}
	if err := c.Cancel(ctx, adapters.PilotID(pending)); err != nil {
		t.Fatal(err)
	}
	if err := c.Shrink(ctx, adapters.PilotID(shrunk), 300); err != nil {
		t.Fatal(err)
	}
	_ = c.AdvanceTo(200)
	preempted := submit(3600, true)
	_ = c.AdvanceTo(210)
	if _, err := c.AddJob(JobSpec{Name: "f", Nodes: 3, TimeLimit: 100, RunTime: 50, Submit: 210}); err != nil {
		t.Fatal(err)
	}
	_ = c.AdvanceTo(1000)
	recs := c.Records()
	byID := map[string]Record{}
	for _, r := range recs {
		byID[r.ID] = r
	}
	pendingRec := byID[pending]
	if !pendingRec.Cancelled || pendingRec.Start != -1 || pendingRec.Limit != 60 || pendingRec.User != "harvest" || pendingRec.Label != "pilot" {
		t.Errorf("pilot cancelled while pending: %+v", pendingRec)
	}
	for _, id := range []string{killed, cancelled, shrunk, preempted} {
		if byID[id] != atEnd[id] {
			t.Errorf("pilot %s: record %+v, at its end %+v", id, byID[id], atEnd[id])
		}
	}
	if r := byID[killed]; !r.Killed || r.End != 120 {
		t.Errorf("killed %+v", r)
	}
	if r := byID[cancelled]; !r.Cancelled || !r.Limit.IsUnlimited() {
		t.Errorf("cancelled %+v", r)
	}
	if r := byID[shrunk]; !r.Shrunk || r.End != 300 {
		t.Errorf("shrunk %+v", r)
	}
	if r := byID[preempted]; !r.Preempted {
		t.Errorf("preempted %+v", r)
	}
	if c.jobs[0] != nil || len(c.byID) != 1 {
		t.Errorf("finished pilots are still held whole: jobs[0] %v, %d ids", c.jobs[0], len(c.byID))
	}
}

// Pilots hold the nodes a wide job T waits for; a running job ends early
// and the agent cancels the pilots 5 s later. SLURM's main scheduler runs at
// the end, meets T first and starts nothing, so the released nodes go to T
// at the cancel; a scheduler that backfills at every pass starts the
// smaller L in the second the job ended (it fits before the pilots' limits),
// and T waits for it (issue 33: KTH job 4514).
func TestReleasedPilotsGoToTheTopJobAsInSLURM(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name         string
		bf           int64
		wantT, wantL int64
	}{
		{name: "every pass backfills", bf: 0, wantT: 200, wantL: 100},
		{name: "main scheduler at every change, backfill every 30 s", bf: 30, wantT: 105, wantL: 205},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := DefaultConfig()
			cfg.Nodes, cfg.BackfillInterval, cfg.BackfillBusy = 4, tc.bf, tc.bf > 0
			c := newClusterCfg(t, cfg)
			mustAdd(t, c, JobSpec{Name: "A", Nodes: 2, TimeLimit: 1000, RunTime: 100})
			var pilots []adapters.PilotID
			for range 2 {
				id, err := c.Submit(ctx, adapters.PilotSpec{TimeLimit: 600, Command: []string{"harvest", "pilot"}})
				if err != nil {
					t.Fatal(err)
				}
				pilots = append(pilots, id)
			}
			tid := mustAdd(t, c, JobSpec{Name: "T", Nodes: 4, TimeLimit: 100, RunTime: 100, Submit: 10})
			lid := mustAdd(t, c, JobSpec{Name: "L", Nodes: 2, TimeLimit: 300, RunTime: 100, Submit: 20})
			if err := c.AdvanceTo(105); err != nil {
				t.Fatal(err)
			}
			for _, id := range pilots {
				if err := c.Cancel(ctx, id); err != nil {
					t.Fatal(err)
				}
			}
			if err := c.AdvanceTo(2000); err != nil {
				t.Fatal(err)
			}
			start := map[string]int64{}
			for _, r := range c.Records() {
				start[r.ID] = r.Start
			}
			if start[tid] != tc.wantT || start[lid] != tc.wantL {
				t.Errorf("T started at %d, L at %d; want %d and %d", start[tid], start[lid], tc.wantT, tc.wantL)
			}
		})
	}
}

func TestBackfillIntervalIsValidated(t *testing.T) {
	cfg := DefaultConfig()
	cfg.BackfillInterval = -1
	if err := cfg.Validate(); !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), "backfill interval") {
		t.Errorf("a negative backfill interval: err %v", err)
	}
	cfg.BackfillInterval, cfg.BackfillBusy = 0, true
	if err := cfg.Validate(); !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), "busy backfill") {
		t.Errorf("a busy backfill thread without an interval: err %v", err)
	}
	cfg.BackfillInterval = 30
	if err := cfg.Validate(); err != nil {
		t.Errorf("a busy 30 s backfill thread was refused: %v", err)
	}
}
