package master

import (
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	_ "github.com/mattn/go-sqlite3" // SQLite driver (cgo)

	"github.com/harvest-hpc/harvest/capacity"
	"github.com/harvest-hpc/harvest/master/core"
	"github.com/harvest-hpc/harvest/pilotproto"
)

// The checkpoint is one SQLite file per master epoch in the pilots'
// shared state directory, master-<epoch>.db: the master of epoch N is the
// only process that ever writes master-N.db. A new master, once the queue
// has granted it the lease (so the previous master's lease is over and
// that master has stopped writing, see Checkpoint.HoldUntil), reads the
// newest older file read-only and without locks (SQLite's immutable URI
// flag), copies it into its own file (VACUUM INTO a temporary name, then
// an atomic rename), and removes the superseded files. Nothing relies on
// file locks or shared memory between hosts (network file systems do not
// keep them coherent; Lustre with localflock does not share them at all),
// and a deposed master that is still running writes to its own file,
// never to its successor's. The journal is a rollback journal (TRUNCATE
// or DELETE), never WAL: WAL's index is shared memory, one host only.

// migrations[i] brings a checkpoint file from schema version i to i+1
// (PRAGMA user_version). Append only: a master refuses a file whose
// version it does not know. (The per-epoch files started again at 1; the
// single master.db of older harvests is not read, see docs/pilot.md.)
var migrations = []string{
	// 1: the tasks the master holds, the learnt task durations (a new
	// master shrinks batches to its workers' deadlines from its first
	// hand-out), the capacity rule's state (JSON of capacity.State).
	`CREATE TABLE meta (k TEXT PRIMARY KEY, v INTEGER NOT NULL);
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
	CREATE TABLE estimates (
		job_id INTEGER PRIMARY KEY,
		n      INTEGER NOT NULL,
		mean   REAL NOT NULL,
		dev    REAL NOT NULL
	);
	CREATE TABLE capacity (
		id    INTEGER PRIMARY KEY CHECK (id = 1),
		state TEXT NOT NULL
	);`,
	// 2: where each worker's pilot listens: a new master probes the
	// workers that hold batches and do not come back, and requeues at
	// once the batches of those whose pilot is gone.
	`CREATE TABLE workers (
		id      TEXT PRIMARY KEY,
		address TEXT NOT NULL
	);`,
}

// SchemaVersion is the checkpoint schema this harvest writes.
var SchemaVersion = len(migrations)

// ErrCheckpointVersion: the checkpoint was written by a newer harvest.
var ErrCheckpointVersion = errors.New("checkpoint schema is newer than this harvest")

// ErrLeaseLost: the master's lease may have run out (no renewal answered
// in time): it writes nothing more, a successor may be reading its file.
var ErrLeaseLost = errors.New("master lease not renewed in time: the checkpoint is no longer written")

// Journal modes the checkpoint accepts (rollback journals: no shared
// memory, no WAL index, nothing but the files).
var journalModes = []string{"TRUNCATE", "DELETE"}

// DefaultJournal is the checkpoint's journal mode unless configured.
const DefaultJournal = "TRUNCATE"

// CheckJournal refuses a journal mode the shared directory cannot hold.
func CheckJournal(mode string) error {
	if strings.EqualFold(mode, "WAL") {
		return fmt.Errorf("checkpoint journal WAL is refused: WAL keeps its index in shared memory, which only works with every process on one host, and the checkpoint lives on the pilots' shared file system (NFS, Lustre, GPFS, BeeGFS); use TRUNCATE (default) or DELETE")
	}
	if !slices.Contains(journalModes, mode) {
		return fmt.Errorf("checkpoint journal %q: want TRUNCATE or DELETE", mode)
	}
	return nil
}

// FileName is the checkpoint file of a master epoch.
func FileName(epoch int64) string { return fmt.Sprintf("master-%d.db", epoch) }

var (
	fileRE = regexp.MustCompile(`^master-([0-9]{1,18})\.db$`)
	tmpRE  = regexp.MustCompile(`^master-([0-9]{1,18})\.db\.tmp$`)
)

// Checkpoint is one master epoch's state file. Every write goes through
// Commit, and none is made once the lease may be over (HoldUntil).
type Checkpoint struct {
	db    *sql.DB
	path  string
	file  os.FileInfo // path when opened: a successor removes it (fenced)
	epoch int64

	del, insert, update, estimate, capacity, worker *sql.Stmt
	commits                                         atomic.Int64                  // Commit calls (for tests)
	gate                                            atomic.Pointer[chan struct{}] // tests: a commit waits for it to close

	mu   sync.Mutex
	hold time.Time // no write after this (zero: no deadline known)

	// stored are the rows of the tasks table: a fold deletes only those,
	// not every task that came and went within one commit.
	stored map[pilotproto.TaskRef]struct{}
	// scratch is the fold's memory, reused by every commit.
	scratch foldScratch
}

// Restored says where a checkpoint's content came from.
type Restored struct {
	From    string   // the previous epoch's file it was copied from ("": started empty)
	Journal bool     // a non-empty journal lay beside that file: SQLite opened it read-write first, to roll the journal back if it is hot (its master died inside a commit; a journal its master only invalidated, as locking_mode EXCLUSIVE leaves it, is left alone)
	Removed []string // superseded files removed
}

// OpenCheckpoint opens epoch's checkpoint in dir. If it does not exist it
// is made from the newest older epoch's file (read-only, immutable: no
// lock taken), or empty; older epochs' files are then removed. A file of
// a newer epoch in dir means a newer master exists: ErrFenced. Call it
// only once the queue has granted epoch's lease.
func OpenCheckpoint(dir string, epoch int64, journal string) (*Checkpoint, Restored, error) {
	var info Restored
	if err := CheckJournal(journal); err != nil {
		return nil, info, err
	}
	if epoch <= 0 {
		return nil, info, fmt.Errorf("checkpoint: epoch %d", epoch)
	}
	path := filepath.Join(dir, FileName(epoch))
	prev, newer, err := epochs(dir, epoch)
	if err != nil {
		return nil, info, err
	}
	if newer > 0 {
		return nil, info, fmt.Errorf("checkpoint %s exists, we have epoch %d: %w", FileName(newer), epoch, ErrFenced)
	}
	if _, err := os.Stat(path); errors.Is(err, os.ErrNotExist) && prev > 0 {
		info.From = filepath.Join(dir, FileName(prev))
		if info.Journal, err = copyEpoch(info.From, path); err != nil {
			return nil, info, err
		}
	} else if err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, info, fmt.Errorf("checkpoint %s: %w", path, err)
	}
	c, err := open(path, epoch, journal)
	if err != nil {
		return nil, info, err
	}
	// Ours is written (and synced, by the claim's commit): the older
	// files are superseded.
	info.Removed = removeOlder(dir, epoch)
	return c, info, nil
}

// epochs finds the newest checkpoint file older than epoch and the newest
// newer than it (0: none).
func epochs(dir string, epoch int64) (prev, newer int64, err error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return 0, 0, fmt.Errorf("checkpoint directory: %w", err)
	}
	for _, e := range ents {
		m := fileRE.FindStringSubmatch(e.Name())
		if m == nil {
			continue
		}
		n, err := strconv.ParseInt(m[1], 10, 64)
		if err != nil {
			continue
		}
		switch {
		case n < epoch:
			prev = max(prev, n)
		case n > epoch:
			newer = max(newer, n)
		}
	}
	return prev, newer, nil
}

// uri makes a SQLite URI of a file path and parameters.
func uri(path, params string) string {
	r := strings.NewReplacer("%", "%25", "?", "%3f", "#", "%23")
	return "file:" + r.Replace(path) + "?" + params
}

// copyEpoch copies the previous epoch's file src into dst: read-only and
// immutable (no lock, no journal looked at), VACUUM INTO a temporary
// name, renamed into place (atomic). A hot journal beside src (its master
// died inside a commit) is rolled back first: immutable would ignore it
// and read half a transaction.
func copyEpoch(src, dst string) (rolledBack bool, err error) {
	if fi, err := os.Stat(src + "-journal"); err == nil && fi.Size() > 0 {
		// Its master's lease is over: nobody writes src any more. Open
		// it read-write without locks so SQLite plays the journal back.
		db, err := sql.Open("sqlite3", uri(src, "mode=rw&nolock=1"))
		if err != nil {
			return false, fmt.Errorf("checkpoint %s: roll back its journal: %w", src, err)
		}
		var n int
		err = db.QueryRow(`SELECT count(*) FROM sqlite_master`).Scan(&n)
		db.Close()
		if err != nil {
			return false, fmt.Errorf("checkpoint %s: roll back its journal: %w", src, err)
		}
		rolledBack = true
	}
	db, err := sql.Open("sqlite3", uri(src, "mode=ro&immutable=1"))
	if err != nil {
		return rolledBack, fmt.Errorf("checkpoint %s: %w", src, err)
	}
	defer db.Close()
	if err := checkVersion(db); err != nil {
		return rolledBack, fmt.Errorf("checkpoint %s: %w", src, err)
	}
	tmp := dst + ".tmp"
	os.Remove(tmp) // an earlier try's, never renamed: nobody else writes our epoch's names
	if _, err := db.Exec(`VACUUM INTO ?`, tmp); err != nil {
		os.Remove(tmp)
		return rolledBack, fmt.Errorf("checkpoint: copy %s: %w (if the file is damaged, move it away: the next master starts empty and the queue requeues its tasks)", src, err)
	}
	// The pilots' account only: the checkpoint holds every task's command.
	if err := os.Chmod(tmp, 0o600); err != nil {
		return rolledBack, fmt.Errorf("checkpoint: %w", err)
	}
	if err := os.Rename(tmp, dst); err != nil {
		os.Remove(tmp)
		return rolledBack, fmt.Errorf("checkpoint: %w", err)
	}
	return rolledBack, syncDir(filepath.Dir(dst))
}

// syncDir makes a rename in dir durable.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("checkpoint directory: %w", err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil && !errors.Is(err, os.ErrInvalid) {
		return fmt.Errorf("checkpoint directory: sync: %w", err)
	}
	return nil
}

// removeOlder removes the checkpoint files of epochs before epoch (and
// their journals and temporary copies). A deposed master still running
// writes to its unlinked file: it never reaches ours.
func removeOlder(dir string, epoch int64) []string {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil
	}
	var gone []string
	for _, e := range ents {
		name := e.Name()
		base := strings.TrimSuffix(name, "-journal")
		m := fileRE.FindStringSubmatch(base)
		if m == nil {
			m = tmpRE.FindStringSubmatch(name)
		}
		if m == nil {
			continue
		}
		if n, err := strconv.ParseInt(m[1], 10, 64); err == nil && n < epoch {
			if os.Remove(filepath.Join(dir, name)) == nil {
				gone = append(gone, name)
			}
		}
	}
	return gone
}

// open opens (creating if needed) the checkpoint file of our epoch.
func open(path string, epoch int64, journal string) (*Checkpoint, error) {
	// One writer, ever: locking_mode EXCLUSIVE takes SQLite's lock once
	// and keeps it (no lock traffic per commit); synchronous FULL: a
	// commit is on the server's disk before the master acts on it.
	dsn := uri(path, fmt.Sprintf("_txlock=immediate&_busy_timeout=10000&_journal_mode=%s&_synchronous=FULL&_locking_mode=EXCLUSIVE", journal))
	db, err := sql.Open("sqlite3", dsn)
	if err != nil {
		return nil, fmt.Errorf("checkpoint %s: %w", path, err)
	}
	// One connection: the master serialises its writes anyway.
	db.SetMaxOpenConns(1)
	fail := func(err error) (*Checkpoint, error) {
		db.Close()
		return nil, fmt.Errorf("checkpoint %s: %w", path, err)
	}
	if err := migrate(db, epoch); err != nil {
		return fail(err)
	}
	if err := os.Chmod(path, 0o600); err != nil {
		return fail(err)
	}
	fi, err := os.Stat(path)
	if err != nil {
		return fail(err)
	}
	c := &Checkpoint{db: db, path: path, file: fi, epoch: epoch}
	stmts := []struct {
		dst **sql.Stmt
		sql string
	}{
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
		{&c.worker, `INSERT INTO workers (id, address) SELECT value->>0, value->>1 FROM jsonb_each(?) WHERE true
			ON CONFLICT (id) DO UPDATE SET address = excluded.address`},
	}
	for _, s := range stmts {
		if *s.dst, err = db.Prepare(s.sql); err != nil {
			return fail(fmt.Errorf("prepare: %w", err))
		}
	}
	if err := c.loadStored(); err != nil {
		return fail(err)
	}
	return c, nil
}

// checkVersion refuses a file of a schema this harvest does not know.
func checkVersion(db *sql.DB) error {
	var v int
	if err := db.QueryRow(`PRAGMA user_version`).Scan(&v); err != nil {
		return fmt.Errorf("schema version: %w", err)
	}
	if v > SchemaVersion {
		return fmt.Errorf("%w: version %d, this harvest knows up to %d; run the newer harvest in every pilot (or move the file away to start empty)",
			ErrCheckpointVersion, v, SchemaVersion)
	}
	return nil
}

// migrate brings the schema to SchemaVersion and records the file's
// epoch, in one transaction.
func migrate(db *sql.DB, epoch int64) error {
	if err := checkVersion(db); err != nil {
		return err
	}
	tx, err := db.Begin()
	if err != nil {
		return fmt.Errorf("schema: %w", err)
	}
	defer tx.Rollback()
	var v int
	if err := tx.QueryRow(`PRAGMA user_version`).Scan(&v); err != nil {
		return fmt.Errorf("schema version: %w", err)
	}
	for i := v; i < SchemaVersion; i++ {
		if _, err := tx.Exec(migrations[i]); err != nil {
			return fmt.Errorf("schema migration %d -> %d: %w", i, i+1, err)
		}
	}
	if _, err := tx.Exec(fmt.Sprintf(`PRAGMA user_version = %d`, SchemaVersion)); err != nil {
		return fmt.Errorf("schema version: %w", err)
	}
	if _, err := tx.Exec(`INSERT INTO meta (k, v) VALUES ('epoch', ?) ON CONFLICT (k) DO UPDATE SET v = excluded.v`, epoch); err != nil {
		return fmt.Errorf("epoch: %w", err)
	}
	// Only the addresses of workers holding batches matter to a new
	// master; the others register again and are stored again.
	if _, err := tx.Exec(`DELETE FROM workers WHERE id NOT IN (SELECT worker FROM tasks WHERE state = 'assigned')`); err != nil {
		return fmt.Errorf("workers: %w", err)
	}
	return tx.Commit()
}

// Path is the checkpoint's file.
func (c *Checkpoint) Path() string { return c.path }

// Close closes the database.
func (c *Checkpoint) Close() error { return c.db.Close() }

// HoldUntil sets when the lease may run out at the latest, as this master
// knows it (a renewal's answer: the time the renewal was sent plus the
// TTL, less a margin). Commit writes nothing after it: by then the queue
// may have granted the lease to a successor, which reads our file.
func (c *Checkpoint) HoldUntil(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if t.After(c.hold) {
		c.hold = t
	}
}

// fence fails once a successor has superseded our file (removed it after
// copying it into its own): a master that lived on past its lease learns
// it is deposed at its next commit (its writes went to its own file,
// never to the successor's, which is what makes this late check safe).
func (c *Checkpoint) fence() error {
	fi, err := os.Stat(c.path)
	if errors.Is(err, os.ErrNotExist) || (err == nil && !os.SameFile(fi, c.file)) {
		return fmt.Errorf("checkpoint %s was superseded by a newer master's: %w", filepath.Base(c.path), ErrFenced)
	}
	if err != nil {
		return fmt.Errorf("checkpoint: %w", err)
	}
	return nil
}

func (c *Checkpoint) held() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.hold.IsZero() && !time.Now().Before(c.hold) {
		return fmt.Errorf("%w (held until %s)", ErrLeaseLost, c.hold.Format(time.RFC3339Nano))
	}
	return nil
}

// loadStored reads which rows the tasks table holds.
func (c *Checkpoint) loadStored() error {
	rows, err := c.db.Query(`SELECT task_id, attempt FROM tasks`)
	if err != nil {
		return err
	}
	defer rows.Close()
	stored := map[pilotproto.TaskRef]struct{}{}
	for rows.Next() {
		var k pilotproto.TaskRef
		if err := rows.Scan(&k.TaskID, &k.Attempt); err != nil {
			return err
		}
		stored[k] = struct{}{}
	}
	if err := rows.Err(); err != nil {
		return err
	}
	c.stored = stored
	return nil
}

// Load returns every stored task in the order the master received them,
// and the learnt task durations by job.
func (c *Checkpoint) Load() ([]core.Row, map[int64]core.Estimator, error) {
	rows, err := c.db.Query(`SELECT t.body, t.state, t.worker, t.batch, t.result, coalesce(w.address, '')
		FROM tasks AS t LEFT JOIN workers AS w ON t.state = 'assigned' AND w.id = t.worker ORDER BY t.seq`)
	if err != nil {
		return nil, nil, fmt.Errorf("checkpoint load: %w", err)
	}
	defer rows.Close()
	var out []core.Row
	for rows.Next() {
		var body, result, state string
		var r core.Row
		if err := rows.Scan(&body, &state, &r.Worker, &r.Batch, &result, &r.Address); err != nil {
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

// Commit stores ops in one transaction: folded per task (a task added,
// handed out and finished within one group is one row written), applied
// with one set-based statement per kind of change. Nothing is written
// once the lease may be over (ErrLeaseLost), nor when it fails. The ops
// may come in several slices (a group of Readies), in order.
func (c *Checkpoint) Commit(ops ...[]core.Op) error {
	c.commits.Add(1)
	if g := c.gate.Load(); g != nil {
		<-*g
	}
	if err := c.held(); err != nil {
		return err
	}
	if err := c.fence(); err != nil {
		return err
	}
	f, err := c.scratch.fold(c.stored, ops...)
	if err != nil {
		return err
	}
	if f.empty() {
		return nil // fence checks only: the file is ours alone
	}
	tx, err := c.db.Begin()
	if err != nil {
		return fmt.Errorf("checkpoint: %w", err)
	}
	defer tx.Rollback()
	if err := c.apply(tx, f); err != nil {
		return err
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("checkpoint: commit: %w", err)
	}
	for _, k := range f.gone {
		delete(c.stored, k)
	}
	for _, k := range f.wrote {
		c.stored[k] = struct{}{}
	}
	return nil
}

// apply writes what a fold left behind with the set-based statements:
// one statement per kind of change, however many tasks.
func (c *Checkpoint) apply(tx *sql.Tx, f folded) error {
	for _, w := range []struct {
		stmt *sql.Stmt
		arg  []byte
	}{{c.del, f.deletes}, {c.insert, f.inserts}, {c.update, f.updates}, {c.estimate, f.estimates}, {c.capacity, f.capacity}, {c.worker, f.workers}} {
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
	workers   []byte // [[worker, address], ...]: the last address of each

	// With the stored rows known: the rows deleted and the rows written.
	gone, wrote []pilotproto.TaskRef
}

func (f *folded) empty() bool {
	return f.deletes == nil && f.inserts == nil && f.updates == nil && f.estimates == nil && f.capacity == nil && f.workers == nil
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
	addr := map[string]string{}
	var workers []string
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
			case core.OpWorker:
				if _, ok := addr[o.Worker]; !ok {
					workers = append(workers, o.Worker)
				}
				addr[o.Worker] = o.Address
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
	var ws jsonRows
	for _, w := range workers {
		b := ws.next()
		b = appendJSONString(b, w)
		b = append(b, ',')
		b = appendJSONString(b, addr[w])
		ws.b = append(b, ']')
	}
	f.deletes, f.inserts, f.updates, f.estimates, f.workers = del.bytes(), ins.bytes(), upd.bytes(), es.bytes(), ws.bytes()
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
