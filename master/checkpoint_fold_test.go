package master_test

import (
	"database/sql"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"github.com/harvest-hpc/harvest/master"
	"github.com/harvest-hpc/harvest/master/core"
	"github.com/harvest-hpc/harvest/pilotproto"
)

// oneByOne is the reference: every op as its own statement, in order, in
// one transaction (the checkpoint's writes before they were set-based).
func oneByOne(t *testing.T, db *sql.DB, ops []core.Op) {
	t.Helper()
	tx, err := db.Begin()
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	exec := func(q string, args ...any) {
		if _, err := tx.Exec(q, args...); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	for _, o := range ops {
		k := o.Ref
		switch o.Kind {
		case core.OpAdd:
			body, _ := json.Marshal(o.Task)
			exec(`INSERT INTO tasks (task_id, attempt, body, state) VALUES (?, ?, ?, 'pending')
				ON CONFLICT (task_id, attempt) DO UPDATE SET body = excluded.body, state = 'pending', worker = '', batch = 0, result = ''`, k.TaskID, k.Attempt, string(body))
		case core.OpAssign:
			exec(`UPDATE tasks SET state = 'assigned', worker = ?, batch = ? WHERE task_id = ? AND attempt = ?`, o.Worker, o.Batch, k.TaskID, k.Attempt)
		case core.OpRequeue:
			exec(`UPDATE tasks SET state = 'pending', worker = '', batch = 0 WHERE task_id = ? AND attempt = ?`, k.TaskID, k.Attempt)
		case core.OpFinish:
			body, _ := json.Marshal(o.Result)
			exec(`UPDATE tasks SET state = 'final', result = ? WHERE task_id = ? AND attempt = ?`, string(body), k.TaskID, k.Attempt)
		case core.OpDelete:
			exec(`DELETE FROM tasks WHERE task_id = ? AND attempt = ?`, k.TaskID, k.Attempt)
		case core.OpEstimate:
			exec(`INSERT INTO estimates (job_id, n, mean, dev) VALUES (?, ?, ?, ?)
				ON CONFLICT (job_id) DO UPDATE SET n = excluded.n, mean = excluded.mean, dev = excluded.dev`, o.Job, o.Est.N, o.Est.Mean, o.Est.Dev)
		}
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
}

// gotAndReference opens the checkpoint under test, dir/got.db, claimed by
// epoch 1, and the reference dir/want.db (its schema made by OpenCheckpoint)
// as a plain database for oneByOne.
func gotAndReference(t *testing.T, dir string) (*master.Checkpoint, *sql.DB) {
	t.Helper()
	got, err := master.OpenCheckpoint(filepath.Join(dir, "got.db"), "WAL")
	if err != nil {
		t.Fatal(err)
	}
	if err := got.Claim(1); err != nil {
		t.Fatal(err)
	}
	schema, err := master.OpenCheckpoint(filepath.Join(dir, "want.db"), "WAL")
	if err != nil {
		t.Fatal(err)
	}
	schema.Close()
	ref, err := sql.Open("sqlite3", filepath.Join(dir, "want.db"))
	if err != nil {
		t.Fatal(err)
	}
	return got, ref
}

func randomOps(r *rand.Rand, n int) []core.Op {
	ops := make([]core.Op, n)
	for i := range ops {
		k := pilotproto.TaskRef{TaskID: int64(1 + r.IntN(6)), Attempt: 1 + r.IntN(2)}
		switch r.IntN(7) {
		case 0, 1:
			ops[i] = core.Op{Kind: core.OpAdd, Ref: k, Task: &pilotproto.Task{ID: k.TaskID, Attempt: k.Attempt, JobID: int64(r.IntN(3)),
				Name: fmt.Sprintf("t \"%d\"\n\x01", r.IntN(100)), Command: []string{"echo", "{input}"}, Env: []string{"A=é"}}}
		case 2:
			ops[i] = core.Op{Kind: core.OpAssign, Ref: k, Worker: fmt.Sprintf([]string{"w\t%d", "w%d", "wé%d", "w\"%d", "w\\\\%d"}[r.IntN(5)], r.IntN(3)), Batch: int64(r.IntN(4))}
		case 3:
			ops[i] = core.Op{Kind: core.OpRequeue, Ref: k}
		case 4:
			ops[i] = core.Op{Kind: core.OpFinish, Ref: k, Result: &pilotproto.Result{TaskID: k.TaskID, Attempt: k.Attempt,
				Status: pilotproto.StatusDone, DurationMS: int64(r.IntN(1000)), ErrorTail: "line \"1\"\n\\2"}}
		case 5:
			ops[i] = core.Op{Kind: core.OpDelete, Ref: k}
		case 6:
			e := core.Estimator{}
			e.Observe(time.Duration(1e9 * r.Float64()))
			ops[i] = core.Op{Kind: core.OpEstimate, Job: int64(r.IntN(3)), Est: e}
		}
	}
	return ops
}

// The set-based commit leaves the checkpoint as the ops applied one by
// one would: the same rows, in the same order, with the same estimates,
// over random sequences of every op on a few tasks (so that adds, assigns,
// requeues, finishes and deletes of one task meet in one commit).
func TestSetBasedCommitLeavesWhatTheOpsOneByOneWould(t *testing.T) {
	for seed := uint64(1); seed <= 60; seed++ {
		r := rand.New(rand.NewPCG(seed, 7))
		dir := t.TempDir()
		got, ref := gotAndReference(t, dir)
		want, err := master.OpenCheckpoint(filepath.Join(dir, "want.db"), "WAL")
		if err != nil {
			t.Fatal(err)
		}
		for c := 0; c < 4; c++ {
			ops := randomOps(r, 1+r.IntN(20))
			// In two slices, as the master commits a group of Readies.
			h := r.IntN(len(ops) + 1)
			if err := got.Commit(ops[:h], ops[h:]); err != nil {
				t.Fatalf("seed %d: commit: %v", seed, err)
			}
			oneByOne(t, ref, ops)
			gr, ge, err1 := got.Load()
			wr, we, err2 := want.Load()
			if err1 != nil || err2 != nil {
				t.Fatalf("seed %d: load: %v %v", seed, err1, err2)
			}
			if !reflect.DeepEqual(gr, wr) || !reflect.DeepEqual(ge, we) {
				t.Fatalf("seed %d, commit %d of %+v:\nset-based %+v %+v\none by one %+v %+v", seed, c, ops, gr, ge, wr, we)
			}
		}
		ref.Close()
		got.Close()
		want.Close()
	}
}

// A master killed between compactions leaves its commits in the log: the
// next master's Claim applies them, in order, and loads what the ops one by
// one would have left, over random sequences.
//
// Some of the seeds begin with rows of schema 4's log (the statements'
// arrays), as a master of version 4 killed before the upgrade left them:
// they are applied before the oplog's ops.
func TestAKilledMastersLogIsAppliedByTheNext(t *testing.T) {
	for seed := uint64(1); seed <= 40; seed++ {
		r := rand.New(rand.NewPCG(seed, 11))
		dir := t.TempDir()
		path := filepath.Join(dir, "got.db")
		got, ref := gotAndReference(t, dir)
		commits := 2 + r.IntN(4)
		v4 := 0
		if seed%2 == 0 {
			v4 = 1 + r.IntN(commits-1)
		}
		for c := 0; c < commits; c++ {
			ops := randomOps(r, 1+r.IntN(20))
			commit := got.Commit
			if c < v4 {
				commit = func(ops ...[]core.Op) error { return got.CommitV4(ops[0]) }
			}
			if err := commit(ops); err != nil {
				t.Fatalf("seed %d: commit: %v", seed, err)
			}
			oneByOne(t, ref, ops)
		}
		if n, err := got.LogRows(); err != nil || n != commits {
			t.Fatalf("seed %d: %d log rows (%v) before the kill, want %d: the test would not test the log", seed, n, err, commits)
		}
		got.Kill()
		next, err := master.OpenCheckpoint(path, "WAL")
		if err != nil {
			t.Fatal(err)
		}
		if err := next.Claim(2); err != nil {
			t.Fatal(err)
		}
		want, err := master.OpenCheckpoint(filepath.Join(dir, "want.db"), "WAL")
		if err != nil {
			t.Fatal(err)
		}
		gr, ge, err1 := next.Load()
		wr, we, err2 := want.Load()
		if err1 != nil || err2 != nil {
			t.Fatalf("seed %d: load: %v %v", seed, err1, err2)
		}
		if !reflect.DeepEqual(gr, wr) || !reflect.DeepEqual(ge, we) {
			t.Fatalf("seed %d: after the kill:\nreplayed %+v %+v\none by one %+v %+v", seed, gr, ge, wr, we)
		}
		if n, _ := next.LogRows(); n != 0 {
			t.Fatalf("seed %d: %d log rows after the claim", seed, n)
		}
		ref.Close()
		next.Close()
		want.Close()
	}
}
