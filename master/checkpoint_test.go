package master_test

import (
	"database/sql"
	"errors"
	"path/filepath"
	"testing"

	"github.com/harvest-hpc/harvest/capacity"
	"github.com/harvest-hpc/harvest/master"
	"github.com/harvest-hpc/harvest/master/core"
	"github.com/harvest-hpc/harvest/pilotproto"
)

func TestOlderMasterIsFencedOutOfTheCheckpoint(t *testing.T) {
	path := filepath.Join(t.TempDir(), "cp.db")
	old, err := master.OpenCheckpoint(path, "WAL")
	if err != nil {
		t.Fatal(err)
	}
	defer old.Close()
	if err := old.Claim(1); err != nil {
		t.Fatal(err)
	}
	newer, err := master.OpenCheckpoint(path, "WAL")
	if err != nil {
		t.Fatal(err)
	}
	defer newer.Close()
	if err := newer.Claim(2); err != nil {
		t.Fatal(err)
	}
	err = old.Commit([]core.Op{{Kind: core.OpAdd, Ref: pilotproto.TaskRef{TaskID: 1, Attempt: 1}, Task: &pilotproto.Task{ID: 1, Attempt: 1}}})
	if !errors.Is(err, master.ErrFenced) {
		t.Fatalf("write of epoch 1 after epoch 2 claimed: got %v, want ErrFenced", err)
	}
	if err := old.Commit([]core.Op{{Kind: core.OpFenceCheck}}); !errors.Is(err, master.ErrFenced) {
		t.Fatalf("fence check of epoch 1 after 2: got %v, want ErrFenced", err)
	}
	if err := old.Claim(1); !errors.Is(err, master.ErrFenced) {
		t.Fatalf("claim of epoch 1 after 2: got %v, want ErrFenced", err)
	}
	rows, _, err := newer.Load()
	if err != nil || len(rows) != 0 {
		t.Fatalf("the fenced write left rows: %v %v", rows, err)
	}
}

// v1 is the checkpoint layout of harvest before the schema was versioned
// (user_version 0), with one task of each state.
const v1 = `
CREATE TABLE meta (k TEXT PRIMARY KEY, v INTEGER NOT NULL);
CREATE TABLE tasks (
	seq     INTEGER PRIMARY KEY AUTOINCREMENT,
	task_id INTEGER NOT NULL,
	attempt INTEGER NOT NULL,
	body    TEXT NOT NULL,
	state   TEXT NOT NULL,
	worker  TEXT NOT NULL DEFAULT '',
	batch   INTEGER NOT NULL DEFAULT 0,
	result  TEXT NOT NULL DEFAULT '',
	UNIQUE (task_id, attempt)
);
INSERT INTO meta VALUES ('epoch', 3);
INSERT INTO tasks (task_id, attempt, body, state) VALUES (1, 1, '{"id":1,"job_id":7,"attempt":1,"batch_size":2}', 'pending');
INSERT INTO tasks (task_id, attempt, body, state, worker, batch) VALUES (2, 1, '{"id":2,"job_id":7,"attempt":1,"batch_size":2}', 'assigned', 'w1', 4);
INSERT INTO tasks (task_id, attempt, body, state, result) VALUES (3, 1, '{"id":3,"job_id":7,"attempt":1}', 'final', '{"task_id":3,"attempt":1,"status":"done"}');
`

func rawDB(t *testing.T, path, script string) {
	t.Helper()
	db, err := sql.Open("sqlite3", path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.Exec(script); err != nil {
		t.Fatal(err)
	}
}

func TestACheckpointOfTheUnversionedLayoutIsMigratedAndRestored(t *testing.T) {
	path := filepath.Join(t.TempDir(), "master.db")
	rawDB(t, path, v1)
	c, err := master.OpenCheckpoint(path, "WAL")
	if err != nil {
		t.Fatalf("open a version-1 checkpoint: %v", err)
	}
	defer c.Close()
	if err := c.Claim(4); err != nil {
		t.Fatal(err)
	}
	rows, est, err := c.Load()
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 3 || rows[0].State != core.StatePending || rows[1].State != core.StateAssigned ||
		rows[1].Worker != "w1" || rows[1].Batch != 4 || rows[2].Result == nil || rows[2].Result.Status != "done" {
		t.Fatalf("restored rows %+v", rows)
	}
	if len(est) != 0 {
		t.Fatalf("estimates out of nowhere: %v", est)
	}
	// Version 2 stores what a master learns.
	e := core.Estimator{}
	e.Observe(3e9)
	if err := c.Commit([]core.Op{{Kind: core.OpEstimate, Job: 7, Est: e}}); err != nil {
		t.Fatal(err)
	}
	if _, est, _ := c.Load(); est[7] != e {
		t.Fatalf("estimate stored %+v, read back %+v", e, est[7])
	}
	// Version 3 stores the capacity rule's search, so a new master resumes it.
	if st, err := c.LoadCapacity(); st != nil || err != nil {
		t.Fatalf("a capacity state out of nowhere: %+v %v", st, err)
	}
	ctl := capacity.New(capacity.DefaultConfig())
	ctl.Step([]capacity.Sample{{Job: 1, Size: 4, Duration: 1e10}, {Job: 1, Size: 4, Duration: 1e10}, {Job: 1, Size: 4, Duration: 1e10},
		{Job: 1, Size: 4, Duration: 1e10}, {Job: 1, Size: 4, Duration: 1e10}})
	st := ctl.State()
	if err := c.Commit([]core.Op{{Kind: core.OpCapacity, Capacity: &st}}); err != nil {
		t.Fatal(err)
	}
	got, err := c.LoadCapacity()
	if err != nil || got == nil || got.Good != 4 || got.Phase != capacity.Grow || got.Baseline[1] != 10 {
		t.Fatalf("capacity state read back %+v %v", got, err)
	}
}

func TestACheckpointOfANewerHarvestIsRefusedAndLeftAlone(t *testing.T) {
	path := filepath.Join(t.TempDir(), "master.db")
	rawDB(t, path, v1+"PRAGMA user_version = 99;")
	if _, err := master.OpenCheckpoint(path, "WAL"); !errors.Is(err, master.ErrCheckpointVersion) {
		t.Fatalf("open a version-99 checkpoint: got %v, want ErrCheckpointVersion", err)
	}
	db, err := sql.Open("sqlite3", path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var v, n int
	db.QueryRow(`PRAGMA user_version`).Scan(&v)
	db.QueryRow(`SELECT count(*) FROM tasks`).Scan(&n)
	if v != 99 || n != 3 {
		t.Fatalf("the refused checkpoint changed: version %d, %d tasks", v, n)
	}
}
