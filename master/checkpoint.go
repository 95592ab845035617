package master

import (
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"

	_ "github.com/mattn/go-sqlite3" // SQLite driver (cgo)

	"github.com/harvest-hpc/harvest/capacity"
	"github.com/harvest-hpc/harvest/internal/safefs"
	"github.com/harvest-hpc/harvest/master/core"
	"github.com/harvest-hpc/harvest/pilotproto"
)

// migrations[i] brings the checkpoint from schema version i to i+1
// (PRAGMA user_version). Append only: a pilot of an older harvest refuses
// a checkpoint whose version it does not know.
var migrations = []string{
	// 1: the tasks the master holds. Checkpoints of harvest before
	// versioning have exactly this layout with user_version 0, so this
	// migration (IF NOT EXISTS) adopts them unchanged.
	`CREATE TABLE IF NOT EXISTS meta (k TEXT PRIMARY KEY, v INTEGER NOT NULL);
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
	);`,
	// 2: the learnt task durations, so a new master shrinks batches to
	// its workers' deadlines from its first hand-out. (A pilot of
	// version 1 opening this file ignores the table.)
	`CREATE TABLE IF NOT EXISTS estimates (
		job_id INTEGER PRIMARY KEY,
		n      INTEGER NOT NULL,
		mean   REAL NOT NULL,
		dev    REAL NOT NULL
	);`,
	// 3: the capacity rule's state (JSON of capacity.State), so a new
	// master resumes its search instead of growing the pool again from
	// the start. (Older pilots ignore the table.)
	`CREATE TABLE IF NOT EXISTS capacity (
		id    INTEGER PRIMARY KEY CHECK (id = 1),
		state TEXT NOT NULL
	);`,
}

// SchemaVersion is the checkpoint schema this harvest writes.
var SchemaVersion = len(migrations)

// ErrCheckpointVersion: the checkpoint was written by a newer harvest.
var ErrCheckpointVersion = errors.New("checkpoint schema is newer than this harvest")

// Checkpoint is the master's state on the shared file system. Every write
// goes through Commit, which takes SQLite's write lock and checks that the
// stored epoch is still ours before writing anything (fencing): a deposed
// master cannot overwrite its successor's state.
type Checkpoint struct {
	db    *sql.DB
	epoch int64

	insert, assign, requeue, finish, del, estimate, capacity *sql.Stmt
}

// OpenCheckpoint opens (creating or migrating if needed) the checkpoint at
// path. journal is the SQLite journal mode ("WAL" normally).
func OpenCheckpoint(path, journal string) (*Checkpoint, error) {
	// The pilots' account only: the checkpoint holds every task's command.
	if err := safefs.PrivateFile(path); err != nil {
		return nil, fmt.Errorf("checkpoint %s: %w", path, err)
	}
	dsn := fmt.Sprintf("file:%s?_txlock=immediate&_busy_timeout=10000&_journal_mode=%s&_synchronous=NORMAL", path, journal)
	db, err := sql.Open("sqlite3", dsn)
	if err != nil {
		return nil, fmt.Errorf("checkpoint %s: %w", path, err)
	}
	// One connection: the master serialises its writes anyway, and a
	// single connection keeps prepared statements and the lock simple.
	db.SetMaxOpenConns(1)
	if err := migrate(db); err != nil {
		db.Close()
		return nil, fmt.Errorf("checkpoint %s: %w", path, err)
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
		{&c.estimate, `INSERT INTO estimates (job_id, n, mean, dev) VALUES (?, ?, ?, ?)
			ON CONFLICT (job_id) DO UPDATE SET n = excluded.n, mean = excluded.mean, dev = excluded.dev`},
		{&c.capacity, `INSERT INTO capacity (id, state) VALUES (1, ?) ON CONFLICT (id) DO UPDATE SET state = excluded.state`},
	}
	for _, s := range stmts {
		if *s.dst, err = db.Prepare(s.sql); err != nil {
			db.Close()
			return nil, fmt.Errorf("checkpoint %s: prepare: %w", path, err)
		}
	}
	return c, nil
}

// migrate brings the schema to SchemaVersion in one transaction, or
// refuses a version it does not know.
func migrate(db *sql.DB) error {
	tx, err := db.Begin()
	if err != nil {
		return fmt.Errorf("schema: %w", err)
	}
	defer tx.Rollback()
	var v int
	if err := tx.QueryRow(`PRAGMA user_version`).Scan(&v); err != nil {
		return fmt.Errorf("schema version: %w", err)
	}
	if v > SchemaVersion {
		return fmt.Errorf("%w: version %d, this harvest knows up to %d; run the newer harvest in every pilot (or move the file away to start empty)",
			ErrCheckpointVersion, v, SchemaVersion)
	}
	if v == SchemaVersion {
		return nil
	}
	for i := v; i < SchemaVersion; i++ {
		if _, err := tx.Exec(migrations[i]); err != nil {
			return fmt.Errorf("schema migration %d -> %d: %w", i, i+1, err)
		}
	}
	if _, err := tx.Exec(fmt.Sprintf(`PRAGMA user_version = %d`, SchemaVersion)); err != nil {
		return fmt.Errorf("schema version: %w", err)
	}
	return tx.Commit()
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

// Load returns every stored task in the order the master received them,
// and the learnt task durations by job.
func (c *Checkpoint) Load() ([]core.Row, map[int64]core.Estimator, error) {
	rows, err := c.db.Query(`SELECT body, state, worker, batch, result FROM tasks ORDER BY seq`)
	if err != nil {
		return nil, nil, fmt.Errorf("checkpoint load: %w", err)
	}
	defer rows.Close()
	var out []core.Row
	for rows.Next() {
		var body, result, state string
		var r core.Row
		if err := rows.Scan(&body, &state, &r.Worker, &r.Batch, &result); err != nil {
			return nil, nil, fmt.Errorf("checkpoint load: %w", err)
		}
		r.State = core.State(state)
		if err := json.Unmarshal([]byte(body), &r.Task); err != nil {
			return nil, nil, fmt.Errorf("checkpoint load: task body: %w", err)
		}
		if result != "" {
			r.Result = new(pilotproto.Result)
			if err := json.Unmarshal([]byte(result), r.Result); err != nil {
				return nil, nil, fmt.Errorf("checkpoint load: result: %w", err)
			}
		}
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, nil, fmt.Errorf("checkpoint load: %w", err)
	}
	est := map[int64]core.Estimator{}
	erows, err := c.db.Query(`SELECT job_id, n, mean, dev FROM estimates`)
	if err != nil {
		return nil, nil, fmt.Errorf("checkpoint load: %w", err)
	}
	defer erows.Close()
	for erows.Next() {
		var job int64
		var e core.Estimator
		if err := erows.Scan(&job, &e.N, &e.Mean, &e.Dev); err != nil {
			return nil, nil, fmt.Errorf("checkpoint load: %w", err)
		}
		est[job] = e
	}
	return out, est, erows.Err()
}

// LoadCapacity returns the capacity rule's stored state, nil if none.
func (c *Checkpoint) LoadCapacity() (*capacity.State, error) {
	var body string
	err := c.db.QueryRow(`SELECT state FROM capacity WHERE id = 1`).Scan(&body)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("checkpoint load: capacity: %w", err)
	}
	var st capacity.State
	if err := json.Unmarshal([]byte(body), &st); err != nil {
		return nil, fmt.Errorf("checkpoint load: capacity: %w", err)
	}
	return &st, nil
}

// Commit stores ops in one write transaction, after checking that the
// checkpoint still belongs to our epoch. Nothing is written when it fails.
func (c *Checkpoint) Commit(ops []core.Op) error {
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
	exec := func(s *sql.Stmt, args ...any) error {
		if _, err := tx.Stmt(s).Exec(args...); err != nil {
			return fmt.Errorf("checkpoint: %w", err)
		}
		return nil
	}
	for _, o := range ops {
		k := o.Ref
		switch o.Kind {
		case core.OpAdd:
			var body []byte
			if body, err = json.Marshal(o.Task); err == nil {
				err = exec(c.insert, o.Task.ID, o.Task.Attempt, string(body))
			}
		case core.OpAssign:
			err = exec(c.assign, o.Worker, o.Batch, k.TaskID, k.Attempt)
		case core.OpRequeue:
			err = exec(c.requeue, k.TaskID, k.Attempt)
		case core.OpFinish:
			var body []byte
			if body, err = json.Marshal(o.Result); err == nil {
				err = exec(c.finish, string(body), k.TaskID, k.Attempt)
			}
		case core.OpDelete:
			err = exec(c.del, k.TaskID, k.Attempt)
		case core.OpEstimate:
			err = exec(c.estimate, o.Job, o.Est.N, o.Est.Mean, o.Est.Dev)
		case core.OpCapacity:
			var body []byte
			if body, err = json.Marshal(o.Capacity); err == nil {
				err = exec(c.capacity, string(body))
			}
		case core.OpFenceCheck:
		default:
			err = fmt.Errorf("checkpoint: unknown op %d", o.Kind)
		}
		if err != nil {
			return err
		}
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("checkpoint: commit: %w", err)
	}
	return nil
}
