package store

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/harvest-hpc/harvest/pilotproto"
	"github.com/harvest-hpc/harvest/queue/api"
	"github.com/harvest-hpc/harvest/queue/rules"
)

// The hot path on grants (migrations/008_grants.sql, docs/queue.md): a
// pull writes one grant row and one counter row per job it serves, a
// batch of results one grant row per grant and one counter row per job
// (plus an exception row per entry that did not simply succeed), a
// heartbeat one grant row per grant it renews. Each is one transaction of
// plain SQL.

// taskID is an entry's task id in the pilot protocol: its job and its
// index within the job, without a row of its own.
func taskID(job int64, idx int) int64 { return job<<32 | int64(idx) }

// entryOf is taskID's inverse.
func entryOf(id int64) (job int64, idx int) { return id >> 32, int(id & 0xffffffff) }

// Settled characters of a grant's entries.
const (
	open     = '-' // no result yet
	settledD = 'D' // done
	settledR = 'R' // another result recorded (failed, timeout, interrupted, stale)
	settledX = 'X' // closed without a result (expired, killed, requeued)
)

// grantClosed is the state of a grant with no open entry.
const grantClosed = "CLOSED"

// jobRow is a job's state and counter row, read and written inside one
// transaction so the state can be derived in Go (rules.JobState).
type jobRow struct {
	id                 int64
	state, from        string
	owner              string
	cores, maxTries    int
	price              float64
	started, finished  int64
	next, retry, requd int
	c                  rules.Counts
	moved              bool // counters changed
	startSet           bool // started set in this transaction
}

// grantRow is a grant's row.
type grantRow struct {
	id, job      int64
	first, last  int
	attempt      int
	pool         string
	epoch        int64
	state        string
	settled      []byte
	open         int
	done, failed int
	assigned     int64
	dirty, beat  bool
}

// exceptionRow is an exceptional entry's row.
type exceptionRow struct {
	job               int64
	idx               int
	state             string
	attempt, tries    int
	grant             int64
	queued, finished  int64
	failAttempt       int
	status, pool      string
	exit              int
	pilot, tail       string
	started, duration int64
	dirty             bool
}

// batch caches the rows one transaction reads and writes them back once.
type batch struct {
	s          *Store
	ctx        context.Context
	tx         *wtx
	jobs       map[int64]*jobRow
	grants     map[int64]*grantRow
	byJob      map[[2]int64][]*grantRow // (job, attempt)
	exceptions map[[2]int64]*exceptionRow
	order      []*exceptionRow
	usage      map[string]UsageEvent // per owner, of a batch of results
	none       map[entryKey]bool     // entries without a grant
	// lock is how prefetch locks the counter rows it reads on
	// PostgreSQL: FOR UPDATE (a batch of results waits for another
	// writer of the job), or FOR UPDATE SKIP LOCKED (a pull passes over
	// a job another agent's pull or results hold: pulls at once take
	// disjoint grants).
	lock string
}

func (s *Store) newBatch(ctx context.Context, tx *wtx) *batch {
	return &batch{s: s, ctx: ctx, tx: tx, jobs: map[int64]*jobRow{}, grants: map[int64]*grantRow{},
		byJob: map[[2]int64][]*grantRow{}, exceptions: map[[2]int64]*exceptionRow{}, usage: map[string]UsageEvent{}, none: map[entryKey]bool{},
		lock: "FOR UPDATE OF c"}
}

// readJobsRows is how many jobs one statement of readJobsSQL reads: every
// statement through database/sql and cgo costs tens of microseconds on a
// loaded machine, more than SQLite's own work for a row, and a pull or a
// batch of results with many users touches hundreds of jobs. A fixed
// number of parameters keeps it one prepared statement (unused ones: 0).
const readJobsRows = 64

var readJobsSQL = hot(`SELECT j.id, j.state, j.owner, j.cores, j.price, j.max_attempts, j.started_at, j.finished_at, j.n_total,
		c.next_idx, c.n_waiting, c.n_retry, c.n_active, c.n_done, c.n_failed, c.n_killed, c.n_requeued
	FROM jobs j JOIN counts c ON c.job_id = j.id WHERE j.id IN (?` + strings.Repeat(", ?", readJobsRows-1) + `)`)

// prefetch reads the rows of the jobs ids that the batch has not read,
// readJobsRows a statement.
func (b *batch) prefetch(ids []int64) error {
	var want []any
	seen := map[int64]bool{}
	for _, id := range ids {
		if _, ok := b.jobs[id]; !ok && !seen[id] {
			seen[id] = true
			want = append(want, id)
		}
	}
	for len(want) > 0 {
		part := want[:min(len(want), readJobsRows)]
		want = want[len(part):]
		args := append(make([]any, 0, readJobsRows), part...)
		for len(args) < readJobsRows {
			args = append(args, 0)
		}
		q := readJobsSQL
		if b.s.d.pg && b.tx != nil {
			// In id order: two writers lock their jobs in one order.
			q += " ORDER BY j.id " + b.lock
		}
		rows, err := b.s.query(b.ctx, b.tx, q, args...)
		if err != nil {
			return err
		}
		for rows.Next() {
			j := &jobRow{}
			if err := rows.Scan(&j.id, &j.state, &j.owner, &j.cores, &j.price, &j.maxTries, &j.started, &j.finished, &j.c.Total,
				&j.next, &j.c.Waiting, &j.retry, &j.c.Active, &j.c.Done, &j.c.Failed, &j.c.Killed, &j.requd); err != nil {
				rows.Close()
				return err
			}
			j.from = j.state
			b.jobs[j.id] = j
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
		for _, id := range part {
			if _, ok := b.jobs[id.(int64)]; !ok {
				b.jobs[id.(int64)] = nil // no such job
			}
		}
	}
	return nil
}

// job reads a job's row once per transaction; nil when there is none.
func (b *batch) job(id int64) (*jobRow, error) {
	if j, ok := b.jobs[id]; ok {
		return j, nil
	}
	if err := b.prefetch([]int64{id}); err != nil {
		return nil, err
	}
	return b.jobs[id], nil
}

// grantsSQL reads the grants that hold rowsPer entries (job, attempt,
// index): for each, the grant of that job and attempt with the greatest
// first index not above it (the index grants_job; one seek each), if it
// reaches the entry. An unused slot is (0, 0, 0).
var grantsSQL = hot(`SELECT id, job_id, attempt, first_idx, last_idx, pool, epoch, state, settled, n_open, done, failed, assigned_at
	FROM grants WHERE id IN (VALUES ` + strings.TrimSuffix(strings.Repeat(
	`((SELECT id FROM grants WHERE job_id = ? AND attempt = ? AND first_idx <= ? ORDER BY first_idx DESC LIMIT 1)), `, rowsPer), ", ") + `)`)

// entryKey is an entry handed out as an attempt: (job, attempt, index).
type entryKey [3]int64

// cached finds the grant of k among those the batch has read.
func (b *batch) cached(k entryKey) *grantRow {
	for _, g := range b.byJob[[2]int64{k[0], k[1]}] {
		if int64(g.first) <= k[2] && k[2] <= int64(g.last) {
			return g
		}
	}
	return nil
}

// prefetchGrants reads the grants of keys, rowsPer lookups a statement;
// keys without a grant are remembered as such.
func (b *batch) prefetchGrants(keys []entryKey) error {
	keys = slices.Clone(keys)
	slices.SortFunc(keys, func(x, y entryKey) int { return slices.Compare(x[:], y[:]) })
	keys = slices.Compact(keys)
	for {
		// One key per (job, attempt) a round: its next grant may cover
		// the job's following keys.
		var ask []entryKey
		var last [2]int64
		for _, k := range keys {
			if b.none[k] || b.cached(k) != nil || (len(ask) > 0 && [2]int64{k[0], k[1]} == last) {
				continue
			}
			ask, last = append(ask, k), [2]int64{k[0], k[1]}
			if len(ask) == rowsPer {
				break
			}
		}
		if len(ask) == 0 {
			return nil
		}
		args := make([]any, 0, 3*rowsPer)
		for i := range rowsPer {
			if i < len(ask) {
				args = append(args, ask[i][0], ask[i][1], ask[i][2])
			} else {
				args = append(args, 0, 0, 0)
			}
		}
		rows, err := b.s.query(b.ctx, b.tx, grantsSQL, args...)
		if err != nil {
			return err
		}
		for rows.Next() {
			g := &grantRow{}
			var settled string
			if err := rows.Scan(&g.id, &g.job, &g.attempt, &g.first, &g.last, &g.pool, &g.epoch, &g.state, &settled, &g.open, &g.done, &g.failed, &g.assigned); err != nil {
				rows.Close()
				return err
			}
			if b.grants[g.id] == nil {
				g.settled = []byte(settled)
				b.grants[g.id] = g
				b.byJob[[2]int64{g.job, int64(g.attempt)}] = append(b.byJob[[2]int64{g.job, int64(g.attempt)}], g)
			}
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
		for _, k := range ask {
			if b.cached(k) == nil {
				b.none[k] = true
			}
		}
	}
}

// grant finds the grant that handed out entry idx of job as attempt; nil
// when there is none.
func (b *batch) grant(job int64, attempt, idx int) (*grantRow, error) {
	k := entryKey{job, int64(attempt), int64(idx)}
	if err := b.prefetchGrants([]entryKey{k}); err != nil {
		return nil, err
	}
	return b.cached(k), nil
}

var readExceptionSQL = hot(`SELECT state, attempt, tries, grant_id, queued_at, finished_at, fail_attempt, status, exit_code, pool, pilot, started_at, duration_ms, error_tail
	FROM exceptions WHERE job_id = ? AND idx = ?`)

// exception reads an entry's exception row; nil when it has none.
func (b *batch) exception(job int64, idx int) (*exceptionRow, error) {
	k := [2]int64{job, int64(idx)}
	if x, ok := b.exceptions[k]; ok {
		return x, nil
	}
	rows, err := b.s.query(b.ctx, b.tx, readExceptionSQL, job, idx)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	if !rows.Next() {
		b.exceptions[k] = nil
		return nil, rows.Err()
	}
	x := &exceptionRow{job: job, idx: idx}
	if err := rows.Scan(&x.state, &x.attempt, &x.tries, &x.grant, &x.queued, &x.finished, &x.failAttempt, &x.status, &x.exit, &x.pool, &x.pilot, &x.started, &x.duration, &x.tail); err != nil {
		return nil, err
	}
	b.exceptions[k] = x
	return x, nil
}

// except returns the entry's exception row, a new one if it has none, to
// be written back.
func (b *batch) except(job int64, idx, attempt int) (*exceptionRow, error) {
	x, err := b.exception(job, idx)
	if err != nil {
		return nil, err
	}
	if x == nil {
		x = &exceptionRow{job: job, idx: idx, attempt: attempt}
		b.exceptions[[2]int64{job, int64(idx)}] = x
	}
	if !x.dirty {
		x.dirty = true
		b.order = append(b.order, x)
	}
	return x, nil
}

var (
	// The counter rows of a transaction go rowsPer to a statement, as an
	// upsert of rows that exist (plain SQL that PostgreSQL runs too).
	writeCounts = rowsSQL(`INSERT INTO counts (job_id, next_idx, n_waiting, n_retry, n_active, n_done, n_failed, n_killed, n_requeued) VALUES `, 9,
		` ON CONFLICT (job_id) DO UPDATE SET next_idx = excluded.next_idx, n_waiting = excluded.n_waiting, n_retry = excluded.n_retry,
		n_active = excluded.n_active, n_done = excluded.n_done, n_failed = excluded.n_failed, n_killed = excluded.n_killed, n_requeued = excluded.n_requeued`)
	// Grants that exist, likewise (the columns not updated only satisfy
	// the INSERT's NOT NULL).
	writeGrants = rowsSQL(`INSERT INTO grants (id, job_id, first_idx, last_idx, attempt, pool, epoch, assigned_at, heartbeat_at, state, settled, n_open, done, failed) VALUES `, 14,
		` ON CONFLICT (id) DO UPDATE SET state = excluded.state, settled = excluded.settled, n_open = excluded.n_open, done = excluded.done, failed = excluded.failed`)
	logUsage    = rowsSQL(`INSERT INTO usage_log (at, owner, cpu_s, cost) VALUES `, 4, ``)
	insertFresh = rowsSQL(`INSERT INTO grants (job_id, first_idx, last_idx, attempt, pool, epoch, pilot, assigned_at, heartbeat_at, state, settled, n_open) VALUES `, 12, ``)
	// Jobs' state rows, likewise, as an UPDATE ... FROM (VALUES ...)
	// (SQLite 3.33+ and PostgreSQL): id, state, started_at, finished_at.
	writeJobStates = valuesSQL(`UPDATE jobs SET state = v.column2, started_at = v.column3, finished_at = v.column4 FROM (VALUES `,
		[]string{"BIGINT", "TEXT", "BIGINT", "BIGINT"}, `) AS v WHERE jobs.id = v.column1`)
	beatGrantsSQL = hot(`UPDATE grants SET state = 'RUNNING', heartbeat_at = ? WHERE state != 'CLOSED' AND id IN (?` + strings.Repeat(", ?", rowsPer-1) + `)`)
	// Exception rows, likewise.
	writeExcepts = rowsSQL(`INSERT INTO exceptions (job_id, idx, state, attempt, tries, grant_id, queued_at, finished_at, fail_attempt, status, exit_code, pool, pilot, started_at, duration_ms, error_tail) VALUES `, 16,
		` ON CONFLICT (job_id, idx) DO UPDATE SET state = excluded.state, attempt = excluded.attempt, tries = excluded.tries, grant_id = excluded.grant_id,
		queued_at = excluded.queued_at, finished_at = excluded.finished_at, fail_attempt = excluded.fail_attempt, status = excluded.status,
		exit_code = excluded.exit_code, pool = excluded.pool, pilot = excluded.pilot, started_at = excluded.started_at,
		duration_ms = excluded.duration_ms, error_tail = excluded.error_tail`)
)

// flush writes back every row the batch changed and returns the jobs'
// state changes.
func (b *batch) flush(now time.Time) ([]JobChange, error) {
	var grants [][]any
	for _, g := range b.grants {
		if !g.dirty {
			continue
		}
		if g.open == 0 {
			g.state = grantClosed
		}
		grants = append(grants, []any{g.id, g.job, g.first, g.last, g.attempt, g.pool, g.epoch, g.assigned, g.assigned, g.state, string(g.settled), g.open, g.done, g.failed})
	}
	if err := b.execRows(writeGrants, grants); err != nil {
		return nil, fmt.Errorf("update grants: %w", err)
	}
	excepts := make([][]any, 0, len(b.order))
	for _, x := range b.order {
		excepts = append(excepts, []any{x.job, x.idx, x.state, x.attempt, x.tries, x.grant, x.queued, x.finished,
			x.failAttempt, x.status, x.exit, x.pool, x.pilot, x.started, x.duration, x.tail})
	}
	if err := b.execRows(writeExcepts, excepts); err != nil {
		return nil, fmt.Errorf("write exceptions: %w", err)
	}
	owners := make([]string, 0, len(b.usage))
	for o := range b.usage {
		owners = append(owners, o)
	}
	slices.Sort(owners)
	var usage [][]any
	for _, o := range owners {
		u := b.usage[o]
		usage = append(usage, []any{ms(now), o, u.CPU, u.Cost})
	}
	if err := b.execRows(logUsage, usage); err != nil {
		return nil, fmt.Errorf("log usage: %w", err)
	}
	var counts [][]any
	for _, j := range b.jobs {
		if j != nil && j.moved {
			counts = append(counts, []any{j.id, j.next, j.c.Waiting, j.retry, j.c.Active, j.c.Done, j.c.Failed, j.c.Killed, j.requd})
		}
	}
	if err := b.execRows(writeCounts, counts); err != nil {
		return nil, fmt.Errorf("update counts: %w", err)
	}
	var changes []JobChange
	var states [][]any
	for _, j := range b.jobs {
		if j == nil || !j.moved {
			continue
		}
		ch := settleJob(j, now)
		if ch == nil && !j.startSet {
			continue
		}
		if ch != nil {
			changes = append(changes, *ch)
		}
		states = append(states, []any{j.id, j.state, j.started, j.finished})
	}
	if err := b.execRows(writeJobStates, states); err != nil {
		return nil, fmt.Errorf("update jobs: %w", err)
	}
	return changes, nil
}

// settleJob derives j's state from its counters (rules.JobState) and
// returns the change, if any (its finish time set or cleared with it).
func settleJob(j *jobRow, now time.Time) *JobChange {
	j.state = rules.JobState(j.from, j.started > 0, j.c)
	if j.state == j.from {
		return nil
	}
	j.finished = 0
	if api.JobFinal(j.state) {
		j.finished = ms(now)
	}
	return &JobChange{j.id, j.from, j.state}
}

// Take asks for up to N waiting tasks of a job.
type Take struct {
	Job int64
	N   int
}

// TakenTask is a task handed out: ASSIGNED with its new attempt.
type TakenTask struct {
	ID      int64
	Name    string
	Attempt int
}

// Taken is what Assign handed out.
type Taken struct {
	// Tasks maps a job to its tasks handed out, lowest id (FIFO) first.
	// A job that is no longer live, or has fewer waiting tasks than asked
	// for, gives fewer.
	Tasks map[int64][]TakenTask
	// Gone lists the jobs asked for that are no longer live.
	Gone    []int64
	Changes []JobChange
}

var (
	retriesSQL = hot(`SELECT x.idx, x.attempt, e.name FROM exceptions x JOIN entries e ON e.job_id = x.job_id AND e.idx = x.idx
		WHERE x.job_id = ? AND x.state = 'WAITING' ORDER BY x.idx LIMIT ?`)
	// A retried entry's grant, rowsPer to a statement (the columns of
	// insertFresh), and its exception row marked GRANTED to it.
	insertRetries = rowsSQL(`INSERT INTO grants (job_id, first_idx, last_idx, attempt, pool, epoch, pilot, assigned_at, heartbeat_at, state, settled, n_open) VALUES `, 12,
		` RETURNING id, job_id, first_idx, attempt`)
	grantRetries = valuesSQL(`UPDATE exceptions SET state = 'GRANTED', attempt = v.column3, grant_id = v.column4 FROM (VALUES `,
		[]string{"BIGINT", "INTEGER", "INTEGER", "BIGINT"}, `) AS v WHERE exceptions.job_id = v.column1 AND exceptions.idx = v.column2`)
)

// grantRetries inserts the grants of retried entries (rows of
// insertRetries' columns) and marks their exception rows GRANTED to them.
func (b *batch) grantRetries(rows [][]any) error {
	var marks [][]any
	for len(rows) > 0 {
		q, k := insertRetries.one, 1
		if len(rows) >= rowsPer {
			q, k = insertRetries.many, rowsPer
		}
		var args []any
		for _, r := range rows[:k] {
			args = append(args, r...)
		}
		rs, err := b.s.query(b.ctx, b.tx, q, args...)
		if err != nil {
			return fmt.Errorf("insert retry grants: %w", err)
		}
		for rs.Next() {
			var id, job int64
			var idx, attempt int
			if err := rs.Scan(&id, &job, &idx, &attempt); err != nil {
				rs.Close()
				return err
			}
			marks = append(marks, []any{job, idx, attempt, id})
		}
		rs.Close()
		if err := rs.Err(); err != nil {
			return err
		}
		rows = rows[k:]
	}
	if err := b.execRows(grantRetries, marks); err != nil {
		return fmt.Errorf("mark retries granted: %w", err)
	}
	return nil
}

// rowStatements are a statement of rowsPer rows and one of a single row,
// both prepared once: a transaction's rows of one kind go rowsPer to a
// statement, the rest one by one.
type rowStatements struct{ many, one string }

// rowsPer is how many rows one multi-row statement writes or reads.
const rowsPer = 32

// rowsSQL registers head VALUES (cols placeholders) x rowsPer, tail and
// its one-row form with hot.
func rowsSQL(head string, cols int, tail string) rowStatements {
	return rowsOf(head, "(?"+strings.Repeat(", ?", cols-1)+")", tail)
}

// valuesSQL is rowsSQL for a VALUES list that is not an INSERT's, whose
// columns' types PostgreSQL cannot infer from a table: each placeholder
// is cast to its column's type.
func valuesSQL(head string, types []string, tail string) rowStatements {
	return rowsOf(head, typedRow(types), tail)
}

func typedRow(types []string) string {
	cols := make([]string, len(types))
	for i, t := range types {
		cols[i] = "CAST(? AS " + t + ")"
	}
	return "(" + strings.Join(cols, ", ") + ")"
}

func rowsOf(head, row, tail string) rowStatements {
	return rowStatements{
		many: hot(head + strings.TrimSuffix(strings.Repeat(row+", ", rowsPer), ", ") + tail),
		one:  hot(head + row + tail),
	}
}

// execRows writes rows with st.
func (b *batch) execRows(st rowStatements, rows [][]any) error {
	for len(rows) > 0 {
		q, k := st.one, 1
		if len(rows) >= rowsPer {
			q, k = st.many, rowsPer
		}
		var args []any
		for _, r := range rows[:k] {
			args = append(args, r...)
		}
		if _, err := b.s.exec(b.ctx, b.tx, q, args...); err != nil {
			return err
		}
		rows = rows[k:]
	}
	return nil
}

// namesSQL reads the entries of rowsPer ranges (job, first, last); an
// unused range is (0, 1, 0), empty. The ranges are a VALUES list joined to
// entries (one primary-key seek per range; the OR of as many range terms
// it replaced cost SQLite a multi-index OR plan of 32 terms at every call,
// about a third of a hand-out's transaction). VALUES' columns are named
// column1.. by SQLite and PostgreSQL alike.
var namesSQL = hot(`SELECT e.job_id, e.idx, e.name FROM (VALUES ` +
	strings.TrimSuffix(strings.Repeat(typedRow([]string{"BIGINT", "INTEGER", "INTEGER"})+", ", rowsPer), ", ") + `) AS r
	JOIN entries e ON e.job_id = r.column1 AND e.idx >= r.column2 AND e.idx <= r.column3 ORDER BY e.job_id, e.idx`)

// names appends the fresh tasks of ranges to out, each job's in index
// order after its retries.
func (b *batch) names(ranges [][3]int64, out map[int64][]TakenTask) error {
	for len(ranges) > 0 {
		part := ranges[:min(len(ranges), rowsPer)]
		ranges = ranges[len(part):]
		args := make([]any, 0, 3*rowsPer)
		for i := range rowsPer {
			if i < len(part) {
				args = append(args, part[i][0], part[i][1], part[i][2])
			} else {
				args = append(args, 0, 1, 0)
			}
		}
		rows, err := b.s.query(b.ctx, b.tx, namesSQL, args...)
		if err != nil {
			return err
		}
		for rows.Next() {
			var job int64
			var idx int
			var name string
			if err := rows.Scan(&job, &idx, &name); err != nil {
				rows.Close()
				return err
			}
			out[job] = append(out[job], TakenTask{ID: taskID(job, idx), Name: name, Attempt: 1})
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
	}
	return nil
}

// Assign hands out, for each take, the job's waiting entries of lowest
// index (its retries, then fresh ones) to the pool's lease holder under
// epoch, in one fenced transaction: a grant of the fresh entries and one
// per retried entry, and the job's counter row.
func (s *Store) Assign(ctx context.Context, pool string, epoch int64, now time.Time, takes []Take) (Taken, error) {
	var out Taken
	err := s.fenced(ctx, pool, epoch, now, func(tx *wtx, l rules.Lease) error {
		out = Taken{Tasks: map[int64][]TakenTask{}}
		b := s.newBatch(ctx, tx)
		b.lock = "FOR UPDATE OF c SKIP LOCKED"
		ids := make([]int64, len(takes))
		for i, t := range takes {
			ids[i] = t.Job
		}
		if err := b.prefetch(ids); err != nil {
			return err
		}
		at := ms(now)
		var fresh [][]any     // the fresh grants' rows
		var ranges [][3]int64 // and their (job, first, last)
		var retried [][]any   // the retried entries' one-entry grants
		for _, t := range takes {
			j, err := b.job(t.Job)
			if err != nil {
				return err
			}
			if j == nil && s.d.pg {
				// Skipped (another agent's write holds it), or gone.
				var n int
				if err := tx.QueryRowContext(inline(ctx), `SELECT count(*) FROM jobs WHERE id = ?`, t.Job).Scan(&n); err != nil {
					return err
				}
				if n > 0 {
					continue
				}
			}
			if j == nil || !rules.JobLive(j.state) {
				out.Gone = append(out.Gone, t.Job)
				continue
			}
			n := max(t.N, 0)
			var got []TakenTask
			if n > 0 && j.retry > 0 {
				type retry struct {
					idx, attempt int
					name         string
				}
				var rs []retry
				rows, err := s.query(ctx, tx, retriesSQL, t.Job, n)
				if err != nil {
					return err
				}
				for rows.Next() {
					var r retry
					if err := rows.Scan(&r.idx, &r.attempt, &r.name); err != nil {
						rows.Close()
						return err
					}
					rs = append(rs, r)
				}
				rows.Close()
				if err := rows.Err(); err != nil {
					return err
				}
				for _, r := range rs {
					// Attempt 1 is a fresh grant's, and only its.
					a := max(r.attempt+1, 2)
					retried = append(retried, []any{t.Job, r.idx, r.idx, a, pool, epoch, l.Holder, at, at, "ASSIGNED", string(rune(open)), 1})
					got = append(got, TakenTask{ID: taskID(t.Job, r.idx), Name: r.name, Attempt: a})
					j.retry--
					j.requd++
				}
				n -= len(rs)
			}
			if k := min(n, j.c.Total-j.next); k > 0 {
				fresh = append(fresh, []any{t.Job, j.next, j.next + k - 1, 1, pool, epoch, l.Holder, at, at, "ASSIGNED", strings.Repeat(string(rune(open)), k), k})
				ranges = append(ranges, [3]int64{t.Job, int64(j.next), int64(j.next + k - 1)})
				j.next += k
				n -= k
			}
			if taken := max(t.N, 0) - n; taken > 0 {
				j.c.Waiting -= taken
				j.c.Active += taken
				j.moved = true
				if j.started == 0 {
					j.started, j.startSet = at, true
				}
			}
			if len(got) > 0 {
				out.Tasks[t.Job] = got
			}
		}
		if err := b.execRows(insertFresh, fresh); err != nil {
			return err
		}
		if err := b.grantRetries(retried); err != nil {
			return err
		}
		if err := b.names(ranges, out.Tasks); err != nil {
			return err
		}
		var err error
		out.Changes, err = b.flush(now)
		return err
	})
	if err != nil {
		return Taken{}, fmt.Errorf("assign: %w", err)
	}
	return out, nil
}

// OwnedEvent is a usage event and whose it is.
type OwnedEvent struct {
	Owner string
	Event UsageEvent
}

// Applied is what a batch of results changed.
type Applied struct {
	Applied, Duplicates, Ignored int
	// Running is the change of running cores per owner.
	Running map[string]int
	// Waiting is the change of waiting tasks per job (requeued tasks).
	Waiting map[int64]int
	// Events are the usage of every recorded result (applied or stale).
	Events  []OwnedEvent
	Changes []JobChange
	// Outcomes are the applied results, for the per-site figures.
	Outcomes []Outcome
	// LostMS is the run time of the interrupted attempts recorded: task
	// time lost to pilots that ended under their tasks.
	LostMS int64
}

// Outcome is one applied result: its job, its status, how long it took
// from its hand-out to its result and how long it ran.
type Outcome struct {
	Job                      int64
	Status                   string
	TurnaroundMS, DurationMS int64
}

// ApplyResults records a pool's results in one transaction, fenced by the
// pool's epoch, idempotent by (task, attempt): each names an entry of a
// grant, whose settled mark says whether a result was recorded before (a
// duplicate changes nothing). A result for an entry its grant no longer
// holds open (expired, requeued, its job killed) is recorded for usage
// but changes no counter; a current one moves its entry as
// rules.AfterResult says. A result for the open entry of another pool's
// grant is ignored and not recorded, so it cannot take the place of the
// real one. Plain success writes no row of its own: its grant's and its
// job's rows move.
func (s *Store) ApplyResults(ctx context.Context, pool string, epoch int64, now time.Time, results []pilotproto.Result) (Applied, error) {
	var a Applied
	err := s.fenced(ctx, pool, epoch, now, func(tx *wtx, _ rules.Lease) error {
		a = Applied{Running: map[string]int{}, Waiting: map[int64]int{}}
		b := s.newBatch(ctx, tx)
		ids := make([]int64, len(results))
		keys := make([]entryKey, len(results))
		for i, r := range results {
			var idx int
			ids[i], idx = entryOf(r.TaskID)
			keys[i] = entryKey{ids[i], int64(r.Attempt), int64(idx)}
		}
		if err := b.prefetch(ids); err != nil {
			return err
		}
		if err := b.prefetchGrants(keys); err != nil {
			return err
		}
		for _, r := range results {
			if err := b.result(&a, pool, r, now); err != nil {
				return err
			}
		}
		var err error
		a.Changes, err = b.flush(now)
		return err
	})
	if err != nil {
		return Applied{}, fmt.Errorf("apply results: %w", err)
	}
	return a, nil
}

// poolCounter is the grant column (done 0, failed 1) a status counts in.
var poolCounter = map[string]int{pilotproto.StatusDone: 0, pilotproto.StatusFailed: 1, pilotproto.StatusTimeout: 1}

func (b *batch) result(a *Applied, pool string, r pilotproto.Result, now time.Time) error {
	job, idx := entryOf(r.TaskID)
	g, err := b.grant(job, r.Attempt, idx)
	if err != nil {
		return err
	}
	var j *jobRow
	if g != nil {
		if j, err = b.job(job); err != nil {
			return err
		}
	}
	if g == nil || j == nil {
		a.Ignored++
		return nil
	}
	i := idx - g.first
	mark := g.settled[i]
	if mark == settledD || mark == settledR {
		a.Duplicates++
		return nil
	}
	if mark == open && g.pool != pool {
		a.Ignored++
		return nil
	}
	cpu := float64(j.cores) * float64(r.DurationMS) / 1000
	ev := UsageEvent{At: ms(now), CPU: cpu, Cost: cpu * j.price}
	g.dirty = true
	a.Events = append(a.Events, OwnedEvent{j.owner, ev})
	u := b.usage[j.owner]
	u.CPU += ev.CPU
	u.Cost += ev.Cost
	b.usage[j.owner] = u
	if r.Status == pilotproto.StatusInterrupted {
		a.LostMS += r.DurationMS
	}
	if mark != open || g.state == grantClosed || !rules.JobLive(j.state) {
		// Not current: the entry left the grant (expired, requeued), or
		// its job was killed and the kill has not reached the grant yet
		// (its counters already count the entry killed).
		g.settled[i] = settledR
		if mark == open {
			g.open--
			x, err := b.except(job, idx, g.attempt)
			if err != nil {
				return err
			}
			x.state, x.finished = api.TaskKilled, ms(now)
		}
		a.Ignored++
		return nil
	}
	var x *exceptionRow
	if g.attempt > 1 {
		if x, err = b.exception(job, idx); err != nil {
			return err
		}
	}
	tries := 0
	if x != nil {
		tries = x.tries
	}
	act := rules.ActiveTask{State: g.state, Attempt: g.attempt, Tries: tries, MaxAttempts: j.maxTries, JobState: j.state}
	tr := rules.AfterResult(act, r.Status)
	g.settled[i] = settledR
	if tr.State == api.TaskDone {
		g.settled[i] = settledD
	}
	g.open--
	if col, ok := poolCounter[r.Status]; ok {
		if col == 0 {
			g.done++
		} else {
			g.failed++
		}
	}
	if tr.State != api.TaskDone || x != nil {
		if x, err = b.except(job, idx, g.attempt); err != nil {
			return err
		}
		x.state, x.attempt, x.grant = tr.State, g.attempt, g.id
		if tr.CountsTry {
			x.tries++
			x.failAttempt, x.status, x.exit, x.pool, x.pilot = r.Attempt, r.Status, r.ExitCode, pool, r.Pilot
			x.started, x.duration, x.tail = r.StartedAt, r.DurationMS, r.ErrorTail
		}
		if tr.Final() {
			x.finished = ms(now)
		} else {
			x.queued = ms(now)
		}
	}
	j.c.Active--
	switch tr.Counter {
	case rules.ToWaiting:
		j.c.Waiting++
		j.retry++
		a.Waiting[job]++
	case rules.ToDone:
		j.c.Done++
	case rules.ToFailed:
		j.c.Failed++
	}
	j.moved = true
	a.Outcomes = append(a.Outcomes, Outcome{Job: job, Status: r.Status, TurnaroundMS: max(0, ms(now)-g.assigned), DurationMS: r.DurationMS})
	a.Applied++
	a.Running[j.owner] -= j.cores
	return nil
}

// Heartbeat renews the pool's lease of epoch and keeps the grants of the
// listed attempts alive (RUNNING, their heartbeat time now), in one fenced
// transaction: one UPDATE per 32 grants, nothing per task. It returns the
// renewed lease.
func (s *Store) Heartbeat(ctx context.Context, pool string, epoch int64, now time.Time, ttl time.Duration, refs []pilotproto.TaskRef) (rules.Lease, error) {
	s.leaseWrite.Lock()
	defer s.leaseWrite.Unlock()
	var next rules.Lease
	err := s.fenced(ctx, pool, epoch, now, func(tx *wtx, l rules.Lease) error {
		next = l
		next.Expires = now.Add(ttl)
		if err := s.saveLease(ctx, tx, pool, next); err != nil {
			return err
		}
		b := s.newBatch(ctx, tx)
		keys := make([]entryKey, len(refs))
		for i, r := range refs {
			job, idx := entryOf(r.TaskID)
			keys[i] = entryKey{job, int64(r.Attempt), int64(idx)}
		}
		if err := b.prefetchGrants(keys); err != nil {
			return err
		}
		var beat []*grantRow
		for _, r := range refs {
			job, idx := entryOf(r.TaskID)
			g, err := b.grant(job, r.Attempt, idx)
			if err != nil {
				return err
			}
			if g == nil || g.beat || g.pool != pool || g.state == grantClosed || g.settled[idx-g.first] != open {
				continue
			}
			g.beat = true
			beat = append(beat, g)
		}
		for len(beat) > 0 {
			part := beat[:min(len(beat), rowsPer)]
			beat = beat[len(part):]
			args := []any{ms(now)}
			for i := range rowsPer {
				id := int64(0) // no grant
				if i < len(part) {
					id = part[i].id
				}
				args = append(args, id)
			}
			if _, err := s.exec(ctx, tx, beatGrantsSQL, args...); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return rules.Lease{}, fmt.Errorf("heartbeat: %w", err)
	}
	s.cacheLease(pool, next)
	return next, nil
}

// ActiveTasksBefore lists the pool's active tasks handed out under an
// epoch older than epoch.
func (s *Store) ActiveTasksBefore(ctx context.Context, pool string, epoch int64) ([]pilotproto.TaskRef, error) {
	return s.openEntries(ctx, "find tasks of older epochs", `SELECT job_id, first_idx, attempt, settled FROM grants
		WHERE state != 'CLOSED' AND pool = ? AND epoch < ?`, pool, epoch)
}

// ActiveTasksOfEpochBefore lists the pool's active tasks handed out under
// epoch before t.
func (s *Store) ActiveTasksOfEpochBefore(ctx context.Context, pool string, epoch int64, t time.Time) ([]pilotproto.TaskRef, error) {
	return s.openEntries(ctx, "find tasks handed out before the open", `SELECT job_id, first_idx, attempt, settled FROM grants
		WHERE state != 'CLOSED' AND pool = ? AND epoch = ? AND assigned_at < ?`, pool, epoch, ms(t))
}

// AssignedBefore lists the tasks of pool still ASSIGNED to epoch (no
// heartbeat has listed them) that were handed out before t.
func (s *Store) AssignedBefore(ctx context.Context, pool string, epoch int64, t time.Time) ([]pilotproto.TaskRef, error) {
	return s.openEntries(ctx, "find tasks never acknowledged", `SELECT job_id, first_idx, attempt, settled FROM grants
		WHERE state != 'CLOSED' AND state = 'ASSIGNED' AND pool = ? AND epoch = ? AND assigned_at < ?`, pool, epoch, ms(t))
}

// openEntries lists the open entries of the grants query selects (job,
// first index, attempt, settled) as task references, on a reader; what
// names the search in its errors.
func (s *Store) openEntries(ctx context.Context, what, query string, args ...any) ([]pilotproto.TaskRef, error) {
	rows, err := s.r.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	defer rows.Close()
	var out []pilotproto.TaskRef
	for rows.Next() {
		var job int64
		var first, attempt int
		var settled string
		if err := rows.Scan(&job, &first, &attempt, &settled); err != nil {
			return nil, fmt.Errorf("%s: %w", what, err)
		}
		for i := 0; i < len(settled); i++ {
			if settled[i] == open {
				out = append(out, pilotproto.TaskRef{TaskID: taskID(job, first+i), Attempt: attempt})
			}
		}
	}
	return out, rows.Err()
}

// Outstanding counts the active tasks (handed out, not finished) of each
// pool: the open entries of its live grants.
func (s *Store) Outstanding(ctx context.Context) (map[string]int, error) {
	rows, err := s.r.QueryContext(ctx, `SELECT pool, sum(n_open) FROM grants WHERE state != 'CLOSED' GROUP BY pool`)
	if err != nil {
		return nil, fmt.Errorf("count outstanding tasks: %w", err)
	}
	defer rows.Close()
	out := map[string]int{}
	for rows.Next() {
		var pool string
		var n int
		if err := rows.Scan(&pool, &n); err != nil {
			return nil, fmt.Errorf("count outstanding tasks: %w", err)
		}
		if n > 0 {
			out[pool] = n
		}
	}
	return out, rows.Err()
}

// JobPools returns, per pool, the done and failed attempts of a job: where
// its tasks ran (the sums of its grants).
func (s *Store) JobPools(ctx context.Context, job int64) (map[string][2]int, error) {
	rows, err := s.r.QueryContext(ctx, `SELECT pool, sum(done), sum(failed) FROM grants WHERE job_id = ? AND pool != '' GROUP BY pool`, job)
	if err != nil {
		return nil, fmt.Errorf("job %d per pool: %w", job, err)
	}
	defer rows.Close()
	out := map[string][2]int{}
	for rows.Next() {
		var pool string
		var d, f int
		if err := rows.Scan(&pool, &d, &f); err != nil {
			return nil, fmt.Errorf("job %d per pool: %w", job, err)
		}
		if d+f > 0 {
			out[pool] = [2]int{d, f}
		}
	}
	return out, rows.Err()
}
