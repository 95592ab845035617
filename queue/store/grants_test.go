package store

import (
	"github.com/harvest-hpc/harvest/internal/pgtest"

	"context"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"testing"
	"time"

	"github.com/harvest-hpc/harvest/pilotproto"
)

var t0 = time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)

// openWithJob opens a store with one master (epoch 1) and a job of n
// tasks named t000.. .
func openWithJob(t *testing.T, path string, n int) (*Store, int64) {
	t.Helper()
	s, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, d, err := s.DecideLease(ctx, "local", pilotproto.LeaseRequest{PilotID: "p1"}, t0, time.Hour); err != nil || d.Next.Epoch != 1 {
		t.Fatalf("lease: %+v %v", d, err)
	}
	id, err := s.CreateJob(ctx, NewJob{Owner: "alice", Dataset: "/d", Command: []string{"p"}, BatchSize: 1, Price: 1, Cores: 1, MaxAttempts: 3, Submitted: t0, Expires: t0.Add(time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	names := make([]string, n)
	for i := range names {
		names[i] = fmt.Sprintf("t%03d", i)
	}
	if err := s.InsertTasks(ctx, id, names, 100, nil); err != nil {
		t.Fatal(err)
	}
	if err := s.ActivateJob(ctx, id, "/o", n); err != nil {
		t.Fatal(err)
	}
	return s, id
}

func take(t *testing.T, s *Store, job int64, n int) []TakenTask {
	t.Helper()
	return takeIn(t, s, "local", job, n)
}

// takeIn hands tasks out to the master of pool (epoch 1).
func takeIn(t *testing.T, s *Store, pool string, job int64, n int) []TakenTask {
	t.Helper()
	got, err := s.Assign(context.Background(), pool, 1, t0, map[int64]int{job: n})
	if err != nil {
		t.Fatal(err)
	}
	return got.Tasks[job]
}

func reportIn(t *testing.T, s *Store, pool, status string, ts ...TakenTask) Applied {
	t.Helper()
	var rs []pilotproto.Result
	for _, tk := range ts {
		rs = append(rs, pilotproto.Result{TaskID: tk.ID, Attempt: tk.Attempt, Status: status, StartedAt: 1, DurationMS: 1000, Pilot: "p1"})
	}
	a, err := s.ApplyResults(context.Background(), pool, 1, t0, rs)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// tableState reads what the database file says of the job's tasks, the
// job's counters and the results, through a connection of its own.
func tableState(t *testing.T, s *Store, job int64) string {
	t.Helper()
	var out string
	rows, err := s.r.Query(`SELECT name, state, attempt, tries FROM tasks WHERE job_id = $1 ORDER BY id`, job)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var n, st string
		var a, tr int
		rows.Scan(&n, &st, &a, &tr)
		out += fmt.Sprintf("%s:%s/%d/%d ", n, st, a, tr)
	}
	rows.Close()
	var st string
	var w, a, d, f int
	s.r.QueryRow(`SELECT state, n_waiting, n_active, n_done, n_failed FROM `+jobsCounted+` WHERE id = ?`, job).Scan(&st, &w, &a, &d, &f)
	var pd int
	s.r.QueryRow(`SELECT coalesce(sum(done), 0) FROM grants WHERE job_id = $1`, job).Scan(&pd)
	return out + fmt.Sprintf("| job %s w%d a%d d%d f%d | pool done %d", st, w, a, d, f, pd)
}

// A history of hand-outs, results (done, failed, interrupted, repeated),
// heartbeats, zombie and expiry sweeps and restarts keeps every counter
// equal to what the entries' derived states say (the tasks view), the
// per-pool figures equal to the done entries, and Outstanding equal to
// the open entries of each pool.
func TestRandomHistoriesKeepCountersAndEntriesInStep(t *testing.T) {
	for seed := uint64(1); seed <= 40; seed++ {
		r := rand.New(rand.NewPCG(seed, 3))
		path := pgtest.DB(t, filepath.Join(t.TempDir(), "q.db"))
		s, job := openWithJob(t, path, 30)
		ctx := context.Background()
		pools := []string{"local", "b"}
		if _, d, err := s.DecideLease(ctx, "b", pilotproto.LeaseRequest{PilotID: "pb"}, t0, time.Hour); err != nil || d.Next.Epoch != 1 {
			t.Fatalf("lease b: %+v %v", d, err)
		}
		held := map[string][]TakenTask{} // handed out, no result yet, per pool
		for step := 0; step < 60; step++ {
			pool := pools[r.IntN(2)]
			switch k := r.IntN(11); {
			case k < 3:
				held[pool] = append(held[pool], takeIn(t, s, pool, job, 1+r.IntN(5))...)
			case k < 6 && len(held[pool]) > 0:
				h := held[pool]
				n := 1 + r.IntN(len(h))
				r.Shuffle(len(h), func(i, j int) { h[i], h[j] = h[j], h[i] })
				status := []string{pilotproto.StatusDone, pilotproto.StatusDone, pilotproto.StatusFailed, pilotproto.StatusInterrupted}[r.IntN(4)]
				reportIn(t, s, pool, status, h[:n]...)
				if r.IntN(3) == 0 { // the same results again: duplicates
					if a := reportIn(t, s, pool, status, h[:n]...); len(a.Outcomes) != 0 {
						t.Fatalf("seed %d step %d: a repeated report applied %d results", seed, step, len(a.Outcomes))
					}
				}
				held[pool] = h[n:]
			case k == 6 && len(held[pool]) > 0:
				var refs []pilotproto.TaskRef
				for _, h := range held[pool] {
					refs = append(refs, pilotproto.TaskRef{TaskID: h.ID, Attempt: h.Attempt})
				}
				if err := s.Heartbeat(ctx, pool, 1, t0.Add(time.Duration(step)*time.Minute), time.Hour, pilotproto.RangesOf(refs)); err != nil {
					t.Fatal(err)
				}
			case k == 7:
				if _, _, err := s.ExpireZombies(ctx, t0.Add(time.Duration(step)*time.Minute), t0, 100); err != nil {
					t.Fatal(err)
				}
			case k == 8:
				if _, err := s.MarkZombies(ctx, t0.Add(time.Duration(step)*time.Minute), 100); err != nil {
					t.Fatal(err)
				}
			case k == 9:
				if _, err := s.Job(ctx, job); err != nil {
					t.Fatal(err)
				}
			case k == 10: // a restart
				if err := s.Close(); err != nil {
					t.Fatal(err)
				}
				var err error
				if s, err = Open(path); err != nil {
					t.Fatal(err)
				}
			}
			j, err := s.Job(ctx, job)
			if err != nil {
				t.Fatal(err)
			}
			perPool, err := s.JobPools(ctx, job)
			if err != nil {
				t.Fatal(err)
			}
			out, err := s.Outstanding(ctx)
			if err != nil {
				t.Fatal(err)
			}
			var w, a, d, f, tot int
			s.r.QueryRow(`SELECT count(*), count(CASE WHEN state = 'WAITING' THEN 1 END), count(CASE WHEN state IN ('ASSIGNED', 'RUNNING', 'ZOMBIE') THEN 1 END), count(CASE WHEN state = 'DONE' THEN 1 END), count(CASE WHEN state IN ('ERROR_E', 'EXPIRED') THEN 1 END) FROM tasks WHERE job_id = $1`, job).Scan(&tot, &w, &a, &d, &f)
			if tot != 30 || j.Tasks.Waiting != w || j.Tasks.Running != a || j.Tasks.Done != d || j.Tasks.Failed != f {
				t.Fatalf("seed %d step %d: job counters %+v, %d entries say waiting %d active %d done %d failed %d (%s)", seed, step, j.Tasks, tot, w, a, d, f, tableState(t, s, job))
			}
			if perPool["local"][0]+perPool["b"][0] != d {
				t.Fatalf("seed %d step %d: %v done attempts counted per pool, %d tasks done", seed, step, perPool, d)
			}
			for _, p := range pools {
				var n int
				s.r.QueryRow(`SELECT count(*) FROM tasks WHERE pool = $1 AND state IN ('ASSIGNED', 'RUNNING', 'ZOMBIE')`, p).Scan(&n)
				if out[p] != n {
					t.Fatalf("seed %d step %d: pool %s holds %d active entries, Outstanding says %v", seed, step, p, n, out)
				}
			}
		}
		s.Close()
	}
}

// One pull over several jobs with retries hands each job its retries of
// lowest index first (attempt 2), up to what it asks for, then its fresh
// entries; a job's retries left over wait for the next pull.
func TestOnePullHandsOutTheRetriesOfSeveralJobs(t *testing.T) {
	s, a := openWithJob(t, pgtest.DB(t, filepath.Join(t.TempDir(), "q.db")), 6)
	defer s.Close()
	ctx := context.Background()
	b := job(t, s, t0, "u0", "u1", "u2", "u3")
	ta, tb := take(t, s, a, 4), take(t, s, b, 3)
	reportIn(t, s, "local", pilotproto.StatusFailed, ta[1], ta[2], ta[3])
	reportIn(t, s, "local", pilotproto.StatusFailed, tb[0], tb[2])
	got, err := s.Assign(ctx, "local", 1, t0, map[int64]int{a: 2, b: 3})
	if err != nil {
		t.Fatal(err)
	}
	str := func(ts []TakenTask) string {
		out := ""
		for _, tk := range ts {
			out += fmt.Sprintf("%s/%d ", tk.Name, tk.Attempt)
		}
		return out
	}
	if g := str(got.Tasks[a]); g != "t001/2 t002/2 " {
		t.Errorf("job a: %s", g)
	}
	if g := str(got.Tasks[b]); g != "u0/2 u2/2 u3/1 " {
		t.Errorf("job b: %s", g)
	}
	if g := str(take(t, s, a, 3)); g != "t003/2 t004/1 t005/1 " {
		t.Errorf("job a, next pull: %s", g)
	}
}

// A heartbeat's range renews every grant of its job and attempt that holds
// an entry of the range open, one row per range: a range across two
// grants renews both; a range of settled entries renews none, and the
// grant's other open entries stay as they were.
func TestAHeartbeatRangeRenewsTheGrantsItOverlaps(t *testing.T) {
	s, id := openWithJob(t, pgtest.DB(t, filepath.Join(t.TempDir(), "q.db")), 10)
	defer s.Close()
	ctx := context.Background()
	g1, g2 := take(t, s, id, 4), take(t, s, id, 4) // grants 0..3 and 4..7
	reportIn(t, s, "local", pilotproto.StatusDone, g1[0], g1[1])
	state := func(tk TakenTask) string {
		var st string
		s.r.QueryRow(`SELECT state FROM tasks WHERE id = $1`, tk.ID).Scan(&st)
		return st
	}
	// Entries 0..1 are done: a range of them renews nothing.
	if err := s.Heartbeat(ctx, "local", 1, t0, time.Hour, []pilotproto.TaskRange{{First: g1[0].ID, Last: g1[1].ID, Attempt: 1}}); err != nil {
		t.Fatal(err)
	}
	if st := state(g1[2]); st != "ASSIGNED" {
		t.Fatalf("a range of settled entries renewed their grant: %s", st)
	}
	// Entries 3..4: the end of one grant and the start of the next.
	if err := s.Heartbeat(ctx, "local", 1, t0, time.Hour, []pilotproto.TaskRange{{First: g1[3].ID, Last: g2[0].ID, Attempt: 1}}); err != nil {
		t.Fatal(err)
	}
	if a, b := state(g1[2]), state(g2[3]); a != "RUNNING" || b != "RUNNING" {
		t.Fatalf("after a range across two grants: %s %s", a, b)
	}
	// Another attempt's range names no grant of attempt 1.
	if err := s.Heartbeat(ctx, "local", 1, t0, time.Hour, []pilotproto.TaskRange{{First: g2[0].ID, Last: g2[3].ID, Attempt: 2}}); err != nil {
		t.Fatal(err)
	}
	var n int
	s.r.QueryRow(`SELECT count(*) FROM grants WHERE job_id = $1 AND state = 'RUNNING'`, id).Scan(&n)
	if n != 2 {
		t.Fatalf("%d grants RUNNING, want 2", n)
	}
}
