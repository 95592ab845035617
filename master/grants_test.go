package master_test

import (
	"cmp"
	"database/sql"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"testing"

	"github.com/harvest-hpc/harvest/master"
	"github.com/harvest-hpc/harvest/master/core"
	"github.com/harvest-hpc/harvest/pilotproto"
)

// queueTask is a task as harvest's queue hands it out: id job<<32|entry.
func queueTask(job, entry int64, attempt int) *pilotproto.Task {
	id := job<<32 | entry
	name := fmt.Sprintf("file-%03d.dat", entry)
	out := fmt.Sprintf("/out/job-%d", job)
	return &pilotproto.Task{ID: id, JobID: job, Owner: fmt.Sprintf("user%d", job), Attempt: attempt, Name: name,
		Input: "/data/set/" + name, Output: out + "/" + name, OutputDir: out, Command: []string{"/bin/run", "{input}", "{output}"},
		Env: pilotproto.TaskEnv(job, id), BatchSize: 10, Cores: 1, TimeoutS: 60}
}

// restore opens epoch's checkpoint in dir (restored from the newest older
// file) and loads it; it is closed when the test ends.
func restore(t *testing.T, dir string, epoch int64) (*master.Checkpoint, []core.Row) {
	t.Helper()
	cp, _, err := master.OpenCheckpoint(dir, epoch, master.DefaultJournal)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cp.Close() })
	rows, _, err := cp.Load()
	if err != nil {
		t.Fatal(err)
	}
	return cp, rows
}

// count returns the rows of a table of the checkpoint file in dir.
func count(t *testing.T, path, table string) int {
	t.Helper()
	db, err := sql.Open("sqlite3", "file:"+path+"?mode=ro&immutable=1")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var n int
	if err := db.QueryRow(`SELECT count(*) FROM ` + table).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// TestAGrantIsOneRowWhateverBecomesOfItsEntries: 100 entries of one job,
// handed out in two batches to two workers, partly finished (successes,
// a failure, an interrupted entry), partly acknowledged: the file holds
// one grant row and one runs row, and the next epoch restores each entry
// as it was; plain successes of one pilot keep the sum of their durations
// and the earliest start (what the queue keeps of them).
func TestAGrantIsOneRowWhateverBecomesOfItsEntries(t *testing.T) {
	dir := t.TempDir()
	one, _, err := master.OpenCheckpoint(dir, 1, master.DefaultJournal)
	if err != nil {
		t.Fatal(err)
	}
	var ops []core.Op
	ref := func(e int64) pilotproto.TaskRef { return pilotproto.TaskRef{TaskID: 7<<32 | e, Attempt: 2} }
	for e := range int64(100) {
		ops = append(ops, core.Op{Kind: core.OpAdd, Ref: ref(e), Task: queueTask(7, e, 2)})
	}
	if err := one.Commit(ops); err != nil {
		t.Fatal(err)
	}
	ops = ops[:0]
	for e := range int64(60) {
		w, b := "w1", int64(1)
		if e >= 30 {
			w, b = "w2", 2
		}
		ops = append(ops, core.Op{Kind: core.OpAssign, Ref: ref(e), Worker: w, Batch: b})
	}
	ops = append(ops, core.Op{Kind: core.OpWorker, Worker: "w1", Address: "http://h1:1"})
	if err := one.Commit(ops); err != nil {
		t.Fatal(err)
	}
	ops = ops[:0]
	done := func(e, start, ms int64) core.Op {
		r := ref(e)
		return core.Op{Kind: core.OpFinish, Ref: r, Result: &pilotproto.Result{TaskID: r.TaskID, Attempt: 2, Status: pilotproto.StatusDone,
			StartedAt: start, DurationMS: ms, Pilot: "p1"}}
	}
	for e := range int64(10) {
		ops = append(ops, done(e, 1000+e, 100+e)) // acknowledged below
	}
	ops = append(ops, done(10, 2000, 5), done(11, 1990, 6), done(12, 2010, 8))
	failed := &pilotproto.Result{TaskID: ref(13).TaskID, Attempt: 2, Status: pilotproto.StatusFailed, ExitCode: 3, StartedAt: 2100, DurationMS: 40, Pilot: "p1", ErrorTail: "boom"}
	ops = append(ops, core.Op{Kind: core.OpFinish, Ref: ref(13), Result: failed})
	ops = append(ops, core.Op{Kind: core.OpRequeue, Ref: ref(29)})
	if err := one.Commit(ops); err != nil {
		t.Fatal(err)
	}
	ops = ops[:0]
	for e := range int64(10) {
		ops = append(ops, core.Op{Kind: core.OpDelete, Ref: ref(e)})
	}
	if err := one.Commit(ops); err != nil {
		t.Fatal(err)
	}
	one.Close()
	path := filepath.Join(dir, master.FileName(1))
	if g, r, j := count(t, path, "grants"), count(t, path, "runs"), count(t, path, "jobs"); g != 1 || r != 1 || j != 1 {
		t.Fatalf("%d grants, %d runs, %d jobs rows for one grant, want 1 of each", g, r, j)
	}

	two, rows := restore(t, dir, 2)
	if len(rows) != 90 {
		t.Fatalf("restored %d tasks, want 90 (10 acknowledged)", len(rows))
	}
	var sum int64
	for i, r := range rows {
		e := int64(i) + 10
		if want := queueTask(7, e, 2); !reflect.DeepEqual(r.Task, *want) {
			t.Fatalf("entry %d restored as %+v, want %+v", e, r.Task, *want)
		}
		switch {
		case e <= 12:
			if r.State != core.StateFinal || r.Result.Status != pilotproto.StatusDone || r.Result.StartedAt != 1990 || r.Result.TaskID != r.Task.ID {
				t.Errorf("entry %d: %+v %+v, want done, started at the earliest start 1990", e, r, r.Result)
			}
			sum += r.Result.DurationMS
		case e == 13:
			if r.State != core.StateFinal || !reflect.DeepEqual(*r.Result, *failed) {
				t.Errorf("the failed entry: %+v, want %+v exactly", r.Result, failed)
			}
		case e == 29 || e >= 60:
			if r.State != core.StatePending {
				t.Errorf("entry %d: %s, want pending", e, r.State)
			}
		case e < 30:
			if r.State != core.StateAssigned || r.Worker != "w1" || r.Batch != 1 || r.Address != "http://h1:1" {
				t.Errorf("entry %d: %+v, want in batch 1 of w1 at its address", e, r)
			}
		default:
			if r.State != core.StateAssigned || r.Worker != "w2" || r.Batch != 2 || r.Address != "" {
				t.Errorf("entry %d: %+v, want in batch 2 of w2", e, r)
			}
		}
	}
	if sum != 5+6+8 {
		t.Errorf("the merged successes last %d ms in all, want %d", sum, 5+6+8)
	}
	// All acknowledged: the grant and its job are gone.
	ops = ops[:0]
	for _, r := range rows {
		ops = append(ops, core.Op{Kind: core.OpFinish, Ref: pilotproto.TaskRef{TaskID: r.Task.ID, Attempt: 2}, Result: &pilotproto.Result{Status: pilotproto.StatusDone}},
			core.Op{Kind: core.OpDelete, Ref: pilotproto.TaskRef{TaskID: r.Task.ID, Attempt: 2}})
	}
	if err := two.Commit(ops); err != nil {
		t.Fatal(err)
	}
	p2 := filepath.Join(dir, master.FileName(2))
	if g, r, j := count(t, p2, "grants"), count(t, p2, "runs"), count(t, p2, "jobs"); g+r+j != 0 {
		t.Fatalf("%d grants, %d runs, %d jobs rows left after every entry was acknowledged", g, r, j)
	}
}

// TestTheCheckpointRestoresWhatATaskModelWould drives random op sequences
// (pulls of consecutive entries and of tasks that fit no job form,
// hand-outs, requeues, results, acknowledgements, a stale attempt added
// again) through checkpoints of successive epochs, each restored from
// the last, and checks every restore against a plain map of tasks.
func TestTheCheckpointRestoresWhatATaskModelWould(t *testing.T) {
	for seed := range uint64(4) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) { randomLives(t, seed) })
	}
}

func randomLives(t *testing.T, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, 31))
	dir := memDir(t)
	epoch := int64(1)
	cp, _, err := master.OpenCheckpoint(dir, epoch, master.DefaultJournal)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { cp.Close() }()
	ref := map[pilotproto.TaskRef]core.Row{}
	next := map[int64]int64{} // job -> next entry
	keys := func() []pilotproto.TaskRef {
		ks := make([]pilotproto.TaskRef, 0, len(ref))
		for k := range ref {
			ks = append(ks, k)
		}
		slices.SortFunc(ks, func(a, b pilotproto.TaskRef) int { return cmp.Or(cmp.Compare(a.TaskID, b.TaskID), a.Attempt-b.Attempt) })
		return ks
	}
	for step := range 42 {
		var ops []core.Op
		for range 1 + rng.IntN(40) {
			ks := keys()
			switch x := rng.IntN(10); {
			case x < 3 || len(ks) == 0: // a pull: a run of one job's entries, sometimes a task of no form
				job := 1 + rng.Int64N(4)
				for range 1 + rng.IntN(12) {
					tk := queueTask(job, next[job], 1)
					next[job]++
					if rng.IntN(8) == 0 {
						tk.Env = nil // fits no job form: stored whole
					}
					k := pilotproto.TaskRef{TaskID: tk.ID, Attempt: 1}
					ops = append(ops, core.Op{Kind: core.OpAdd, Ref: k, Task: tk})
					ref[k] = core.Row{Task: *tk, State: core.StatePending}
				}
			default:
				k := ks[rng.IntN(len(ks))]
				r := ref[k]
				switch y := rng.IntN(6); {
				case y == 0 && r.State == core.StateFinal && r.Result.Status == pilotproto.StatusInterrupted:
					ops = append(ops, core.Op{Kind: core.OpAdd, Ref: k, Task: &r.Task})
					ref[k] = core.Row{Task: r.Task, State: core.StatePending}
				case y <= 1 && r.State == core.StatePending:
					w := fmt.Sprintf("w%d", rng.IntN(3))
					b := rng.Int64N(3)
					ops = append(ops, core.Op{Kind: core.OpAssign, Ref: k, Worker: w, Batch: b})
					ref[k] = core.Row{Task: r.Task, State: core.StateAssigned, Worker: w, Batch: b}
				case y == 2 && r.State == core.StateAssigned:
					ops = append(ops, core.Op{Kind: core.OpRequeue, Ref: k})
					ref[k] = core.Row{Task: r.Task, State: core.StatePending}
				case y == 3 && r.State != core.StateFinal:
					res := &pilotproto.Result{TaskID: k.TaskID, Attempt: k.Attempt, Status: pilotproto.StatusDone, StartedAt: 500, DurationMS: 20, Pilot: "p"}
					switch rng.IntN(3) {
					case 0:
						res.Status, res.ExitCode, res.ErrorTail, res.DurationMS = pilotproto.StatusFailed, 1+rng.IntN(3), fmt.Sprint("tail ", rng.IntN(5)), rng.Int64N(90)
					case 1:
						res.Status, res.DurationMS = pilotproto.StatusInterrupted, 0
					}
					ops = append(ops, core.Op{Kind: core.OpFinish, Ref: k, Result: res})
					ref[k] = core.Row{Task: r.Task, State: core.StateFinal, Result: res}
				case y >= 4 && r.State == core.StateFinal:
					ops = append(ops, core.Op{Kind: core.OpDelete, Ref: k})
					delete(ref, k)
				}
			}
		}
		if err := cp.Commit(ops); err != nil {
			t.Fatal(err)
		}
		if step%7 != 6 {
			continue
		}
		cp.Close()
		epoch++
		if cp, _, err = master.OpenCheckpoint(dir, epoch, master.DefaultJournal); err != nil {
			t.Fatal(err)
		}
		rows, _, err := cp.Load()
		if err != nil {
			t.Fatal(err)
		}
		got := map[pilotproto.TaskRef]core.Row{}
		for _, r := range rows {
			got[pilotproto.TaskRef{TaskID: r.Task.ID, Attempt: r.Task.Attempt}] = r
		}
		if len(got) != len(ref) {
			t.Fatalf("epoch %d restored %d tasks, want %d", epoch, len(got), len(ref))
		}
		for k, want := range ref {
			if g := got[k]; !reflect.DeepEqual(g, want) {
				t.Fatalf("epoch %d restored %v as\n %+v %+v\nwant\n %+v %+v", epoch, k, g, g.Result, want, want.Result)
			}
		}
	}
}

// memDir is a temporary directory in memory (/dev/shm) where there is
// one: the random lives commit hundreds of times, and what they check is
// the content, not the disk's fsync.
func memDir(t *testing.T) string {
	t.Helper()
	if fi, err := os.Stat("/dev/shm"); err != nil || !fi.IsDir() {
		return t.TempDir()
	}
	dir, err := os.MkdirTemp("/dev/shm", "harvest-checkpoint-test-")
	if err != nil {
		return t.TempDir()
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// TestACheckpointOfTheTaskRowReleaseIsUpgraded: a file of schema 2 (a
// row per task) left by a master of the previous release is copied,
// its tasks moved into grants, and restored as they were.
func TestACheckpointOfTheTaskRowReleaseIsUpgraded(t *testing.T) {
	dir := t.TempDir()
	db, err := sql.Open("sqlite3", filepath.Join(dir, master.FileName(4)))
	if err != nil {
		t.Fatal(err)
	}
	for i, m := range master.Migrations[:2] {
		if _, err := db.Exec(m); err != nil {
			t.Fatalf("migration %d: %v", i, err)
		}
	}
	tk := queueTask(3, 5, 1)
	body := `{"id":12884901893,"job_id":3,"owner":"user3","attempt":1,"name":"file-005.dat","input":"/data/set/file-005.dat","output":"/out/job-3/file-005.dat","output_dir":"/out/job-3","command":["/bin/run","{input}","{output}"],"env":["HARVEST_JOB=3","HARVEST_TASK=12884901893"],"batch_size":10,"cores":1,"timeout_s":60}`
	if _, err := db.Exec(`PRAGMA user_version = 2;
		INSERT INTO tasks (task_id, attempt, body, state, worker, batch) VALUES (12884901893, 1, ?, 'assigned', 'w9', 4);
		INSERT INTO tasks (task_id, attempt, body, state, result) VALUES (99, 1, '{"id":99,"job_id":8,"attempt":1}', 'final', '{"task_id":99,"attempt":1,"status":"failed","exit_code":2}');
		INSERT INTO workers (id, address) VALUES ('w9', 'http://h9:9'), ('idle', 'http://h0:1');`, body); err != nil {
		t.Fatal(err)
	}
	db.Close()
	cp, rows := restore(t, dir, 5)
	want := []core.Row{
		{Task: *tk, State: core.StateAssigned, Worker: "w9", Batch: 4, Address: "http://h9:9"},
		{Task: pilotproto.Task{ID: 99, JobID: 8, Attempt: 1}, State: core.StateFinal, Result: &pilotproto.Result{TaskID: 99, Attempt: 1, Status: pilotproto.StatusFailed, ExitCode: 2}},
	}
	if !reflect.DeepEqual(rows, want) {
		t.Fatalf("upgraded to %+v\nwant %+v", rows, want)
	}
	path := filepath.Join(dir, master.FileName(5))
	if n := count(t, path, "sqlite_master WHERE name = 'tasks'"); n != 0 {
		t.Errorf("the tasks table is still there")
	}
	// The first commit forgets the address of the worker holding nothing.
	if err := cp.Commit([]core.Op{{Kind: core.OpEstimate, Job: 3, Est: &core.Estimator{N: 1, Mean: 1, Dev: 0.25}}}); err != nil {
		t.Fatal(err)
	}
	if n := count(t, path, "workers"); n != 1 {
		t.Errorf("%d worker addresses kept, want the one of the worker holding a batch", n)
	}
}
