package master

import (
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"sync/atomic"
	"time"

	_ "github.com/harvest-hpc/harvest/internal/sqliteconf" // SQLite without its global allocation mutex
	_ "github.com/mattn/go-sqlite3"                        // SQLite driver (cgo)

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
	// 4: the log. A commit appends what its ops leave behind (the arrays
	// of the set-based statements) as one row, and the tables are brought
	// up to date about once a second from the ops in memory (compact): a
	// task pulled, run and reported within that second never touches the
	// tasks table. A master that opens the checkpoint applies the rows
	// left in the log, in order, first. (A pilot of version 3 would not
	// read the log: it refuses version 4.)
	`CREATE TABLE IF NOT EXISTS log (
		seq INTEGER PRIMARY KEY AUTOINCREMENT,
		d   TEXT NOT NULL DEFAULT '',
		i   TEXT NOT NULL DEFAULT '',
		u   TEXT NOT NULL DEFAULT '',
		e   TEXT NOT NULL DEFAULT '',
		c   TEXT NOT NULL DEFAULT ''
	);`,
	// 5: the oplog, which replaces the log: a commit appends its ops as
	// they came, in a binary encoding (see appendOps), instead of folding
	// them into the statements' arrays first; the fold is left to the
	// once-a-second compaction. No AUTOINCREMENT: the log is emptied at
	// every compaction, and a new row's seq is still above the others'.
	// A log left by a master of version 4 is applied first. (A pilot of
	// version 4 would not read the oplog: it refuses version 5.)
	`CREATE TABLE IF NOT EXISTS oplog (
		seq INTEGER PRIMARY KEY,
		ops BLOB NOT NULL
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

	epochQ, del, insert, update, estimate, capacity, logAdd *sql.Stmt
	commits                                                 atomic.Int64 // Commit calls (for tests)

	// pending are the ops committed to the log since the tables were last
	// brought up to date (compact), as Commit got them (not copied: a
	// second's ops are tens of megabytes); since is when that was.
	pending [][]core.Op
	logRows int
	since   time.Time
	row     []byte // the last log row's buffer, reused
	// stored are the rows of the tasks table (known once claimed, nil
	// before): a compaction deletes only those, not every task that came
	// and went within the second.
	stored map[pilotproto.TaskRef]struct{}
	// scratch is the compaction's fold memory, reused every second.
	scratch foldScratch
}

// The tables are brought up to date from the log every compactEvery, or
// after compactRows commits: a task's ops within that time cost one log
// row's share, not a row of its own written and rewritten.
const (
	compactEvery = time.Second
	compactRows  = 1024
)

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
		{&c.epochQ, `SELECT v FROM meta WHERE k = 'epoch'`},
		{&c.del, `DELETE FROM tasks WHERE seq IN (SELECT t.seq FROM jsonb_each(?) AS d
			JOIN tasks AS t ON t.task_id = d.value->>0 AND t.attempt = d.value->>1)`},
		{&c.insert, `INSERT INTO tasks (task_id, attempt, body, state, worker, batch, result)
			SELECT value->>0, value->>1, value->>2, value->>3, value->>4, value->>5, coalesce(value->>6, '') FROM jsonb_each(?) WHERE true
			ON CONFLICT (task_id, attempt) DO UPDATE SET body = excluded.body, state = excluded.state, worker = excluded.worker,
				batch = excluded.batch, result = excluded.result`},
		{&c.update, `UPDATE tasks SET state = d.v->>2, worker = coalesce(d.v->>3, worker), batch = coalesce(d.v->>4, batch),
			result = coalesce(d.v->>5, result)
			FROM (SELECT value AS v FROM jsonb_each(?)) AS d WHERE tasks.task_id = d.v->>0 AND tasks.attempt = d.v->>1`},
		{&c.estimate, `INSERT INTO estimates (job_id, n, mean, dev) SELECT value->>0, value->>1, value->>2, value->>3 FROM jsonb_each(?) WHERE true
			ON CONFLICT (job_id) DO UPDATE SET n = excluded.n, mean = excluded.mean, dev = excluded.dev`},
		{&c.capacity, `INSERT INTO capacity (id, state) VALUES (1, ?) ON CONFLICT (id) DO UPDATE SET state = excluded.state`},
		{&c.logAdd, `INSERT INTO oplog (ops) SELECT ? WHERE (SELECT v FROM meta WHERE k = 'epoch') = ?`},
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

// Close brings the tables up to date (a master that still holds the
// checkpoint) and closes the database.
func (c *Checkpoint) Close() error {
	var err error
	if len(c.pending) > 0 {
		err = c.compact()
	}
	if errors.Is(err, ErrFenced) {
		err = nil // a newer master holds it: its log, not ours
	}
	return errors.Join(err, c.db.Close())
}

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
	// What the last master left in the log goes into the tables now,
	// before any op of ours is logged after it.
	c.pending, c.stored = c.pending[:0], nil
	if err := c.compact(); err != nil {
		return err
	}
	return c.loadStored()
}

// loadStored reads which rows the tasks table holds.
func (c *Checkpoint) loadStored() error {
	rows, err := c.db.Query(`SELECT task_id, attempt FROM tasks`)
	if err != nil {
		return fmt.Errorf("checkpoint claim: %w", err)
	}
	defer rows.Close()
	stored := map[pilotproto.TaskRef]struct{}{}
	for rows.Next() {
		var k pilotproto.TaskRef
		if err := rows.Scan(&k.TaskID, &k.Attempt); err != nil {
			return fmt.Errorf("checkpoint claim: %w", err)
		}
		stored[k] = struct{}{}
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("checkpoint claim: %w", err)
	}
	c.stored = stored
	return nil
}

// Load returns every stored task in the order the master received them,
// and the learnt task durations by job.
func (c *Checkpoint) Load() ([]core.Row, map[int64]core.Estimator, error) {
	if err := c.compact(); err != nil {
		return nil, nil, fmt.Errorf("checkpoint load: %w", err)
	}
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
	if err := c.compact(); err != nil {
		return nil, fmt.Errorf("checkpoint load: capacity: %w", err)
	}
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
//
// The ops are appended to the oplog as one row, as they came (see
// appendOps): a commit costs a few sequential pages whatever the number
// of tasks it moves, and no fold. About once a second compact brings the
// tables up to date from all the ops since, folded together.
//
// The ops may come in several slices (a group of Readies), in order. The
// checkpoint keeps them until its next compaction: the caller must not
// change them.
func (c *Checkpoint) Commit(ops ...[]core.Op) error {
	c.commits.Add(1)
	row, err := appendOps(c.row[:0], ops)
	c.row = row // the buffer is reused by the next commit
	if err != nil {
		return err
	}
	tx, err := c.db.Begin()
	if err != nil {
		return fmt.Errorf("checkpoint: %w", err)
	}
	defer tx.Rollback()
	logged := len(row) > 1 // more than the format byte: not only fence checks
	if logged {
		// The insert checks the epoch itself (one statement, not two):
		// no row written means the checkpoint is not ours.
		res, err := tx.Stmt(c.logAdd).Exec(row, c.epoch)
		if err != nil {
			return fmt.Errorf("checkpoint: %w", err)
		}
		if n, err := res.RowsAffected(); err != nil || n != 1 {
			if err := c.fence(tx, false); err != nil {
				return err
			}
			return fmt.Errorf("checkpoint: the log row was not written (%d rows, %v)", n, err)
		}
	} else if err := c.fence(tx, false); err != nil {
		return err
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("checkpoint: commit: %w", err)
	}
	c.pending = append(c.pending, ops...)
	if logged {
		c.logRows++
	}
	if c.logRows >= compactRows || time.Since(c.since) >= compactEvery {
		return c.compact()
	}
	return nil
}

// fence checks, inside tx, that the checkpoint still holds our epoch
// (with unclaimed, a checkpoint nobody has claimed passes too: one that is
// only read).
func (c *Checkpoint) fence(tx *sql.Tx, unclaimed bool) error {
	var stored int64
	err := tx.Stmt(c.epochQ).QueryRow().Scan(&stored)
	if errors.Is(err, sql.ErrNoRows) && unclaimed && c.epoch == 0 {
		return nil
	}
	if err != nil {
		return fmt.Errorf("checkpoint: epoch: %w", err)
	}
	if stored != c.epoch {
		return fmt.Errorf("checkpoint holds epoch %d, we have %d: %w", stored, c.epoch, ErrFenced)
	}
	return nil
}

// compact brings the tables up to date in one fenced transaction: the
// ops of this master's commits since the last compaction, folded
// together, or, when this master has none in memory (it has just opened
// the checkpoint), what the last master left in the logs (replay). The
// log is emptied in the same transaction.
func (c *Checkpoint) compact() error {
	tx, err := c.db.Begin()
	if err != nil {
		return fmt.Errorf("checkpoint: %w", err)
	}
	defer tx.Rollback()
	if err := c.fence(tx, true); err != nil {
		return err
	}
	var f folded
	if len(c.pending) > 0 {
		if f, err = c.scratch.fold(c.stored, c.pending...); err != nil {
			return err
		}
		if err := c.apply(tx, f); err != nil {
			return err
		}
	} else if err := c.replay(tx); err != nil {
		return err
	}
	if _, err := tx.Exec(`DELETE FROM oplog`); err != nil {
		return fmt.Errorf("checkpoint: empty the log: %w", err)
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("checkpoint: commit: %w", err)
	}
	if c.stored != nil { // the rows are what the fold wrote, now that it is written
		for _, k := range f.gone {
			delete(c.stored, k)
		}
		for _, k := range f.wrote {
			c.stored[k] = struct{}{}
		}
	}
	c.pending, c.logRows, c.since = c.pending[:0], 0, time.Now()
	return nil
}

// replay applies, inside tx and in order, what the last master left: the
// rows of schema 4's log (each the arrays of the set-based statements, as
// a master of that schema folded its commits), then the oplog's ops,
// folded together as compact folds a master's ops in memory.
func (c *Checkpoint) replay(tx *sql.Tx) error {
	rows, err := tx.Query(`SELECT d, i, u, e, c FROM log ORDER BY seq`)
	if err != nil {
		return fmt.Errorf("checkpoint: read the log: %w", err)
	}
	var old []folded
	for rows.Next() {
		var d, i, u, e, cp string
		if err := rows.Scan(&d, &i, &u, &e, &cp); err != nil {
			rows.Close()
			return fmt.Errorf("checkpoint: read the log: %w", err)
		}
		old = append(old, folded{deletes: nilIfEmpty(d), inserts: nilIfEmpty(i), updates: nilIfEmpty(u), estimates: nilIfEmpty(e), capacity: nilIfEmpty(cp)})
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return fmt.Errorf("checkpoint: read the log: %w", err)
	}
	for _, f := range old {
		if err := c.apply(tx, f); err != nil {
			return err
		}
	}
	if len(old) > 0 {
		if _, err := tx.Exec(`DELETE FROM log`); err != nil {
			return fmt.Errorf("checkpoint: empty the log: %w", err)
		}
	}
	rows, err = tx.Query(`SELECT seq, ops FROM oplog ORDER BY seq`)
	if err != nil {
		return fmt.Errorf("checkpoint: read the log: %w", err)
	}
	defer rows.Close()
	var batches [][]core.Op
	for rows.Next() {
		var seq int64
		var row []byte
		if err := rows.Scan(&seq, &row); err != nil {
			return fmt.Errorf("checkpoint: read the log: %w", err)
		}
		ops, err := decodeOps(row)
		if err != nil {
			return fmt.Errorf("checkpoint: log row %d: %w (the file is damaged: move it away to start empty; the queue requeues its tasks)", seq, err)
		}
		batches = append(batches, ops)
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("checkpoint: read the log: %w", err)
	}
	if len(batches) == 0 {
		return nil
	}
	var scratch foldScratch
	f, err := scratch.fold(nil, batches...)
	if err != nil {
		return err
	}
	return c.apply(tx, f)
}

func nilIfEmpty(s string) []byte {
	if s == "" {
		return nil
	}
	return []byte(s)
}

// apply writes what a fold left behind with the set-based statements:
// one statement per kind of change, however many tasks.
func (c *Checkpoint) apply(tx *sql.Tx, f folded) error {
	for _, w := range []struct {
		stmt *sql.Stmt
		arg  []byte
	}{{c.del, f.deletes}, {c.insert, f.inserts}, {c.update, f.updates}, {c.estimate, f.estimates}, {c.capacity, f.capacity}} {
		if w.arg == nil {
			continue
		}
		// As text: jsonb_each reads a blob as JSONB.
		if _, err := tx.Stmt(w.stmt).Exec(string(w.arg)); err != nil {
			return fmt.Errorf("checkpoint: %w", err)
		}
	}
	return nil
}

// folded is what a list of ops leaves behind, as JSON arrays for the
// set-based statements (nil: nothing of that kind).
type folded struct {
	deletes   []byte // [[task_id, attempt], ...]: rows to delete first
	inserts   []byte // [[task_id, attempt, body, state, worker, batch, result|null], ...] in the order of their adds
	updates   []byte // [[task_id, attempt, state, worker|null, batch|null, result|null], ...]
	estimates []byte // [[job, n, mean, dev], ...]
	capacity  []byte // the last capacity state

	// With the stored rows known: the rows deleted and the rows written.
	gone, wrote []pilotproto.TaskRef
}

// foldScratch is fold's memory, kept for the next fold.
type foldScratch struct {
	nets  []taskNet
	index map[pilotproto.TaskRef]int32
}

// taskNet is the net effect of one task's ops.
type taskNet struct {
	ref     pilotproto.TaskRef
	deleted bool             // its stored row goes first (a delete, maybe followed by an add)
	added   *pilotproto.Task // an add: the row is written whole from its body (encoded only if the row survives the fold)
	created int              // with added: the index in fold's adds of the add that created the row
	touched bool             // state (and maybe worker, batch, result) set
	state   core.State
	placed  bool // worker and batch set (an add, an assign, a requeue)
	worker  string
	batch   int64
	result  *pilotproto.Result // a finish's (nil: none, the stored result stays)
}

// fold folds ops per task in order: an add writes the whole row, an
// assign sets state, worker and batch, a requeue makes it pending with no
// worker, a finish sets state and result, a delete removes the row and
// whatever came before it in ops. The last estimate of a job and the last
// capacity state win. stored, when not nil, are the rows the tasks table
// holds: a row is deleted only if it is there.
func (s *foldScratch) fold(stored map[pilotproto.TaskRef]struct{}, batches ...[]core.Op) (folded, error) {
	nops := 0
	for _, ops := range batches {
		nops += len(ops)
	}
	var f folded
	// The tasks' nets in the order of their first op; index maps a task
	// to its net (an index, not a pointer: one allocation for all nets).
	if s.index == nil {
		s.index = make(map[pilotproto.TaskRef]int32, nops/3+1)
	}
	nets, index := s.nets[:0], s.index
	defer func() {
		clear(nets) // the tasks and results they point to go with the ops
		s.nets = nets[:0]
		clear(index)
	}()
	nets = slices.Grow(nets, nops/3+1)
	// A new row takes its place (seq) at the first add since the task's
	// row was last deleted; a later add of the same row keeps it. adds
	// are the nets of those first adds, in order.
	var adds []int32
	est := map[int64]core.Estimator{}
	var jobs []int64
	var capState *capacity.State
	for _, ops := range batches {
		for i := range ops {
			o := &ops[i]
			var n *taskNet
			var j int32
			switch o.Kind {
			case core.OpAdd, core.OpAssign, core.OpRequeue, core.OpFinish, core.OpDelete:
				var ok bool
				if j, ok = index[o.Ref]; !ok {
					j = int32(len(nets))
					nets = append(nets, taskNet{ref: o.Ref})
					index[o.Ref] = j
				}
				n = &nets[j]
			}
			switch o.Kind {
			case core.OpAdd:
				created := n.created
				if n.added == nil {
					created = len(adds)
					adds = append(adds, j)
				}
				*n = taskNet{ref: o.Ref, deleted: n.deleted, added: o.Task, created: created, touched: true, state: core.StatePending, placed: true}
			case core.OpAssign:
				n.touched, n.state, n.placed, n.worker, n.batch = true, core.StateAssigned, true, o.Worker, o.Batch
			case core.OpRequeue:
				n.touched, n.state, n.placed, n.worker, n.batch = true, core.StatePending, true, "", 0
			case core.OpFinish:
				n.touched, n.state, n.result = true, core.StateFinal, o.Result
			case core.OpDelete:
				*n = taskNet{ref: o.Ref, deleted: true}
			case core.OpEstimate:
				if _, ok := est[o.Job]; !ok {
					jobs = append(jobs, o.Job)
				}
				est[o.Job] = o.Est
			case core.OpCapacity:
				capState = o.Capacity
			case core.OpFenceCheck:
			default:
				return f, fmt.Errorf("checkpoint: unknown op %d", o.Kind)
			}
		}
	}
	var del, ins, upd, es jsonRows
	for k := range nets {
		n := &nets[k]
		if n.deleted && stored != nil {
			if _, ok := stored[n.ref]; !ok {
				n.deleted = false // never written: nothing to delete
			} else {
				f.gone = append(f.gone, n.ref)
			}
		}
		if n.deleted {
			b := del.next()
			b = strconv.AppendInt(b, n.ref.TaskID, 10)
			b = append(b, ',')
			b = strconv.AppendInt(b, int64(n.ref.Attempt), 10)
			del.b = append(b, ']')
		}
		if n.added == nil && n.touched {
			b := upd.next()
			b = strconv.AppendInt(b, n.ref.TaskID, 10)
			b = append(b, ',')
			b = strconv.AppendInt(b, int64(n.ref.Attempt), 10)
			b = append(b, ',')
			b = appendJSONString(b, string(n.state))
			if n.placed {
				b = append(b, ',')
				b = appendJSONString(b, n.worker)
				b = append(b, ',')
				b = strconv.AppendInt(b, n.batch, 10)
			} else {
				b = append(b, ",null,null"...)
			}
			b = append(b, ',')
			b = appendResultOrNull(b, n.result)
			upd.b = append(b, ']')
		}
	}
	for i, j := range adds {
		n := &nets[j]
		if n.added == nil || n.created != i {
			continue // deleted since, or created again after a delete (the later place counts)
		}
		if stored != nil {
			f.wrote = append(f.wrote, n.ref)
		}
		b := ins.next()
		b = strconv.AppendInt(b, n.ref.TaskID, 10)
		b = append(b, ',')
		b = strconv.AppendInt(b, int64(n.ref.Attempt), 10)
		b = append(b, ',')
		b = appendTaskJSON(b, n.added)
		b = append(b, ',')
		b = appendJSONString(b, string(n.state))
		b = append(b, ',')
		b = appendJSONString(b, n.worker)
		b = append(b, ',')
		b = strconv.AppendInt(b, n.batch, 10)
		b = append(b, ',')
		b = appendResultOrNull(b, n.result)
		ins.b = append(b, ']')
	}
	for _, job := range jobs {
		e := est[job]
		if math.IsNaN(e.Mean) || math.IsInf(e.Mean, 0) || math.IsNaN(e.Dev) || math.IsInf(e.Dev, 0) {
			return f, fmt.Errorf("checkpoint: estimate of job %d: %+v is not a number the checkpoint stores", job, e)
		}
		b := es.next()
		b = strconv.AppendInt(b, job, 10)
		b = append(b, ',')
		b = strconv.AppendInt(b, int64(e.N), 10)
		b = append(b, ',')
		b = strconv.AppendFloat(b, e.Mean, 'g', -1, 64)
		b = append(b, ',')
		b = strconv.AppendFloat(b, e.Dev, 'g', -1, 64)
		es.b = append(b, ']')
	}
	if capState != nil {
		b, err := json.Marshal(capState)
		if err != nil {
			return f, fmt.Errorf("checkpoint: %w", err)
		}
		f.capacity = b
	}
	f.deletes, f.inserts, f.updates, f.estimates = del.bytes(), ins.bytes(), upd.bytes(), es.bytes()
	return f, nil
}

func appendResultOrNull(b []byte, r *pilotproto.Result) []byte {
	if r == nil {
		return append(b, "null"...)
	}
	return appendResultJSON(b, r)
}

// jsonRows builds a JSON array of rows (arrays): next opens a row, its
// caller appends the values and the row's closing bracket.
type jsonRows struct{ b []byte }

func (a *jsonRows) next() []byte {
	if a.b == nil {
		return append(a.b, '[', '[')
	}
	return append(a.b, ',', '[')
}

func (a *jsonRows) bytes() []byte {
	if a.b == nil {
		return nil
	}
	return append(a.b, ']')
}
