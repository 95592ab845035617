package store

import (
	"context"
	"database/sql"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/harvest-hpc/harvest/pilotproto"
	"github.com/harvest-hpc/harvest/queue/api"
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
	if err := s.InsertTasks(ctx, id, names, t0, 100, nil); err != nil {
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
	got, err := s.Assign(context.Background(), pool, 1, t0, []Take{{Job: job, N: n}})
	if err != nil {
		t.Fatal(err)
	}
	return got.Tasks[job]
}

func names(ts []TakenTask) []string {
	var out []string
	for _, t := range ts {
		out = append(out, t.Name)
	}
	return out
}

func report(t *testing.T, s *Store, status string, ts ...TakenTask) Applied {
	t.Helper()
	return reportIn(t, s, "local", status, ts...)
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
	rows, err := s.r.Query(`SELECT name, state, attempt, tries FROM tasks WHERE job_id = ? ORDER BY id`, job)
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
	s.r.QueryRow(`SELECT state, n_waiting, n_active, n_done, n_failed FROM jobs WHERE id = ?`, job).Scan(&st, &w, &a, &d, &f)
	var res, pd int
	s.r.QueryRow(`SELECT count(*) FROM results`).Scan(&res)
	s.r.QueryRow(`SELECT coalesce(sum(done), 0) FROM job_pools WHERE job_id = ?`, job).Scan(&pd)
	return out + fmt.Sprintf("| job %s w%d a%d d%d f%d | results %d, pool done %d", st, w, a, d, f, res, pd)
}

func journalRows(t *testing.T, s *Store) int {
	t.Helper()
	var n int
	if err := s.r.QueryRow(`SELECT count(*) FROM journal`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// work runs the same hot-path history on a store: hand-outs, done,
// failed (requeued, counted), interrupted (requeued), a heartbeat and a
// duplicate.
func work(t *testing.T, s *Store, job int64) {
	t.Helper()
	ctx := context.Background()
	a := take(t, s, job, 4)
	report(t, s, pilotproto.StatusDone, a[0], a[1])
	report(t, s, pilotproto.StatusFailed, a[2])
	if _, err := s.Heartbeat(ctx, "local", 1, t0, time.Hour, []pilotproto.TaskRef{{TaskID: a[3].ID, Attempt: a[3].Attempt}}); err != nil {
		t.Fatal(err)
	}
	report(t, s, pilotproto.StatusInterrupted, a[3])
	if d := report(t, s, pilotproto.StatusDone, a[0]); d.Duplicates != 1 || d.Applied != 0 {
		t.Fatalf("a result reported twice: %+v, want one duplicate", d)
	}
	b := take(t, s, job, 3)
	report(t, s, pilotproto.StatusDone, b...)
}

// A kill -9 loses the overlay, not the journal: the next Open replays it
// and the tables say what a clean close would have left.
func TestTheJournalReplaysWhatAKillLeftUnfolded(t *testing.T) {
	dir := t.TempDir()
	clean, cj := openWithJob(t, filepath.Join(dir, "clean.db"), 6)
	work(t, clean, cj)
	if err := clean.Settle(context.Background()); err != nil {
		t.Fatal(err)
	}
	want := tableState(t, clean, cj)
	clean.Close()

	path := filepath.Join(dir, "killed.db")
	s, job := openWithJob(t, path, 6)
	work(t, s, job)
	if n := journalRows(t, s); n == 0 {
		t.Fatal("nothing in the journal before the kill: the test would not test the replay")
	}
	if got := tableState(t, s, job); got == want {
		t.Fatalf("the tables already show every change before the kill: the test would not test the replay\n%s", got)
	}
	s.kill()
	s2, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	if got := tableState(t, s2, job); got != want {
		t.Fatalf("after the replay:\n%s\nwant (a clean run):\n%s", got, want)
	}
	if n := journalRows(t, s2); n != 0 {
		t.Fatalf("%d journal rows left after the replay", n)
	}
	// The replayed store goes on where the killed one stopped: the one
	// task never handed out, nothing twice.
	c := take(t, s2, job, 10)
	if got := names(c); !slices.Equal(got, []string{"t005"}) {
		t.Fatalf("after the replay the pull gave %v, want the last waiting task t005", got)
	}
}

// Within a job the lowest waiting id goes first, whether it waits in the
// overlay (requeued), in the ids read ahead or in the table's index.
func TestRequeuedTasksGoBackInIDOrder(t *testing.T) {
	s, job := openWithJob(t, filepath.Join(t.TempDir(), "q.db"), 40)
	defer s.Close()
	a := take(t, s, job, 3) // t000 t001 t002; more ids are read ahead
	report(t, s, pilotproto.StatusInterrupted, a[1])
	if got := names(take(t, s, job, 2)); !slices.Equal(got, []string{"t001", "t003"}) {
		t.Fatalf("got %v, want the requeued t001 then t003", got)
	}
	// Past the ids read ahead: the index is asked again.
	if got := names(take(t, s, job, 30)); len(got) != 30 || got[0] != "t004" || got[29] != "t033" {
		t.Fatalf("got %v, want t004..t033", got)
	}
	j, err := s.Job(context.Background(), job)
	if err != nil || j.Tasks.Waiting != 6 || j.Tasks.Running != 34 {
		t.Fatalf("job counters %+v %v, want 6 waiting, 34 running", j.Tasks, err)
	}
}

// A cold write empties the overlay; a task then read back from the table
// (its result) and requeued sits above the job's cursor, while a lower id
// waits in the table: the index is asked all the same.
func TestATaskRequeuedAfterAColdWriteKeepsIDOrder(t *testing.T) {
	s, job := openWithJob(t, filepath.Join(t.TempDir(), "q.db"), 10)
	defer s.Close()
	ctx := context.Background()
	a := take(t, s, job, 3)
	report(t, s, pilotproto.StatusKilled, a[1])                            // t001 requeued
	if _, err := s.MarkZombies(ctx, t0.Add(-time.Hour), 100); err != nil { // a cold write: folds, empties the overlay
		t.Fatal(err)
	}
	if len(s.ov.tasks)+len(s.ov.ahead)+len(s.ov.cursor) != 0 {
		t.Fatalf("the overlay holds %d tasks, %d read-ahead lists, %d cursors after a cold write", len(s.ov.tasks), len(s.ov.ahead), len(s.ov.cursor))
	}
	report(t, s, pilotproto.StatusKilled, a[2]) // t002 requeued in the overlay, above cursor 0
	if got := names(take(t, s, job, 1)); !slices.Equal(got, []string{"t001"}) {
		t.Fatalf("got %v, want t001 (waiting in the table, below the requeued t002)", got)
	}
	if got := names(take(t, s, job, 2)); !slices.Equal(got, []string{"t002", "t003"}) {
		t.Fatalf("got %v, want t002 t003", got)
	}
}

// A refused write (a stale epoch) leaves nothing behind: no journal row,
// no change in memory, and the next hand-out gives the same tasks.
func TestARefusedHotWriteChangesNothing(t *testing.T) {
	s, job := openWithJob(t, filepath.Join(t.TempDir(), "q.db"), 5)
	defer s.Close()
	ctx := context.Background()
	if _, err := s.Assign(ctx, "local", 7, t0, []Take{{Job: job, N: 2}}); err == nil {
		t.Fatal("a hand-out under an epoch never granted was accepted")
	}
	if _, err := s.ApplyResults(ctx, "local", 7, t0, []pilotproto.Result{{TaskID: 1, Attempt: 1, Status: pilotproto.StatusDone}}); err == nil {
		t.Fatal("results under an epoch never granted were accepted")
	}
	if n := journalRows(t, s); n != 0 || s.ov.dirty != 0 {
		t.Fatalf("refused writes left %d journal rows, %d dirty rows", n, s.ov.dirty)
	}
	if got := names(take(t, s, job, 2)); !slices.Equal(got, []string{"t000", "t001"}) {
		t.Fatalf("got %v, want t000 t001", got)
	}
}

// The folder writes only rows older than foldAge and trims the journal up
// to the oldest row still dirty; a settle writes everything and empties
// it.
func TestFoldsWriteOldRowsAndTrimTheJournal(t *testing.T) {
	s, job := openWithJob(t, filepath.Join(t.TempDir(), "q.db"), 6)
	defer s.Close()
	a := take(t, s, job, 2)
	age := func() {
		s.hot.Lock()
		defer s.hot.Unlock()
		for _, r := range s.ov.tasks {
			r.since -= int64(2 * foldAge)
		}
		for _, r := range s.ov.jobs {
			r.since -= int64(2 * foldAge)
		}
	}
	state := func(id int64) string {
		var st string
		s.r.QueryRow(`SELECT state FROM tasks WHERE id = ?`, id).Scan(&st)
		return st
	}
	age()
	s.foldCycle(true)
	if state(a[0].ID) != "ASSIGNED" || state(a[1].ID) != "ASSIGNED" || journalRows(t, s) != 0 {
		t.Fatalf("after a fold of old rows: %s %s, %d journal rows; want ASSIGNED ASSIGNED, 0", state(a[0].ID), state(a[1].ID), journalRows(t, s))
	}
	b := take(t, s, job, 1)                   // young
	report(t, s, pilotproto.StatusDone, a[0]) // young again
	s.foldCycle(true)
	if state(a[0].ID) != "ASSIGNED" || state(b[0].ID) != "WAITING" {
		t.Fatalf("a fold wrote young rows: %s %s, want ASSIGNED WAITING (as before)", state(a[0].ID), state(b[0].ID))
	}
	if n := journalRows(t, s); n != 2 {
		t.Fatalf("%d journal rows while two changes are unfolded, want 2", n)
	}
	if err := s.Settle(context.Background()); err != nil {
		t.Fatal(err)
	}
	if state(a[0].ID) != "DONE" || state(b[0].ID) != "ASSIGNED" || journalRows(t, s) != 0 || s.ov.dirty != 0 {
		t.Fatalf("after a settle: %s %s, %d journal rows, %d dirty; want DONE ASSIGNED 0 0", state(a[0].ID), state(b[0].ID), journalRows(t, s), s.ov.dirty)
	}
}

// kill drops the store as a kill -9 would: the overlay is lost, nothing
// is folded; what was committed (the journal) stays.
func (s *Store) kill() {
	close(s.stop)
	<-s.folderDone
	s.stopBg()
	for _, st := range s.stmts {
		st.Close()
	}
	s.ck.Close()
	s.r.Close()
	s.w.Close()
}

// A job's page (Job, JobPools, ListJobs) shows the hot path's changes
// without folding them: a user polling their job does not make the
// master wait for a fold.
func TestJobReadsSeeTheOverlayWithoutAFold(t *testing.T) {
	s, job := openWithJob(t, filepath.Join(t.TempDir(), "q.db"), 4)
	defer s.Close()
	ctx := context.Background()
	a := take(t, s, job, 3)
	report(t, s, pilotproto.StatusDone, a[0], a[1])
	before := journalRows(t, s)
	j, err := s.Job(ctx, job)
	if err != nil || j.State != "RUNNING" || j.Tasks.Waiting != 1 || j.Tasks.Running != 1 || j.Tasks.Done != 2 || j.StartedAt == 0 {
		t.Fatalf("job %+v %v, want RUNNING, 1 waiting, 1 running, 2 done, started", j, err)
	}
	list, err := s.ListJobs(ctx, "", "", 1<<62, 10)
	if err != nil || len(list) != 1 || list[0].Tasks.Done != 2 {
		t.Fatalf("list %+v %v, want the job with 2 done", list, err)
	}
	pools, err := s.JobPools(ctx, job)
	if err != nil || pools["local"] != [2]int{2, 0} {
		t.Fatalf("pools %v %v, want local 2 done", pools, err)
	}
	if n := journalRows(t, s); n != before || n == 0 {
		t.Fatalf("the reads folded the journal (%d rows, %d before)", n, before)
	}
}

// Random hot-path histories, with background folds of old rows, reads'
// folds and cold writes in between, keep the job's counters equal to its
// tasks' states and the per-pool done count equal to its done tasks.
func TestRandomHistoriesKeepCountersAndTasksInStep(t *testing.T) {
	for seed := uint64(1); seed <= 40; seed++ {
		r := rand.New(rand.NewPCG(seed, 3))
		path := filepath.Join(t.TempDir(), "q.db")
		s, job := openWithJob(t, path, 30)
		ctx := context.Background()
		// Two pools, so that the per-pool counts of active tasks
		// (Outstanding, kept in memory) can be told apart.
		pools := []string{"local", "b"}
		if seed%2 == 1 {
			s.SetHeartbeatJournal(time.Hour) // heartbeats of running tasks in memory only
		}
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
					reportIn(t, s, pool, status, h[:n]...)
				}
				held[pool] = h[n:]
			case k == 6 && len(held[pool]) > 0:
				var refs []pilotproto.TaskRef
				for _, h := range held[pool] {
					refs = append(refs, pilotproto.TaskRef{TaskID: h.ID, Attempt: h.Attempt})
				}
				if _, err := s.Heartbeat(ctx, pool, 1, t0, time.Hour, refs); err != nil {
					t.Fatal(err)
				}
			case k == 7:
				s.hot.Lock()
				for _, x := range s.ov.tasks {
					x.since -= int64(2 * foldAge)
				}
				for _, x := range s.ov.jobs {
					x.since -= int64(2 * foldAge)
				}
				for _, x := range s.ov.results {
					x.since -= int64(2 * foldAge)
				}
				s.hot.Unlock()
				s.foldCycle(true)
			case k == 8:
				if _, err := s.MarkZombies(ctx, t0.Add(-time.Hour), 100); err != nil {
					t.Fatal(err)
				}
			case k == 9:
				if _, err := s.Job(ctx, job); err != nil {
					t.Fatal(err)
				}
			case k == 10: // a restart: the counts are read again at Open
				if err := s.Close(); err != nil {
					t.Fatal(err)
				}
				var err error
				if s, err = Open(path); err != nil {
					t.Fatal(err)
				}
				if seed%2 == 1 {
					s.SetHeartbeatJournal(time.Hour)
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
			out, err := s.Outstanding(ctx) // from memory, before any fold
			if err != nil {
				t.Fatal(err)
			}
			if err := s.Settle(ctx); err != nil {
				t.Fatal(err)
			}
			var w, a, d, f int
			s.r.QueryRow(`SELECT sum(state = 'WAITING'), sum(state IN ('ASSIGNED', 'RUNNING', 'ZOMBIE')), sum(state = 'DONE'), sum(state = 'ERROR_E') FROM tasks WHERE job_id = ?`, job).Scan(&w, &a, &d, &f)
			if j.Tasks.Waiting != w || j.Tasks.Running != a || j.Tasks.Done != d || j.Tasks.Failed != f {
				t.Fatalf("seed %d step %d: job counters %+v, tasks say waiting %d active %d done %d failed %d", seed, step, j.Tasks, w, a, d, f)
			}
			if perPool["local"][0]+perPool["b"][0] != d {
				t.Fatalf("seed %d step %d: %v done attempts counted per pool, %d tasks done", seed, step, perPool, d)
			}
			for _, p := range pools {
				var n int
				s.r.QueryRow(`SELECT count(*) FROM tasks WHERE pool = ? AND state IN ('ASSIGNED', 'RUNNING', 'ZOMBIE')`, p).Scan(&n)
				if out[p] != n {
					t.Fatalf("seed %d step %d: pool %s holds %d active tasks in the table, Outstanding says %v", seed, step, p, n, out)
				}
			}
		}
		s.Close()
	}
}

// A RUNNING task's heartbeat within the journal interval of its last
// journalled one moves in memory only; the sweeps still judge it by the
// newest (a cold write writes the times first), and so does the table
// after a close.
func TestQuietHeartbeatsMoveInMemoryAndReachTheSweeps(t *testing.T) {
	path := filepath.Join(t.TempDir(), "q.db")
	s, job := openWithJob(t, path, 4)
	ctx := context.Background()
	s.SetHeartbeatJournal(time.Minute)
	held := take(t, s, job, 2)
	var refs []pilotproto.TaskRef
	for _, h := range held {
		refs = append(refs, pilotproto.TaskRef{TaskID: h.ID, Attempt: h.Attempt})
	}
	beat := func(at time.Duration, journalled bool) {
		t.Helper()
		before := journalRows(t, s)
		if _, err := s.Heartbeat(ctx, "local", 1, t0.Add(at), time.Hour, refs); err != nil {
			t.Fatal(err)
		}
		if got := journalRows(t, s) - before; got != map[bool]int{true: 1, false: 0}[journalled] {
			t.Fatalf("heartbeat at +%v wrote %d journal entries, journalled: %v", at, got, journalled)
		}
	}
	beat(time.Second, true)               // ASSIGNED -> RUNNING
	beat(10*time.Second, false)           // 9 s after the journalled one
	beat(70*time.Second, true)            // 69 s after it
	if err := s.Settle(ctx); err != nil { // folded: the rows are clean, the table says +70 s
		t.Fatal(err)
	}
	beat(100*time.Second, false) // 30 s after it: in memory only
	n, err := s.MarkZombies(ctx, t0.Add(90*time.Second), 100)
	if err != nil || n != 0 {
		t.Fatalf("a sweep at +90 s marked %d zombies (%v): it judged by the journalled +70 s, not the +100 s in memory", n, err)
	}
	beat(120*time.Second, false)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s, err = Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var hb int64
	if err := s.r.QueryRow(`SELECT min(heartbeat_at) FROM tasks WHERE state = 'RUNNING'`).Scan(&hb); err != nil || hb != t0.Add(120*time.Second).UnixMilli() {
		t.Fatalf("after a close the table says %d (%v), want the last heartbeat %d", hb, err, t0.Add(120*time.Second).UnixMilli())
	}
}

// A job's page read on a pooled reader while its row leaves the overlay
// shows the job's latest values. A row leaves the overlay once its fold
// has committed (a finished job) or when a cold write empties the
// overlay; a read whose table row predates that commit and whose patch
// from memory comes after the row left returned the old row (a finished
// job shown RUNNING a task short: a pilot test waited 30 s for a DONE
// that no later event re-read). Readers race both ways out of the
// overlay, job after job; each read must show what the hot path
// committed before the read began.
func TestJobReadsRacingTheOverlaysDropsSeeTheLatestValues(t *testing.T) {
	s, _ := openWithJob(t, filepath.Join(t.TempDir(), "q.db"), 1)
	defer s.Close()
	ctx := context.Background()
	for i := 0; i < 40; i++ {
		// Two tasks: one done. The job stays RUNNING, in the overlay
		// until the cold write; finishing the second makes it DONE, and
		// its fold drops it (as a finished job).
		id := job(t, s, t0, "a", "b")
		a := take(t, s, id, 2)
		report(t, s, pilotproto.StatusDone, a[0])
		want := func(j api.Job) bool { return j.Tasks.Done == 1 && j.State == api.JobRunning }
		drop := func() {
			if err := s.cold(ctx, func(*sql.Tx) error { return nil }); err != nil {
				t.Error(err)
			}
		}
		if i%2 == 1 {
			report(t, s, pilotproto.StatusDone, a[1])
			want = func(j api.Job) bool { return j.Tasks.Done == 2 && j.State == api.JobDone }
			drop = func() { s.foldCycle(false) }
		}
		stop := make(chan struct{})
		bad := make(chan string, 3)
		var wg sync.WaitGroup
		for r := 0; r < 3; r++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					select {
					case <-stop:
						return
					default:
					}
					var got []api.Job
					switch j, err := s.Job(ctx, id); {
					case err != nil:
						bad <- err.Error()
						return
					default:
						got = append(got, j)
					}
					list, err := s.ListJobs(ctx, "", "", id+1, 1)
					if err != nil || len(list) != 1 {
						bad <- fmt.Sprintf("list %v %v", list, err)
						return
					}
					got = append(got, list[0])
					for _, j := range got {
						if !want(j) {
							bad <- fmt.Sprintf("%s %+v", j.State, j.Tasks)
							return
						}
					}
					pools, err := s.JobPools(ctx, id)
					if err != nil || pools["local"][0] != got[0].Tasks.Done {
						bad <- fmt.Sprintf("pools %v %v, want %d done", pools, err, got[0].Tasks.Done)
						return
					}
				}
			}()
		}
		drop()
		close(stop)
		wg.Wait()
		close(bad)
		for b := range bad {
			t.Fatalf("job %d (round %d): a read showed %s", id, i, b)
		}
		// No reader connection was left inside a read transaction (on an
		// old snapshot): each of the pool's, held at once, reads the
		// folded row.
		conns := make([]*sql.Conn, 4)
		for k := range conns {
			c, err := s.r.Conn(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			conns[k] = c
		}
		for k, c := range conns {
			var j api.Job
			if err := c.QueryRowContext(ctx, `SELECT state, n_done FROM jobs WHERE id = ?`, id).Scan(&j.State, &j.Tasks.Done); err != nil || !want(j) {
				t.Fatalf("job %d (round %d): reader connection %d reads %s, %d done (%v)", id, i, k, j.State, j.Tasks.Done, err)
			}
			c.Close()
		}
	}
	// Nor at the end: a TRUNCATE checkpoint waits for every reader to
	// leave the WAL, and gives up (busy) on one pinned to a snapshot.
	var busy, log, done int
	if err := s.w.QueryRowContext(ctx, `PRAGMA wal_checkpoint(TRUNCATE)`).Scan(&busy, &log, &done); err != nil || busy != 0 {
		t.Fatalf("checkpoint: busy %d (log %d, checkpointed %d) %v", busy, log, done, err)
	}
}
