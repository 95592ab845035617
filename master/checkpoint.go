package master

import (
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"

	_ "github.com/mattn/go-sqlite3" // SQLite driver (cgo)

	"github.com/harvest-hpc/harvest/pilotproto"
)

// Task states in the checkpoint.
const (
	statePending  = "pending"  // held by the master, not handed out
	stateAssigned = "assigned" // in a batch handed to a worker
	stateFinal    = "final"    // result stored, not yet acknowledged by the queue
)

const schema = `
CREATE TABLE IF NOT EXISTS meta (k TEXT PRIMARY KEY, v INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS tasks (
	seq     INTEGER PRIMARY KEY AUTOINCREMENT,
	task_id INTEGER NOT NULL,
	attempt INTEGER NOT NULL,
	body    TEXT NOT NULL,
	state   TEXT NOT NULL,
	worker  TEXT NOT NULL DEFAULT '',
	batch   INTEGER NOT NULL DEFAULT 0,
	result  TEXT NOT NULL DEFAULT '',
	UNIQUE (task_id, attempt)
);`

// Checkpoint is the master's state on the shared file system. Every write
// goes through Tx, which takes SQLite's write lock and checks that the
// stored epoch is still ours before writing anything (fencing): a deposed
// master cannot overwrite its successor's state.
type Checkpoint struct {
	db    *sql.DB
	epoch int64

	insert, assign, requeue, finish, del *sql.Stmt
}

// OpenCheckpoint opens (creating if needed) the checkpoint at path.
// journal is the SQLite journal mode ("WAL" normally).
func OpenCheckpoint(path, journal string) (*Checkpoint, error) {
	dsn := fmt.Sprintf("file:%s?_txlock=immediate&_busy_timeout=10000&_journal_mode=%s&_synchronous=NORMAL", path, journal)
	db, err := sql.Open("sqlite3", dsn)
	if err != nil {
		return nil, fmt.Errorf("checkpoint %s: %w", path, err)
	}
	// One connection: the master serialises its writes anyway, and a
	// single connection keeps prepared statements and the lock simple.
	db.SetMaxOpenConns(1)
	if _, err := db.Exec(schema); err != nil {
		db.Close()
		return nil, fmt.Errorf("checkpoint %s: schema: %w", path, err)
	}
	c := &Checkpoint{db: db}
	stmts := []struct {
		dst **sql.Stmt
		sql string
	}{
		{&c.insert, `INSERT INTO tasks (task_id, attempt, body, state) VALUES (?, ?, ?, 'pending')
			ON CONFLICT (task_id, attempt) DO UPDATE SET body = excluded.body, state = 'pending', worker = '', batch = 0, result = ''`},
		{&c.assign, `UPDATE tasks SET state = 'assigned', worker = ?, batch = ? WHERE task_id = ? AND attempt = ?`},
		{&c.requeue, `UPDATE tasks SET state = 'pending', worker = '', batch = 0 WHERE task_id = ? AND attempt = ?`},
		{&c.finish, `UPDATE tasks SET state = 'final', result = ? WHERE task_id = ? AND attempt = ?`},
		{&c.del, `DELETE FROM tasks WHERE task_id = ? AND attempt = ?`},
	}
	for _, s := range stmts {
		if *s.dst, err = db.Prepare(s.sql); err != nil {
			db.Close()
			return nil, fmt.Errorf("checkpoint %s: prepare: %w", path, err)
		}
	}
	return c, nil
}

// Close closes the database.
func (c *Checkpoint) Close() error { return c.db.Close() }

// Claim makes epoch the owner of the checkpoint. A stored epoch newer than
// epoch means a newer master took over: ErrFenced.
func (c *Checkpoint) Claim(epoch int64) error {
	tx, err := c.db.Begin()
	if err != nil {
		return fmt.Errorf("checkpoint claim: %w", err)
	}
	defer tx.Rollback()
	var stored int64
	err = tx.QueryRow(`SELECT v FROM meta WHERE k = 'epoch'`).Scan(&stored)
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		return fmt.Errorf("checkpoint claim: %w", err)
	}
	if stored > epoch {
		return fmt.Errorf("checkpoint holds epoch %d, we have %d: %w", stored, epoch, ErrFenced)
	}
	if _, err := tx.Exec(`INSERT INTO meta (k, v) VALUES ('epoch', ?) ON CONFLICT (k) DO UPDATE SET v = excluded.v`, epoch); err != nil {
		return fmt.Errorf("checkpoint claim: %w", err)
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("checkpoint claim: %w", err)
	}
	c.epoch = epoch
	return nil
}

// Row is one task as stored.
type Row struct {
	Task   pilotproto.Task
	State  string
	Worker string
	Batch  int64
	Result *pilotproto.Result // set in stateFinal
}

// Load returns every stored task in the order the master received them.
func (c *Checkpoint) Load() ([]Row, error) {
	rows, err := c.db.Query(`SELECT body, state, worker, batch, result FROM tasks ORDER BY seq`)
	if err != nil {
		return nil, fmt.Errorf("checkpoint load: %w", err)
	}
	defer rows.Close()
	var out []Row
	for rows.Next() {
		var body, result string
		var r Row
		if err := rows.Scan(&body, &r.State, &r.Worker, &r.Batch, &result); err != nil {
			return nil, fmt.Errorf("checkpoint load: %w", err)
		}
		if err := json.Unmarshal([]byte(body), &r.Task); err != nil {
			return nil, fmt.Errorf("checkpoint load: task body: %w", err)
		}
		if result != "" {
			r.Result = new(pilotproto.Result)
			if err := json.Unmarshal([]byte(result), r.Result); err != nil {
				return nil, fmt.Errorf("checkpoint load: result: %w", err)
			}
		}
		out = append(out, r)
	}
	return out, rows.Err()
}

// Tx runs fn in one write transaction, after checking that the checkpoint
// still belongs to our epoch. Nothing is written when fn fails.
func (c *Checkpoint) Tx(fn func(*CTx) error) error {
	tx, err := c.db.Begin()
	if err != nil {
		return fmt.Errorf("checkpoint: %w", err)
	}
	defer tx.Rollback()
	var stored int64
	if err := tx.QueryRow(`SELECT v FROM meta WHERE k = 'epoch'`).Scan(&stored); err != nil {
		return fmt.Errorf("checkpoint: epoch: %w", err)
	}
	if stored != c.epoch {
		return fmt.Errorf("checkpoint holds epoch %d, we have %d: %w", stored, c.epoch, ErrFenced)
	}
	if err := fn(&CTx{c: c, tx: tx}); err != nil {
		return err
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("checkpoint: commit: %w", err)
	}
	return nil
}

// CTx is a checkpoint write transaction.
type CTx struct {
	c  *Checkpoint
	tx *sql.Tx
}

func (t *CTx) exec(s *sql.Stmt, args ...any) error {
	if _, err := t.tx.Stmt(s).Exec(args...); err != nil {
		return fmt.Errorf("checkpoint: %w", err)
	}
	return nil
}

// Add stores a task as pending (replacing a stale row of the same attempt).
func (t *CTx) Add(task pilotproto.Task) error {
	body, err := json.Marshal(task)
	if err != nil {
		return fmt.Errorf("checkpoint: %w", err)
	}
	return t.exec(t.c.insert, task.ID, task.Attempt, string(body))
}

// Assign records that a task is in batch of worker.
func (t *CTx) Assign(ref pilotproto.TaskRef, worker string, batch int64) error {
	return t.exec(t.c.assign, worker, batch, ref.TaskID, ref.Attempt)
}

// Requeue makes a task pending again.
func (t *CTx) Requeue(ref pilotproto.TaskRef) error {
	return t.exec(t.c.requeue, ref.TaskID, ref.Attempt)
}

// Finish stores a task's result (to be sent to the queue).
func (t *CTx) Finish(r pilotproto.Result) error {
	body, err := json.Marshal(r)
	if err != nil {
		return fmt.Errorf("checkpoint: %w", err)
	}
	return t.exec(t.c.finish, string(body), r.TaskID, r.Attempt)
}

// Delete forgets a task (its result was acknowledged by the queue).
func (t *CTx) Delete(ref pilotproto.TaskRef) error {
	return t.exec(t.c.del, ref.TaskID, ref.Attempt)
}
