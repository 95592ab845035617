package store

import (
	"cmp"
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"math"
	"runtime"
	"slices"
	"strconv"
	"time"
	"unicode/utf8"
	"unsafe"

	"github.com/harvest-hpc/harvest/queue/api"
	"github.com/harvest-hpc/harvest/queue/rules"
)

// The master's hot path (a hand-out, a batch of results, a heartbeat)
// does not rewrite the rows it changes. With many users every task of a
// pull or of a batch of results is another job's: rewriting it in place
// dirtied a task page, an index page and a job page per task, each written
// whole to the WAL at commit (~100 us of write lock per task on this
// machine, the bound of the whole dispatch path). Instead each hot
// transaction appends the rows' new values to the journal (one row, a few
// sequential pages) and keeps them in memory (the overlay); a folder
// writes them into their tables later, coalesced (a task handed out and
// finished within a fold is written once, a job's counters once for all
// its tasks) and sorted by id (neighbouring tasks share pages), in short
// transactions, then deletes the journal entries it has made redundant.
//
// Every read and every write outside the hot path first folds what is
// pending (settle, cold), so it sees the tables as the hot path left them;
// a cold write also empties the overlay, so the hot path reads its
// changes back from the tables. Open replays what a crash left in the
// journal (absolute rows, in order: exact whatever part was folded).

// taskRow is a task's row: the columns the hot path reads or changes.
type taskRow struct {
	id, job                 int64
	name, state             string
	attempt, tries          int
	epoch                   int64
	pilot, pool             string
	queuedAt, assignedAt    int64
	heartbeatAt, finishedAt int64
	waitMS                  int64
	exitCode                int
	lastError               string
	seq                     int64 // journal entry of its last change not folded yet; 0: as stored
	since                   int64 // Unix ns when it became dirty (seq > 0)
	// syncedHB is the heartbeat time the journal or the table holds: a
	// heartbeat of a RUNNING task within Store.hbEvery of it moves
	// heartbeatAt in memory only (see Heartbeat).
	syncedHB int64
}

const taskColumns = `id, job_id, name, state, attempt, tries, epoch, pilot, pool, queued_at, assigned_at, heartbeat_at, finished_at, wait_ms, exit_code, last_error`

func scanTask(sc interface{ Scan(...any) error }, t *taskRow) error {
	err := sc.Scan(&t.id, &t.job, &t.name, &t.state, &t.attempt, &t.tries, &t.epoch, &t.pilot, &t.pool,
		&t.queuedAt, &t.assignedAt, &t.heartbeatAt, &t.finishedAt, &t.waitMS, &t.exitCode, &t.lastError)
	t.syncedHB = t.heartbeatAt
	return err
}

// poolKey is a row of job_pools.
type poolKey struct {
	job  int64
	pool string
}

type poolRow struct {
	done, failed int
	seq          int64
	since        int64
}

// resultRow is a result to insert, encoded as its JSON row.
type resultRow struct {
	enc        []byte
	seq, since int64
}

// overlay holds the hot path's rows not folded yet (seq > 0), and the
// clean WAITING tasks it has seen (requeued ones: the waiting lists).
type overlay struct {
	tasks   map[int64]*taskRow
	jobs    map[int64]*jobRow
	results map[[2]int64]*resultRow
	pools   map[poolKey]*poolRow
	// waiting lists, per job, the ids of its overlay tasks in WAITING,
	// ascending (tasks requeued by a result).
	waiting map[int64][]int64
	// cursor is, per job, the highest task id the hot path read from the
	// table's index of WAITING tasks since the overlay was last emptied:
	// every task of the job that the table shows WAITING with an id up to
	// it is in the overlay or in ahead (so the index is asked only for ids
	// above it).
	cursor map[int64]int64
	// ahead lists, per job, WAITING tasks read from the index but not
	// taken yet (ascending ids; their rows are read when taken).
	ahead map[int64][]int64
	dirty int // rows with seq > 0
	// live counts, per journal entry, the dirty rows whose latest change
	// it holds; entries lists the entries in order. The journal is needed
	// from the oldest entry with a live row on (oldest).
	live    map[int64]int
	entries []int64
	lastSeq int64 // the newest entry applied
	// stored lists the journal's entries not deleted yet, oldest first,
	// with their sizes (trimJournal sizes its transactions by them).
	stored []storedEntry
	// active counts, per pool, the tasks handed out and not finished:
	// those of the overlay, and those of the table the overlay does not
	// hold (base: id -> pool, read when the overlay was last emptied).
	// Several live sites read it at every pull (Outstanding): a count
	// from the table would fold the journal first.
	active      map[string]int
	base        map[int64]string
	activeStale bool // active and base are to be read again (countActive)
}

type storedEntry struct {
	seq   int64
	bytes int
}

func newOverlay() overlay {
	return overlay{tasks: map[int64]*taskRow{}, jobs: map[int64]*jobRow{}, results: map[[2]int64]*resultRow{},
		pools: map[poolKey]*poolRow{}, waiting: map[int64][]int64{}, cursor: map[int64]int64{}, ahead: map[int64][]int64{}, live: map[int64]int{},
		active: map[string]int{}, base: map[int64]string{}}
}

// change is what one hot transaction changed, applied to the overlay only
// once its journal entry is committed.
type change struct {
	tasks   []*taskRow
	jobs    []*jobRow
	results map[[2]int64][]byte
	pools   map[poolKey]*poolRow
	cursor  map[int64]int64
	// ahead are, per job, the ids of WAITING tasks read from the table's
	// index beyond what was taken (ascending): the next pulls of the job
	// take them without asking the index again.
	ahead map[int64][]int64
	seq   int64
	enc   [4]string // the journal row: tasks, jobs, results, pools (encode)
}

func (c *change) empty() bool {
	return len(c.tasks) == 0 && len(c.jobs) == 0 && len(c.results) == 0 && len(c.pools) == 0
}

// apply puts a committed change into the overlay.
func (o *overlay) apply(c *change) {
	now := time.Now().UnixNano()
	if !c.empty() {
		o.entries = append(o.entries, c.seq)
		o.lastSeq = c.seq
		o.stored = append(o.stored, storedEntry{c.seq, len(c.enc[0]) + len(c.enc[1]) + len(c.enc[2]) + len(c.enc[3])})
	}
	for _, t := range c.tasks {
		old := o.tasks[t.id]
		switch pool, inBase := o.base[t.id]; {
		case old != nil && taskActive(old.state):
			o.active[old.pool]--
		case old == nil && inBase:
			delete(o.base, t.id)
			o.active[pool]--
		}
		if taskActive(t.state) {
			o.active[t.pool]++
		}
		if old != nil {
			t.since = o.redirty(old.seq, old.since, c.seq, now)
		} else {
			t.since = o.redirty(0, 0, c.seq, now)
		}
		if old != nil && old.state == api.TaskWaiting {
			o.unlistWaiting(old)
		}
		t.seq, t.syncedHB = c.seq, t.heartbeatAt
		o.tasks[t.id] = t
		if t.state == api.TaskWaiting {
			o.listWaiting(t)
		}
	}
	for _, j := range c.jobs {
		if old := o.jobs[j.id]; old != nil {
			j.since = o.redirty(old.seq, old.since, c.seq, now)
		} else {
			j.since = o.redirty(0, 0, c.seq, now)
		}
		j.seq = c.seq
		o.jobs[j.id] = j
	}
	for k, enc := range c.results {
		o.results[k] = &resultRow{enc: enc, seq: c.seq, since: o.redirty(0, 0, c.seq, now)}
	}
	for k, p := range c.pools {
		if old := o.pools[k]; old != nil {
			p.since = o.redirty(old.seq, old.since, c.seq, now)
		} else {
			p.since = o.redirty(0, 0, c.seq, now)
		}
		p.seq = c.seq
		o.pools[k] = p
	}
	for job, ids := range c.ahead {
		if len(ids) == 0 {
			delete(o.ahead, job)
		} else {
			o.ahead[job] = ids
		}
	}
	for job, id := range c.cursor {
		o.cursor[job] = max(o.cursor[job], id)
	}
}

// beat moves a RUNNING task's heartbeat time to at in memory only (see
// Store.SetHeartbeatJournal). t is a copy of its row: the overlay's, or the
// table's, which then enters the overlay clean (as an active task stays
// after its fold), leaving the table's count of active tasks for the
// overlay's.
func (o *overlay) beat(t *taskRow, at int64) {
	row := o.tasks[t.id]
	if row == nil {
		row = t
		row.seq = 0
		o.tasks[t.id] = row
		delete(o.base, t.id)
	}
	row.heartbeatAt = max(row.heartbeatAt, at)
}

// redirty counts a row changed by entry seq at now whose previous version
// was dirty since oldSince under entry oldSeq (oldSeq 0: it was clean or
// new), and returns since when the row is dirty.
func (o *overlay) redirty(oldSeq, oldSince, seq, now int64) int64 {
	o.live[seq]++
	if oldSeq == 0 {
		o.dirty++
		return now
	}
	o.live[oldSeq]--
	return oldSince
}

// oldest is the seq of the oldest journal entry still needed (one past
// the last entry when none is).
func (o *overlay) oldest() int64 {
	for len(o.entries) > 0 && o.live[o.entries[0]] <= 0 {
		delete(o.live, o.entries[0])
		o.entries = o.entries[1:]
	}
	if len(o.entries) == 0 {
		return o.lastSeq + 1
	}
	return o.entries[0]
}

func (o *overlay) listWaiting(t *taskRow) {
	l := o.waiting[t.job]
	i, found := slices.BinarySearch(l, t.id)
	if !found {
		o.waiting[t.job] = slices.Insert(l, i, t.id)
	}
}

func (o *overlay) unlistWaiting(t *taskRow) {
	l := o.waiting[t.job]
	if i, found := slices.BinarySearch(l, t.id); found {
		l = slices.Delete(l, i, i+1)
		if len(l) == 0 {
			delete(o.waiting, t.job)
		} else {
			o.waiting[t.job] = l
		}
	}
}

// taskRows returns copies of the rows of tasks ids: the overlay's, else
// the table's (missing tasks are left out).
func (s *Store) taskRows(ctx context.Context, tx *sql.Tx, ids []int64) (map[int64]*taskRow, error) {
	out := make(map[int64]*taskRow, len(ids))
	var missing []int64
	for _, id := range ids {
		if t := s.ov.tasks[id]; t != nil {
			c := *t
			out[id] = &c
		} else {
			missing = append(missing, id)
		}
	}
	read, err := s.readTaskRows(ctx, tx, missing)
	for id, t := range read {
		out[id] = t
	}
	return out, err
}

// readTaskRows reads the table's rows of tasks ids.
func (s *Store) readTaskRows(ctx context.Context, tx *sql.Tx, ids []int64) (map[int64]*taskRow, error) {
	out := make(map[int64]*taskRow, len(ids))
	if len(ids) == 0 {
		return out, nil
	}
	err := s.eachRow(ctx, tx, readTasksSQL, ids, func(rows *sql.Rows) error {
		t := &taskRow{}
		if err := scanTask(rows, t); err != nil {
			return err
		}
		out[t.id] = t
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

var readTasksSQL = hot(`SELECT ` + taskColumns + ` FROM tasks WHERE id IN (SELECT value FROM jsonb_each(?))`)

// jobRows returns copies of the rows of jobs ids: the overlay's, else the
// table's.
func (s *Store) jobRows(ctx context.Context, tx *sql.Tx, ids []int64) (map[int64]*jobRow, error) {
	out := make(map[int64]*jobRow, len(ids))
	var missing []int64
	for _, id := range ids {
		if _, done := out[id]; done {
			continue
		}
		if j := s.ov.jobs[id]; j != nil {
			c := *j
			c.from = c.state
			out[id] = &c
		} else {
			missing = append(missing, id)
		}
	}
	if len(missing) == 0 {
		return out, nil
	}
	read, err := s.readJobs(ctx, tx, missing)
	if err != nil {
		return nil, err
	}
	for id, j := range read {
		out[id] = j
	}
	return out, nil
}

var readPoolsSQL = hot(`SELECT d.value->>0, d.value->>1, coalesce(p.done, 0), coalesce(p.failed, 0)
	FROM jsonb_each(?) AS d LEFT JOIN job_pools p ON p.job_id = d.value->>0 AND p.pool = d.value->>1`)

// poolRows returns copies of the job_pools rows of keys (zero when none).
func (s *Store) poolRows(ctx context.Context, tx *sql.Tx, keys []poolKey) (map[poolKey]*poolRow, error) {
	out := make(map[poolKey]*poolRow, len(keys))
	var missing [][2]any
	for _, k := range keys {
		if p := s.ov.pools[k]; p != nil {
			c := *p
			out[k] = &c
		} else if out[k] == nil {
			out[k] = &poolRow{}
			missing = append(missing, [2]any{k.job, k.pool})
		}
	}
	if len(missing) == 0 {
		return out, nil
	}
	err := s.eachRow(ctx, tx, readPoolsSQL, missing, func(rows *sql.Rows) error {
		var k poolKey
		var p poolRow
		if err := rows.Scan(&k.job, &k.pool, &p.done, &p.failed); err != nil {
			return err
		}
		out[k] = &p
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// encode prepares c's journal row (before the write transaction: the
// encoding need not hold SQLite's write lock).
func (c *change) encode() {
	if c.empty() {
		return
	}
	results := make([][]byte, 0, len(c.results))
	for _, enc := range c.results {
		results = append(results, enc)
	}
	c.enc = encodeArrays(c.tasks, c.jobs, results, c.pools)
}

// encodeArrays encodes rows as the four JSON arrays of a journal entry and
// of a fold ("" for none): tasks, jobs, results (each already encoded) and
// job_pools.
func encodeArrays(tasks []*taskRow, jobs []*jobRow, results [][]byte, pools map[poolKey]*poolRow) (enc [4]string) {
	if len(tasks) > 0 {
		enc[0] = encodeRows(tasks, 192, appendTask)
	}
	if len(jobs) > 0 {
		enc[1] = encodeRows(jobs, 96, appendJob)
	}
	if len(results) > 0 {
		n := 0
		for _, r := range results {
			n += len(r) + 1
		}
		enc[2] = encodeRows(results, n/len(results)+1, func(b, r []byte) []byte { return append(b, r...) })
	}
	if len(pools) > 0 {
		enc[3] = string(encodePools(pools))
	}
	return enc
}

// journal appends c's encoded rows to the journal inside tx and sets
// c.seq.
func (s *Store) journal(ctx context.Context, tx *sql.Tx, c *change) error {
	if c.empty() {
		return nil
	}
	res, err := s.exec(ctx, tx, journalSQL, c.enc[0], c.enc[1], c.enc[2], c.enc[3])
	if err != nil {
		return fmt.Errorf("journal: %w", err)
	}
	c.seq, err = res.LastInsertId()
	return err
}

var journalSQL = hot(`INSERT INTO journal (t, j, r, p) VALUES (?, ?, ?, ?)`)

// The fold statements take the journal's arrays (absolute rows).
var (
	foldTasksSQL = hot(`UPDATE tasks SET state = d.v->>1, attempt = d.v->>2, tries = d.v->>3, epoch = d.v->>4, pilot = d.v->>5, pool = d.v->>6,
		queued_at = d.v->>7, assigned_at = d.v->>8, heartbeat_at = d.v->>9, finished_at = d.v->>10, wait_ms = d.v->>11,
		exit_code = d.v->>12, last_error = d.v->>13
		FROM (SELECT value AS v FROM jsonb_each(?)) AS d WHERE tasks.id = d.v->>0`)
	foldJobsSQL = hot(`UPDATE jobs SET started_at = d.v->>2, finished_at = d.v->>3,
		n_waiting = d.v->>4, n_active = d.v->>5, n_done = d.v->>6, n_failed = d.v->>7, n_killed = d.v->>8
		FROM (SELECT value AS v FROM jsonb_each(?)) AS d WHERE jobs.id = d.v->>0`)
	// The state apart, where it changed only: assigning an indexed column
	// rewrites its index entry even when the value stays.
	foldJobStatesSQL = hot(`UPDATE jobs SET state = d.v->>1
		FROM (SELECT value AS v FROM jsonb_each(?)) AS d WHERE jobs.id = d.v->>0 AND jobs.state != d.v->>1`)
	foldResultsSQL = hot(`INSERT OR IGNORE INTO results (task_id, attempt, job_id, owner, status, exit_code, started_at, duration_ms, pilot, error_tail, cpu_s, cost, received_at, applied, pool)
		SELECT value->>0, value->>1, value->>2, value->>3, value->>4, value->>5, value->>6, value->>7, value->>8, value->>9, value->>10, value->>11, value->>12, value->>13, value->>14
		FROM jsonb_each(?) ORDER BY 1, 2`)
	foldPoolsSQL = hot(`INSERT INTO job_pools (job_id, pool, done, failed)
		SELECT value->>0, value->>1, value->>2, value->>3 FROM jsonb_each(?) WHERE true
		ON CONFLICT (job_id, pool) DO UPDATE SET done = excluded.done, failed = excluded.failed`)
)

// foldArrays writes the arrays (JSON, "" = none) into their tables.
func (s *Store) foldArrays(ctx context.Context, tx *sql.Tx, t, j, r, p string) error {
	for _, w := range []struct{ q, arg string }{{foldTasksSQL, t}, {foldJobsSQL, j}, {foldJobStatesSQL, j}, {foldResultsSQL, r}, {foldPoolsSQL, p}} {
		if w.arg == "" {
			continue
		}
		if _, err := s.exec(ctx, tx, w.q, w.arg); err != nil {
			return fmt.Errorf("fold: %w", err)
		}
	}
	return nil
}

// replayJournal folds what a crash left in the journal, in order, and
// empties it (Open, before anything else).
func (s *Store) replayJournal(ctx context.Context) (int, error) {
	n := 0
	err := s.writeUnbounded(ctx, func(tx *sql.Tx) error {
		rows, err := tx.QueryContext(inline(ctx), `SELECT t, j, r, p FROM journal ORDER BY seq`)
		if err != nil {
			return err
		}
		var entries [][4]string
		for rows.Next() {
			var e [4]string
			if err := rows.Scan(&e[0], &e[1], &e[2], &e[3]); err != nil {
				rows.Close()
				return err
			}
			entries = append(entries, e)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
		for _, e := range entries {
			if err := s.foldArrays(ctx, tx, e[0], e[1], e[2], e[3]); err != nil {
				return err
			}
		}
		n = len(entries)
		_, err = tx.ExecContext(inline(ctx), `DELETE FROM journal`)
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("replay the journal: %w", err)
	}
	return n, nil
}

// foldChunk is how many rows one fold transaction writes: 64 rows of as
// many jobs take about 1 ms on this machine (results rows, each in a page
// of its own when they are many jobs', up to 2-4 ms), which the hot path
// may have to wait.
const foldChunk = 64

// foldPlan lists the rows dirty when a fold began, lowest ids first
// (neighbouring tasks share pages).
type foldPlan struct {
	tasks, jobs []int64
	results     [][2]int64
	pools       []poolKey
}

func (p *foldPlan) empty() bool {
	return len(p.tasks)+len(p.jobs)+len(p.results)+len(p.pools) == 0
}

// With young set, the plan leaves out the rows dirty for less than
// foldAge: a task handed out then gets its result, a job's counters move
// with many tasks, and they are written once; and a fold of a longer span
// of changes writes more rows per page (a job's tasks, its results).
func (s *Store) planFold(young bool) *foldPlan {
	o := &s.ov
	p := &foldPlan{}
	cut := time.Now().Add(-foldAge).UnixNano()
	for id, t := range o.tasks {
		if t.seq > 0 && (!young || t.since < cut) {
			p.tasks = append(p.tasks, id)
		}
	}
	for id, j := range o.jobs {
		if j.seq > 0 && (!young || j.since < cut) {
			p.jobs = append(p.jobs, id)
		}
	}
	for k, r := range o.results {
		if !young || r.since < cut {
			p.results = append(p.results, k)
		}
	}
	for k, r := range o.pools {
		if r.seq > 0 && (!young || r.since < cut) {
			p.pools = append(p.pools, k)
		}
	}
	slices.Sort(p.tasks)
	slices.Sort(p.jobs)
	slices.SortFunc(p.results, func(a, b [2]int64) int { return cmp.Or(cmp.Compare(a[0], b[0]), cmp.Compare(a[1], b[1])) })
	slices.SortFunc(p.pools, func(a, b poolKey) int { return cmp.Or(cmp.Compare(a.job, b.job), cmp.Compare(a.pool, b.pool)) })
	return p
}

// foldLocked writes every dirty row into its table, in transactions of
// foldChunk rows. s.hot is held.
func (s *Store) foldLocked(ctx context.Context) error {
	if s.ov.dirty == 0 {
		return nil
	}
	p := s.planFold(false)
	for !p.empty() {
		if err := s.foldNext(ctx, p, foldChunk); err != nil {
			return err
		}
	}
	return s.trimJournal(ctx, true)
}

// foldNext writes the next rows of the plan that are still dirty (up to
// n, and chunkBytes past the first) in one transaction, with their
// current values, and marks them clean: they leave the overlay, but for
// WAITING tasks (the waiting lists). The
// transaction that ends the plan also deletes the journal entries older
// than every row still dirty. s.hot is held.
func (s *Store) foldNext(ctx context.Context, p *foldPlan, n int) error {
	o := &s.ov
	var tasks []*taskRow
	var jobs []*jobRow
	var results [][2]int64
	var pools []poolKey
	gone := false
	// room: up to n rows, and past the first no more than chunkBytes with
	// the next row's bytes (a failed task's row and its result carry its
	// error tail).
	size := 0
	room := func(next int) bool {
		rows := len(tasks) + len(jobs) + len(results) + len(pools)
		if rows >= n || (rows > 0 && size+next > chunkBytes) {
			return false
		}
		size += next
		return true
	}
	for len(p.tasks) > 0 {
		if t := o.tasks[p.tasks[0]]; t != nil && t.seq > 0 {
			if !room(rowOverhead + len(t.name) + len(t.pilot) + len(t.lastError)) {
				break
			}
			tasks = append(tasks, t)
		}
		p.tasks = p.tasks[1:]
	}
	for len(p.jobs) > 0 {
		if j := o.jobs[p.jobs[0]]; j != nil && j.seq > 0 {
			if !room(rowOverhead) {
				break
			}
			jobs = append(jobs, j)
		}
		p.jobs = p.jobs[1:]
	}
	for len(p.results) > 0 {
		if r := o.results[p.results[0]]; r != nil {
			if !room(len(r.enc)) {
				break
			}
			results = append(results, p.results[0])
		}
		p.results = p.results[1:]
	}
	for len(p.pools) > 0 && room(0) {
		if r := o.pools[p.pools[0]]; r != nil && r.seq > 0 {
			pools = append(pools, p.pools[0])
		}
		p.pools = p.pools[1:]
	}
	encResults := make([][]byte, len(results))
	for i, k := range results {
		encResults[i] = o.results[k].enc
	}
	var encPools map[poolKey]*poolRow
	if len(pools) > 0 {
		encPools = make(map[poolKey]*poolRow, len(pools))
		for _, k := range pools {
			encPools[k] = o.pools[k]
		}
	}
	enc := encodeArrays(tasks, jobs, encResults, encPools)
	if len(tasks)+len(jobs)+len(results)+len(pools) > 0 {
		err := s.write(ctx, func(tx *sql.Tx) error {
			return s.foldArrays(ctx, tx, enc[0], enc[1], enc[2], enc[3])
		})
		if err != nil {
			return err
		}
	}
	// Clean rows the hot path will read again stay: WAITING tasks (the
	// waiting lists), active tasks (their results), live jobs and their
	// per-pool counts. A cold write empties the overlay.
	for _, t := range tasks {
		o.dirty--
		o.live[t.seq]--
		t.seq = 0
		t.syncedHB = t.heartbeatAt // written as encoded: s.hot was held throughout
		if t.state != api.TaskWaiting && !taskActive(t.state) {
			delete(o.tasks, t.id)
		}
	}
	for _, j := range jobs {
		o.dirty--
		o.live[j.seq]--
		j.seq = 0
		if !rules.JobLive(j.state) {
			delete(o.jobs, j.id)
			gone = true
		}
	}
	if gone {
		s.gone.Add(1) // the fold has committed: see readPatched
	}
	for _, k := range results {
		o.dirty--
		o.live[o.results[k].seq]--
		delete(o.results, k)
	}
	for _, k := range pools {
		o.dirty--
		o.live[o.pools[k].seq]--
		o.pools[k].seq = 0
	}
	return nil
}

var trimJournalSQL = hot(`DELETE FROM journal WHERE seq <= ?1`)

// trimJournal deletes the journal entries no dirty row needs any more, in
// transactions of their own of at most trimChunk entries and, past the
// first, trimBytes of them (an entry is a hot transaction's rows, most
// a few KiB, but a batch of results with long error tails can make one of
// 100 KiB: freeing its pages costs page reads). A crash before one only
// leaves entries that replay to the same rows. With locked, s.hot is held
// throughout; else it is taken for each chunk, so the hot path runs
// between them.
func (s *Store) trimJournal(ctx context.Context, locked bool) error {
	lock := func() {
		if !locked {
			s.hot.Lock()
		}
	}
	unlock := func() {
		if !locked {
			s.hot.Unlock()
		}
	}
	lock()
	upto := s.ov.oldest()
	unlock()
	for {
		lock()
		k, last := s.ov.trimmable(upto)
		if k == 0 {
			unlock()
			return nil
		}
		err := s.write(ctx, func(tx *sql.Tx) error {
			_, err := s.exec(ctx, tx, trimJournalSQL, last)
			return err
		})
		if err == nil {
			s.ov.stored = s.ov.stored[k:]
		}
		unlock()
		if err != nil {
			return fmt.Errorf("trim the journal: %w", err)
		}
	}
}

// trimChunk and trimBytes bound one trimJournal transaction: deleting
// 2 MiB of entries held the lock 8.6 ms on this project's 2-core machine.
const (
	trimChunk = 16
	trimBytes = 256 << 10
)

// trimmable is how many of the stored entries below upto, oldest first,
// the next trim deletes (trimChunk, trimBytes), and the last one's seq.
func (o *overlay) trimmable(upto int64) (int, int64) {
	k, size := 0, 0
	for k < len(o.stored) && k < trimChunk && o.stored[k].seq < upto && (k == 0 || size+o.stored[k].bytes <= trimBytes) {
		size += o.stored[k].bytes
		k++
	}
	if k == 0 {
		return 0, 0
	}
	return k, o.stored[k-1].seq
}

// settle folds every row pending when it is called, so a read sees what
// the hot path did before it. It holds s.hot for one chunk at a time: a
// read during a busy dispatch costs the hot path a chunk's wait, not the
// whole fold.
func (s *Store) settle(ctx context.Context) error {
	s.hot.Lock()
	p := s.planFold(false)
	s.hot.Unlock()
	for !p.empty() {
		yield()
		s.hot.Lock()
		err := s.foldNext(ctx, p, foldChunk)
		s.hot.Unlock()
		if err != nil {
			return fmt.Errorf("fold the journal: %w", err)
		}
	}
	s.hot.Lock()
	defer s.hot.Unlock()
	return s.trimJournal(ctx, true)
}

// Settle folds the journal into the tables: after it, a reader of the
// database file sees every change the store committed before the call.
func (s *Store) Settle(ctx context.Context) error { return s.settle(ctx) }

// cold runs a write outside the hot path: it folds what is pending (in
// chunks, then the rest under s.hot), empties the overlay (fn may change
// any task or job) and runs fn in one transaction under s.hot.
func (s *Store) cold(ctx context.Context, fn func(tx *sql.Tx) error) error {
	_, err := s.coldTimed(ctx, fn)
	return err
}

// coldTimed is cold that also returns how long fn's transaction held the
// write lock (writeTimed).
func (s *Store) coldTimed(ctx context.Context, fn func(tx *sql.Tx) error) (time.Duration, error) {
	if err := s.settle(ctx); err != nil {
		return 0, err
	}
	if s.afterSettle != nil {
		s.afterSettle()
	}
	s.hot.Lock()
	defer s.hot.Unlock()
	if err := s.foldLocked(ctx); err != nil {
		return 0, fmt.Errorf("fold the journal: %w", err)
	}
	// foldLocked trims only when it folded something: entries whose rows
	// a folder or a reader folded since settle are still there, and the
	// new overlay would not know them.
	if err := s.trimJournal(ctx, true); err != nil {
		return 0, err
	}
	if err := s.flushHeartbeats(ctx); err != nil {
		return 0, err
	}
	s.ov = newOverlay()
	s.ov.activeStale = true // counted again at the next Outstanding, whatever fn did
	s.gone.Add(1)           // every fold has committed: see readPatched
	return s.writeTimed(ctx, func(tx *sql.Tx) error {
		// Nothing is dirty: no entry is needed. One left behind would
		// replay over fn's changes at the next Open.
		if _, err := tx.ExecContext(inline(ctx), `DELETE FROM journal`); err != nil {
			return fmt.Errorf("empty the journal: %w", err)
		}
		return fn(tx)
	})
}

var flushHeartbeatsSQL = hot(`UPDATE tasks SET heartbeat_at = d.v->>1
	FROM (SELECT value AS v FROM jsonb_each(?)) AS d WHERE tasks.id = d.v->>0`)

// flushHeartbeats writes the heartbeat times that moved in memory only
// (s.hot is held): before a cold write (the sweeps judge tasks by them)
// and at Close. The rows are clean here (folded), or their fold writes
// them anyway.
func (s *Store) flushHeartbeats(ctx context.Context) error {
	var rows []*taskRow
	for _, t := range s.ov.tasks {
		if t.heartbeatAt > t.syncedHB && t.seq == 0 {
			rows = append(rows, t)
		}
	}
	if len(rows) == 0 {
		return nil
	}
	slices.SortFunc(rows, func(a, b *taskRow) int { return cmp.Compare(a.id, b.id) })
	arg := encodeRows(rows, 32, func(b []byte, t *taskRow) []byte {
		b = append(b, '[')
		b = strconv.AppendInt(b, t.id, 10)
		b = append(b, ',')
		b = strconv.AppendInt(b, t.heartbeatAt, 10)
		return append(b, ']')
	})
	err := s.write(ctx, func(tx *sql.Tx) error {
		_, err := s.exec(ctx, tx, flushHeartbeatsSQL, arg)
		return err
	})
	if err != nil {
		return fmt.Errorf("write heartbeats: %w", err)
	}
	for _, t := range rows {
		t.syncedHB = t.heartbeatAt
	}
	return nil
}

var activeTasksSQL = hot(`SELECT id, pool FROM tasks INDEXED BY tasks_active WHERE state IN ('ASSIGNED', 'RUNNING', 'ZOMBIE')`)

// countActive reads the table's active tasks into the counts of an
// overlay emptied since (s.hot is held; Open, and Outstanding after a cold
// write): the overlay's own rows count on top.
func (s *Store) countActive(ctx context.Context) error {
	o := &s.ov
	base := map[int64]string{}
	active := map[string]int{}
	rows, err := s.query(ctx, nil, activeTasksSQL)
	if err != nil {
		return fmt.Errorf("count active tasks: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var id int64
		var pool string
		if err := rows.Scan(&id, &pool); err != nil {
			return fmt.Errorf("count active tasks: %w", err)
		}
		if _, mine := o.tasks[id]; !mine {
			base[id] = pool
			active[pool]++
		}
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("count active tasks: %w", err)
	}
	for _, t := range o.tasks {
		if taskActive(t.state) {
			active[t.pool]++
		}
	}
	o.base, o.active, o.activeStale = base, active, false
	return nil
}

// readPatched runs read, a read on the reader pool of rows the overlay
// may hold newer values of, then patch with s.hot held; patch reports
// whether it found every row read in the overlay. A row leaves the
// overlay only after its fold has committed (a finished job's, at its
// fold; any, when a cold write empties the overlay), but a read whose
// snapshot predates that commit and whose patch comes after the row left
// returned the table's old row with nothing to patch it: a finished job
// shown RUNNING, tasks short, until its next change, which never comes.
// So when rows have left meanwhile (s.gone moved) and some were not
// patched, read runs again with s.hot held, where no fold commits and
// nothing leaves. read must not take s.hot and must close its rows (it
// may run with s.hot held, waiting for a reader connection).
func (s *Store) readPatched(read func() error, patch func() bool) error {
	gone := s.gone.Load()
	if err := read(); err != nil {
		return err
	}
	s.hot.Lock()
	defer s.hot.Unlock()
	if patch() || s.gone.Load() == gone {
		return nil
	}
	if err := read(); err != nil {
		return err
	}
	patch()
	return nil
}

// patchJob sets a job read from the table to the overlay's counters and
// state, and reports whether the overlay holds it: a job the overlay
// holds, dirty or not, has its latest values there (a cold write empties
// the overlay before it changes a job). s.hot is held.
func (s *Store) patchJob(j *api.Job) bool {
	o := s.ov.jobs[j.ID]
	if o == nil {
		return false
	}
	j.State = o.state
	j.Tasks.Waiting, j.Tasks.Running, j.Tasks.Done, j.Tasks.Failed, j.Tasks.Killed = o.c.Waiting, o.c.Active, o.c.Done, o.c.Failed, o.c.Killed
	j.StartedAt, j.FinishedAt = sec(o.started), sec(o.finished)
	return true
}

// The folder folds in the background: every foldEvery the rows dirty for
// foldAge, and everything when foldKick rows are dirty (it fell behind).
// A hot transaction that finds foldHard rows dirty folds a chunk itself
// first, so memory stays bounded whatever happens.
const (
	foldEvery = time.Second
	foldAge   = time.Second
	foldKick  = 100_000
	foldHard  = 400_000
)

func (s *Store) folder() {
	defer close(s.folderDone)
	t := time.NewTicker(foldEvery)
	defer t.Stop()
	for {
		young := true
		select {
		case <-s.stop:
			return
		case <-t.C:
		case <-s.kick:
			young = false
		}
		s.foldCycle(young)
	}
}

// foldCycle folds what is dirty now (with young, what is dirty for
// foldAge), one chunk per hold of s.hot so the hot path runs between
// chunks. On an error the rows stay in the overlay and the journal: the
// next cycle, or a read's settle, tries again.
func (s *Store) foldCycle(young bool) {
	s.hot.Lock()
	p := s.planFold(young)
	s.hot.Unlock()
	for !p.empty() {
		yield()
		s.hot.Lock()
		err := s.foldNext(s.bg, p, foldChunk)
		s.hot.Unlock()
		if err != nil {
			return
		}
	}
	s.trimJournal(s.bg, false)
}

// yield lets the Go scheduler run others between two chunks, with no
// lock held: it preempts a goroutine that has run 10 ms without yielding
// (a fold of many chunks), and a writer preempted mid-transaction waits,
// write lock and s.hot held, until another thread hands its locked thread
// a processor. A chunk that starts on a fresh slice ends long before that.
func yield() { runtime.Gosched() }

// beforeHot is called by a hot transaction with s.hot held: it keeps the
// overlay bounded and wakes the folder when it grows.
func (s *Store) beforeHot(ctx context.Context) error {
	if s.ov.dirty >= foldHard {
		if err := s.foldNext(ctx, s.planFold(false), foldChunk); err != nil {
			return fmt.Errorf("fold the journal: %w", err)
		}
	}
	if s.ov.dirty >= foldKick {
		select {
		case s.kick <- struct{}{}:
		default:
		}
	}
	return nil
}

// Encoding: the rows go to SQLite as JSON arrays (jsonb_each), built by
// hand: encoding/json's reflection over []any cost more than the writes.

// encodeRows encodes rows as a JSON array, each with add, into a buffer of
// about perRow bytes a row, and returns it as a string without copying it
// (the buffer is not touched again; the journal's arrays were a third of
// the queue's allocations, half of it that copy and the buffer's growth).
func encodeRows[T any](rows []T, perRow int, add func([]byte, T) []byte) string {
	b := make([]byte, 0, perRow*len(rows)+2)
	b = append(b, '[')
	for i, r := range rows {
		if i > 0 {
			b = append(b, ',')
		}
		b = add(b, r)
	}
	b = append(b, ']')
	return unsafe.String(unsafe.SliceData(b), len(b))
}

func appendTask(b []byte, t *taskRow) []byte {
	b = append(b, '[')
	b = strconv.AppendInt(b, t.id, 10)
	b = append(b, ',')
	b = appendString(b, t.state)
	for _, v := range []int64{int64(t.attempt), int64(t.tries), t.epoch} {
		b = append(b, ',')
		b = strconv.AppendInt(b, v, 10)
	}
	b = append(b, ',')
	b = appendString(b, t.pilot)
	b = append(b, ',')
	b = appendString(b, t.pool)
	for _, v := range []int64{t.queuedAt, t.assignedAt, t.heartbeatAt, t.finishedAt, t.waitMS, int64(t.exitCode)} {
		b = append(b, ',')
		b = strconv.AppendInt(b, v, 10)
	}
	b = append(b, ',')
	b = appendString(b, t.lastError)
	return append(b, ']')
}

func appendJob(b []byte, j *jobRow) []byte {
	b = append(b, '[')
	b = strconv.AppendInt(b, j.id, 10)
	b = append(b, ',')
	b = appendString(b, j.state)
	for _, v := range []int64{j.started, j.finished, int64(j.c.Waiting), int64(j.c.Active), int64(j.c.Done), int64(j.c.Failed), int64(j.c.Killed)} {
		b = append(b, ',')
		b = strconv.AppendInt(b, v, 10)
	}
	return append(b, ']')
}

func encodePools(m map[poolKey]*poolRow) []byte {
	b := []byte{'['}
	first := true
	for k, p := range m {
		if !first {
			b = append(b, ',')
		}
		first = false
		b = append(b, '[')
		b = strconv.AppendInt(b, k.job, 10)
		b = append(b, ',')
		b = appendString(b, k.pool)
		b = append(b, ',')
		b = strconv.AppendInt(b, int64(p.done), 10)
		b = append(b, ',')
		b = strconv.AppendInt(b, int64(p.failed), 10)
		b = append(b, ']')
	}
	return append(b, ']')
}

// appendString appends s as a JSON string: printable ASCII directly, the
// rest through encoding/json (escapes, invalid UTF-8).
func appendString(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= utf8.RuneSelf || c == '"' || c == '\\' {
			enc, _ := json.Marshal(s)
			return append(b, enc...)
		}
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"')
}

// appendFloat appends f as a JSON number; SQLite reads 9e999 as an
// infinity (its own JSON for one), and null for NaN fails a NOT NULL
// column as binding NaN would.
func appendFloat(b []byte, f float64) []byte {
	switch {
	case math.IsInf(f, 1):
		return append(b, "9e999"...)
	case math.IsInf(f, -1):
		return append(b, "-9e999"...)
	case math.IsNaN(f):
		return append(b, "null"...)
	}
	return strconv.AppendFloat(b, f, 'g', -1, 64)
}
