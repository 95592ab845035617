package master

import (
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
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
	// 3: grants, not a row per task (grants.go): a job's fixed fields
	// once, a grant's entries once, their states in one row per grant.
	// A file of version 2 has its tasks moved into grants when it is
	// opened (upgradeTasks), and the tasks table dropped.
	`CREATE TABLE jobs (
		job_id INTEGER PRIMARY KEY,
		form   TEXT NOT NULL
	);
	CREATE TABLE grants (
		id      INTEGER PRIMARY KEY,
		job_id  INTEGER NOT NULL,
		attempt INTEGER NOT NULL,
		first   INTEGER NOT NULL,
		names   TEXT,
		body    TEXT,
		CHECK ((names IS NULL) <> (body IS NULL))
	);
	CREATE TABLE runs (
		grant_id INTEGER PRIMARY KEY,
		runs     TEXT NOT NULL
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

	stmts   map[string]*sql.Stmt          // the set-based statements, by the writes field they take
	commits atomic.Int64                  // Commit calls (for tests)
	wrote   atomic.Int64                  // transactions committed (for the bench)
	gate    atomic.Pointer[chan struct{}] // tests: a commit waits for it to close

	mu   sync.Mutex
	hold time.Time // no write after this (zero: no deadline known)

	// m is the file's content as the commits left it; rows is what
	// open read, for Load.
	m    *model
	rows []core.Row
	est  map[int64]core.Estimator
	// broken: a commit failed after the model took its ops: memory is
	// ahead of the file, so nothing more is written (the master stops).
	broken error
	// tidy is what the next transaction deletes first (rows a restore
	// found useless).
	tidy []tidy
}

type tidy struct{ sql, arg string }

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
		return nil, info, stateDirError(dir, err)
	}
	if newer > 0 {
		return nil, info, fmt.Errorf("checkpoint %s exists, we have epoch %d: %w", FileName(newer), epoch, ErrFenced)
	}
	_, err = os.Stat(path)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, info, stateDirError(dir, fmt.Errorf("checkpoint %s: %w", path, err))
	}
	// A file this open makes and cannot finish (a full or read-only
	// directory) is removed: left, the next epoch would restore from it
	// instead of from the last good one, and every try would leave one more.
	created := err != nil
	fail := func(err error) (*Checkpoint, Restored, error) {
		if created {
			removeEpoch(path)
		}
		return nil, info, stateDirError(dir, err)
	}
	if created && prev > 0 {
		info.From = filepath.Join(dir, FileName(prev))
		if info.Journal, err = copyEpoch(info.From, path); err != nil {
			return fail(err)
		}
	}
	c, err := open(path, epoch, journal)
	if err != nil {
		return fail(err)
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
		if errno, ok := stateErrno(err); ok {
			// Not a damaged file: moving it away would lose the tasks.
			return rolledBack, fmt.Errorf("checkpoint: copy %s: %w (%v: free space in %s, or make it writable, and keep the file: the next master restores from it)", src, err, errno, filepath.Dir(dst))
		}
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

// removeEpoch removes an epoch's checkpoint file and what SQLite and
// copyEpoch make beside it.
func removeEpoch(path string) {
	for _, p := range []string{path, path + "-journal", path + "-wal", path + "-shm", path + ".tmp"} {
		os.Remove(p)
	}
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
	// The file holds users' commands and entries: 0600 before the first
	// write, so the rollback journal SQLite then creates takes the same
	// mode (its unix VFS copies the database's); a journal left by an
	// older release is tightened too.
	if err := db.Ping(); err != nil {
		return fail(err)
	}
	if err := os.Chmod(path, 0o600); err != nil {
		return fail(err)
	}
	if err := os.Chmod(path+"-journal", 0o600); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fail(err)
	}
	if err := migrate(db, epoch); err != nil {
		return fail(err)
	}
	fi, err := os.Stat(path)
	if err != nil {
		return fail(err)
	}
	c := &Checkpoint{db: db, path: path, file: fi, epoch: epoch, stmts: map[string]*sql.Stmt{}}
	for name, q := range statements {
		st, err := db.Prepare(q)
		if err != nil {
			return fail(fmt.Errorf("prepare: %w", err))
		}
		c.stmts[name] = st
	}
	if err := c.upgradeTasks(); err != nil {
		return fail(err)
	}
	if err := c.read(); err != nil {
		return fail(err)
	}
	return c, nil
}

// statements are the set-based writes, each taking one JSON array (the
// writes field of its name): one statement per kind of change, however
// many grants.
var statements = map[string]string{
	"jobs": `INSERT INTO jobs (job_id, form) SELECT value->>0, value->>1 FROM jsonb_each(?) WHERE true
		ON CONFLICT (job_id) DO UPDATE SET form = excluded.form`,
	"dropJobs": `DELETE FROM jobs WHERE job_id IN (SELECT value FROM jsonb_each(?))`,
	"grants": `INSERT INTO grants (id, job_id, attempt, first, names, body)
		SELECT value->>0, value->>1, value->>2, value->>3, value->>4, value->>5 FROM jsonb_each(?)`,
	"runs": `INSERT INTO runs (grant_id, runs) SELECT value->>0, value->>1 FROM jsonb_each(?) WHERE true
		ON CONFLICT (grant_id) DO UPDATE SET runs = excluded.runs`,
	"drop":     `DELETE FROM grants WHERE id IN (SELECT value FROM jsonb_each(?))`,
	"dropRuns": `DELETE FROM runs WHERE grant_id IN (SELECT value FROM jsonb_each(?))`,
	"estimates": `INSERT INTO estimates (job_id, n, mean, dev) SELECT value->>0, value->>1, value->>2, value->>3 FROM jsonb_each(?) WHERE true
		ON CONFLICT (job_id) DO UPDATE SET n = excluded.n, mean = excluded.mean, dev = excluded.dev`,
	"capacity": `INSERT INTO capacity (id, state) VALUES (1, ?) ON CONFLICT (id) DO UPDATE SET state = excluded.state`,
	"workers": `INSERT INTO workers (id, address) SELECT value->>0, value->>1 FROM jsonb_each(?) WHERE true
		ON CONFLICT (id) DO UPDATE SET address = excluded.address`,
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

// read loads the file's grants into the model and the rows Load
// returns: the tasks in the order the master received them (grant by
// grant, entry by entry), each with its state, and the learnt task
// durations. The addresses of workers that hold nothing are forgotten by
// the first commit (tidy: no transaction of its own while the pool waits
// for the new master): only those of workers holding batches matter to a
// new master (the others register again and are stored again).
func (c *Checkpoint) read() error {
	m := newModel()
	forms := map[int64]*form{}
	jrows, err := c.db.Query(`SELECT job_id, form FROM jobs`)
	if err != nil {
		return fmt.Errorf("load: %w", err)
	}
	for jrows.Next() {
		var job int64
		var body string
		fm := &form{stored: true}
		if err := jrows.Scan(&job, &body); err != nil {
			jrows.Close()
			return fmt.Errorf("load: %w", err)
		}
		if err := json.Unmarshal([]byte(body), &fm.f); err != nil {
			jrows.Close()
			return fmt.Errorf("load: job %d: %w", job, err)
		}
		fm.plain = pilotproto.PlainDir(fm.f.Dataset) && pilotproto.PlainDir(fm.f.OutputDir)
		forms[job] = fm
	}
	jrows.Close()
	if err := jrows.Err(); err != nil {
		return fmt.Errorf("load: %w", err)
	}
	addr := map[string]string{}
	if err := c.scan(`SELECT id, address FROM workers`, func(r *sql.Rows) error {
		var id, a string
		err := r.Scan(&id, &a)
		addr[id] = a
		return err
	}); err != nil {
		return err
	}
	var rows []core.Row
	holding := map[string]bool{}
	err = c.scan(`SELECT g.id, g.job_id, g.attempt, g.first, g.names, g.body, r.runs FROM grants AS g JOIN runs AS r ON r.grant_id = g.id ORDER BY g.id`,
		func(r *sql.Rows) error {
			g := &grant{stored: true}
			var names, body sql.NullString
			var runsJSON string
			if err := r.Scan(&g.id, &g.job, &g.attempt, &g.first, &names, &body, &runsJSON); err != nil {
				return err
			}
			var tasks []pilotproto.Task
			if body.Valid {
				g.whole = true
				var t pilotproto.Task
				if err := json.Unmarshal([]byte(body.String), &t); err != nil {
					return fmt.Errorf("grant %d: body: %w", g.id, err)
				}
				tasks = []pilotproto.Task{t}
			} else {
				fm := forms[g.job]
				if fm == nil {
					return fmt.Errorf("grant %d: job %d has no row", g.id, g.job)
				}
				var ns []string
				if err := json.Unmarshal([]byte(names.String), &ns); err != nil {
					return fmt.Errorf("grant %d: names: %w", g.id, err)
				}
				if tasks, err = expand(fm.f, g.first, ns, g.attempt); err != nil {
					return fmt.Errorf("grant %d: %w", g.id, err)
				}
				fm.grants++
			}
			var rs []run
			if err := json.Unmarshal([]byte(runsJSON), &rs); err != nil {
				return fmt.Errorf("grant %d: runs: %w", g.id, err)
			}
			if g.ents, err = entries(rs, len(tasks)); err != nil {
				return fmt.Errorf("grant %d: %w", g.id, err)
			}
			for i, e := range g.ents {
				if e.state == entGone {
					continue
				}
				g.live++
				m.index[g.ref(i)] = place{g, i}
				row := core.Row{Task: tasks[i], State: core.StatePending}
				switch e.state {
				case entAssigned:
					row.State, row.Worker, row.Batch, row.Address = core.StateAssigned, e.worker, e.batch, addr[e.worker]
					holding[e.worker] = true
				case entFinal:
					row.State, row.Result = core.StateFinal, e.result
					e.result.TaskID, e.result.Attempt = tasks[i].ID, tasks[i].Attempt
				}
				rows = append(rows, row)
			}
			m.grants[g.id] = g
			m.lastID = max(m.lastID, g.id)
			return nil
		})
	if err != nil {
		return err
	}
	var orphans []int64 // job rows no grant uses (none unless a file was edited by hand)
	for job, fm := range forms {
		if fm.grants > 0 {
			m.forms[job] = fm
		} else {
			orphans = append(orphans, job)
		}
	}
	if len(orphans) > 0 {
		arg, _ := json.Marshal(orphans)
		c.tidy = append(c.tidy, tidy{`DELETE FROM jobs WHERE job_id IN (SELECT value FROM json_each(?))`, string(arg)})
	}
	est := map[int64]core.Estimator{}
	if err := c.scan(`SELECT job_id, n, mean, dev FROM estimates`, func(r *sql.Rows) error {
		var job int64
		var e core.Estimator
		err := r.Scan(&job, &e.N, &e.Mean, &e.Dev)
		est[job] = e
		return err
	}); err != nil {
		return err
	}
	var idle []string
	for id := range addr {
		if !holding[id] {
			idle = append(idle, id)
		}
	}
	if len(idle) > 0 {
		arg, _ := json.Marshal(idle)
		c.tidy = append(c.tidy, tidy{`DELETE FROM workers WHERE id IN (SELECT value FROM json_each(?))`, string(arg)})
	}
	c.m, c.rows, c.est = m, rows, est
	return nil
}

// scan runs q and calls each for every row.
func (c *Checkpoint) scan(q string, each func(*sql.Rows) error) error {
	rows, err := c.db.Query(q)
	if err != nil {
		return fmt.Errorf("load: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		if err := each(rows); err != nil {
			return fmt.Errorf("load: %w", err)
		}
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("load: %w", err)
	}
	return nil
}

// upgradeTasks moves the tasks of a file of schema 2 (a row per task)
// into grants, in one transaction with dropping that table: a master of
// this harvest takes over from one of the previous release.
func (c *Checkpoint) upgradeTasks() error {
	var n int
	if err := c.db.QueryRow(`SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = 'tasks'`).Scan(&n); err != nil || n == 0 {
		return err
	}
	var ops []core.Op
	err := c.scan(`SELECT body, state, worker, batch, result FROM tasks ORDER BY seq`, func(r *sql.Rows) error {
		var body, state, worker, result string
		var batch int64
		if err := r.Scan(&body, &state, &worker, &batch, &result); err != nil {
			return err
		}
		t := new(pilotproto.Task)
		if err := json.Unmarshal([]byte(body), t); err != nil {
			return fmt.Errorf("task body: %w", err)
		}
		k := pilotproto.TaskRef{TaskID: t.ID, Attempt: t.Attempt}
		ops = append(ops, core.Op{Kind: core.OpAdd, Ref: k, Task: t})
		switch core.State(state) {
		case core.StateAssigned:
			ops = append(ops, core.Op{Kind: core.OpAssign, Ref: k, Worker: worker, Batch: batch})
		case core.StateFinal:
			res := new(pilotproto.Result)
			if err := json.Unmarshal([]byte(result), res); err != nil {
				return fmt.Errorf("task result: %w", err)
			}
			ops = append(ops, core.Op{Kind: core.OpFinish, Ref: k, Result: res})
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("upgrade: %w", err)
	}
	c.m = newModel()
	if err := c.write(`DROP TABLE tasks`, ops); err != nil {
		return fmt.Errorf("upgrade: %w", err)
	}
	return nil
}

// Load returns what open read: every stored task in the order the master
// received them, and the learnt task durations by job.
func (c *Checkpoint) Load() ([]core.Row, map[int64]core.Estimator, error) {
	rows, est := c.rows, c.est
	c.rows = nil // the core holds them now
	return rows, est, nil
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

// Commit stores ops in one transaction: each grant they touch is one row
// written (its runs), however many of its tasks changed; new grants and
// jobs are inserted, grants the queue acknowledged whole are deleted.
// Nothing is written once the lease may be over (ErrLeaseLost), nor when
// it fails. The ops may come in several slices (a group of Readies), in
// order.
func (c *Checkpoint) Commit(ops ...[]core.Op) error {
	c.commits.Add(1)
	if g := c.gate.Load(); g != nil {
		<-*g
	}
	if c.broken != nil {
		return c.broken
	}
	if err := c.held(); err != nil {
		return err
	}
	if err := c.fence(); err != nil {
		return err
	}
	return c.write("", ops...)
}

// write applies ops to the model and writes what they changed (and
// first the statement extra, if any) in one transaction. Once the model
// took them, a failure breaks the checkpoint: memory is ahead of the file.
func (c *Checkpoint) write(extra string, ops ...[]core.Op) error {
	var ch changes
	if err := c.m.apply(&ch, ops...); err != nil {
		c.broken = err
		return err
	}
	w, err := c.m.encode(&ch)
	if err != nil {
		c.broken = err
		return err
	}
	if w.empty() && extra == "" {
		return nil // fence checks only: the file is ours alone
	}
	if err := c.transact(extra, &w); err != nil {
		c.broken = fmt.Errorf("checkpoint: an earlier commit failed, the master must stop: %w", err)
		return err
	}
	return nil
}

func (c *Checkpoint) transact(extra string, w *writes) error {
	tx, err := c.db.Begin()
	if err != nil {
		return fmt.Errorf("checkpoint: %w", err)
	}
	defer tx.Rollback()
	if extra != "" {
		if _, err := tx.Exec(extra); err != nil {
			return fmt.Errorf("checkpoint: %w", err)
		}
	}
	for _, t := range c.tidy {
		if _, err := tx.Exec(t.sql, t.arg); err != nil {
			return fmt.Errorf("checkpoint: %w", err)
		}
	}
	for _, x := range []struct {
		stmt string
		arg  []byte
	}{{"jobs", w.jobs}, {"grants", w.grants}, {"runs", w.runs}, {"drop", w.drop}, {"dropRuns", w.drop}, {"dropJobs", w.dropJobs},
		{"estimates", w.estimates}, {"capacity", w.capacity}, {"workers", w.workers}} {
		if x.arg == nil {
			continue
		}
		// As text: jsonb_each reads a blob as JSONB.
		if _, err := tx.Stmt(c.stmts[x.stmt]).Exec(string(x.arg)); err != nil {
			return fmt.Errorf("checkpoint: %s: %w", x.stmt, err)
		}
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("checkpoint: commit: %w", err)
	}
	c.wrote.Add(1)
	c.tidy = nil
	return nil
}
