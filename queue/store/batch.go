package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/harvest-hpc/harvest/pilotproto"
	"github.com/harvest-hpc/harvest/queue/api"
	"github.com/harvest-hpc/harvest/queue/rules"
)

// A batch is a hot-path transaction's rows (a pull, results, a sweep, a
// kill): read a kind at a time, changed in memory, written back a kind at
// a time (flush), many rows per statement.

// jobRow is a job's row and counter row: its state is derived in Go.
type jobRow struct {
	id, started, finished int64
	state, from, owner    string
	cores, maxTries       int
	price                 float64
	next, retry, requd    int
	c, was                rules.Counts // now and as read
	moved, startSet       bool         // counters changed; started set in this transaction
}

type grantRow struct {
	id, job, assigned    int64
	first, last, attempt int
	pool, state          string
	settled              []byte
	open, done, failed   int
	dirty                bool
}

type exceptionRow struct {
	job, grant, queued, finished     int64
	idx, attempt, tries, failAttempt int
	state, status, pool, pilot, tail string
	exit                             int
	started, duration                int64
	dirty                            bool
}

const exceptionCols = `job_id, idx, state, attempt, tries, grant_id, queued_at, finished_at, fail_attempt, status, exit_code, pool, pilot, started_at, duration_ms, error_tail`

// fields are x's exceptionCols, to scan into and to write.
func (x *exceptionRow) fields() []any {
	return []any{&x.job, &x.idx, &x.state, &x.attempt, &x.tries, &x.grant, &x.queued, &x.finished, &x.failAttempt,
		&x.status, &x.exit, &x.pool, &x.pilot, &x.started, &x.duration, &x.tail}
}

type batch struct {
	s          *Store
	ctx        context.Context
	tx         *sql.Tx
	jobs       map[int64]*jobRow          // nil: no such job (or skipped: locked by another agent)
	byJob      map[[2]int64][]*grantRow   // (job, attempt)
	exceptions map[[2]int64]*exceptionRow // (job, idx); nil: none
	usage      map[string]UsageEvent      // per owner, of a batch of results
	moved      Moved                      // what flush changed of what the service mirrors
	err        error                      // the first statement's error: later ones do not run
}

func (s *Store) newBatch(ctx context.Context, tx *sql.Tx) *batch {
	return &batch{s: s, ctx: ctx, tx: tx, jobs: map[int64]*jobRow{}, byJob: map[[2]int64][]*grantRow{},
		exceptions: map[[2]int64]*exceptionRow{}, usage: map[string]UsageEvent{},
		moved: Moved{Running: map[string]int{}, Waiting: map[int64]int{}}}
}

// rowStatements is head (VALUES rows) AS v tail, prepared once for each
// of rowSizes rows: a call's rows go in as few statements as the sizes
// allow, the last padded with pad rows, which match or write nothing.
// PostgreSQL needs each parameter cast, to its pad value's type.
// bySize builds them at first use: every process of the one binary (a
// worker, each job's task runner) ran the package's init, 11 ms of CPU
// and 51,000 allocations for statements only the queue runs.
type rowStatements struct {
	bySize func() []string
	pad    []any
}

var rowSizes = []int{1, 4, 16, 64, 128}

func rowsSQL(head, tail string, pad ...any) rowStatements {
	types := make([]string, len(pad))
	for i, v := range pad {
		types[i] = "BIGINT"
		switch v.(type) {
		case string, *string:
			types[i] = "TEXT"
		case float64:
			types[i] = "DOUBLE PRECISION"
		}
	}
	return rowStatements{pad: pad, bySize: sync.OnceValue(func() (bySize []string) {
		for _, n := range rowSizes {
			rows := make([]string, n)
			for r := range rows {
				cols := make([]string, len(pad))
				for i := range pad {
					cols[i] = fmt.Sprintf("CAST($%d AS %s)", r*len(pad)+i+1, types[i])
				}
				rows[r] = "(" + strings.Join(cols, ", ") + ")"
			}
			bySize = append(bySize, head+" (VALUES "+strings.Join(rows, ", ")+") AS v "+tail)
		}
		return bySize
	})}
}

// run runs st over rows, tail appended, and calls scan, if any, on every
// row answered; it returns (and keeps) the batch's first error.
func (b *batch) run(st rowStatements, rows [][]any, tail string, scan func(*sql.Rows) error) error {
	for len(rows) > 0 && b.err == nil {
		k := min(sort.SearchInts(rowSizes, len(rows)), len(rowSizes)-1)
		n := min(len(rows), rowSizes[k])
		args := slices.Concat(rows[:n]...)
		for range rowSizes[k] - n {
			args = append(args, st.pad...)
		}
		rows = rows[n:]
		rs, err := b.tx.QueryContext(inline(b.ctx), st.bySize()[k]+tail, args...)
		if err == nil {
			for err == nil && rs.Next() { // SQLite runs a statement in Next
				if scan != nil {
					err = scan(rs)
				}
			}
			err = errors.Join(err, rs.Close(), rs.Err())
		}
		if err != nil {
			b.err = fmt.Errorf("%.40s: %w", st.bySize()[0], err)
		}
	}
	return b.err
}

var (
	readJobs = rowsSQL(`SELECT j.id, j.state, j.owner, j.cores, j.price, j.max_attempts, j.started_at, j.finished_at, j.n_total,
		c.next_idx, c.n_waiting, c.n_retry, c.n_active, c.n_done, c.n_failed, c.n_killed, c.n_requeued FROM`,
		`JOIN jobs j ON j.id = v.column1 JOIN counts c ON c.job_id = j.id`, 0)
	// The grants holding a run of entries (job, attempt, first, last).
	readGrants = rowsSQL(`SELECT `+grantCols+` FROM`, `JOIN grants g ON g.job_id = v.column1 AND g.attempt = v.column2 AND g.first_idx <= v.column4
		AND g.first_idx >= coalesce((SELECT h.first_idx FROM grants h WHERE h.job_id = v.column1 AND h.attempt = v.column2 AND h.first_idx <= v.column3
			ORDER BY h.first_idx DESC LIMIT 1), v.column3)`, 0, 0, 0, -1)
	readExceptions = rowsSQL(`SELECT `+exceptionCols+` FROM`, `JOIN exceptions x ON x.job_id = v.column1 AND x.idx = v.column2`, 0, -1)
)

// readJobs reads the rows of the jobs ids not read, on PostgreSQL
// locking their counter rows with lock.
func (b *batch) readJobs(ids []int64, lock string) error {
	want := unread(b.jobs, ids, func(id int64) []any { return []any{id} })
	tail := ""
	if b.s.pg {
		tail = " ORDER BY j.id " + lock // one order: no deadlock
	}
	return b.run(readJobs, want, tail, func(rs *sql.Rows) error {
		j := &jobRow{}
		err := rs.Scan(&j.id, &j.state, &j.owner, &j.cores, &j.price, &j.maxTries, &j.started, &j.finished, &j.c.Total,
			&j.next, &j.c.Waiting, &j.retry, &j.c.Active, &j.c.Done, &j.c.Failed, &j.c.Killed, &j.requd)
		j.from, j.was = j.state, j.c
		b.jobs[j.id] = j
		return err
	})
}

// unread returns the rows to read of the keys not in read, put there as
// nil until read.
func unread[K comparable, V any](read map[K]*V, keys []K, row func(K) []any) (want [][]any) {
	for _, k := range keys {
		if _, ok := read[k]; !ok {
			read[k] = nil
			want = append(want, row(k))
		}
	}
	return want
}

// cached finds the grant holding entry idx of a job's attempt among those
// the batch has read.
func (b *batch) cached(job int64, attempt, idx int) *grantRow {
	for _, g := range b.byJob[[2]int64{job, int64(attempt)}] {
		if g.first <= idx && idx <= g.last {
			return g
		}
	}
	return nil
}

// readGrants reads the grants holding the entries results name, by runs
// of entries.
func (b *batch) readGrants(results []pilotproto.Result) error {
	keys := make([][3]int64, len(results)) // (job, attempt, index)
	for i, r := range results {
		job, idx := entryOf(r.TaskID)
		keys[i] = [3]int64{job, int64(r.Attempt), int64(idx)}
	}
	slices.SortFunc(keys, func(x, y [3]int64) int { return slices.Compare(x[:], y[:]) })
	var runs [][]any
	for i, k := range keys {
		if i > 0 && k[0] == keys[i-1][0] && k[1] == keys[i-1][1] && k[2] <= keys[i-1][2]+1 {
			runs[len(runs)-1][3] = k[2]
			continue
		}
		runs = append(runs, []any{k[0], k[1], k[2], k[2]})
	}
	return b.run(readGrants, runs, "", func(rs *sql.Rows) error {
		g, err := scanGrant(rs)
		if err == nil && b.cached(g.job, g.attempt, g.first) == nil {
			b.addGrant(g)
		}
		return err
	})
}

const grantCols = `g.id, g.job_id, g.attempt, g.first_idx, g.last_idx, g.pool, g.state, g.settled, g.n_open, g.done, g.failed, g.assigned_at`

func scanGrant(rs *sql.Rows) (*grantRow, error) {
	g := &grantRow{}
	return g, rs.Scan(&g.id, &g.job, &g.attempt, &g.first, &g.last, &g.pool, &g.state, &g.settled, &g.open, &g.done, &g.failed, &g.assigned)
}

func (b *batch) addGrant(g *grantRow) {
	k := [2]int64{g.job, int64(g.attempt)}
	b.byJob[k] = append(b.byJob[k], g)
}

// readExceptions reads the exception rows of entries (job, idx) not read.
func (b *batch) readExceptions(entries [][2]int64) error {
	want := unread(b.exceptions, entries, func(k [2]int64) []any { return []any{k[0], k[1]} })
	return b.run(readExceptions, want, "", func(rs *sql.Rows) error {
		x := &exceptionRow{}
		err := rs.Scan(x.fields()...)
		b.exceptions[[2]int64{x.job, int64(x.idx)}] = x
		return err
	})
}

// except returns the exception row (new if none), to be written, of entry
// idx of grant g, where the entry is open; an error stays in b.err.
func (b *batch) except(g *grantRow, idx int) *exceptionRow {
	k := [2]int64{g.job, int64(idx)}
	b.readExceptions([][2]int64{k})
	x := b.exceptions[k]
	if x == nil {
		x = &exceptionRow{job: g.job, idx: idx}
		b.exceptions[k] = x
	}
	x.attempt, x.grant, x.dirty = g.attempt, g.id, true
	return x
}

var (
	writeGrants = rowsSQL(`UPDATE grants SET state = CASE WHEN v.column4 = 0 THEN 'CLOSED' ELSE v.column2 END, settled = v.column3, n_open = v.column4, done = v.column5, failed = v.column6 FROM`,
		`WHERE grants.id = v.column1`, 0, "", "", 0, 0, 0)
	// (SQLite needs a WHERE before ON CONFLICT in INSERT ... SELECT.)
	writeExcepts = rowsSQL(`INSERT INTO exceptions (`+exceptionCols+`) SELECT * FROM`,
		`WHERE v.column1 <> 0 ON CONFLICT (job_id, idx) DO UPDATE SET state = excluded.state, attempt = excluded.attempt, tries = excluded.tries, grant_id = excluded.grant_id,
		queued_at = excluded.queued_at, finished_at = excluded.finished_at, fail_attempt = excluded.fail_attempt, status = excluded.status,
		exit_code = excluded.exit_code, pool = excluded.pool, pilot = excluded.pilot, started_at = excluded.started_at,
		duration_ms = excluded.duration_ms, error_tail = excluded.error_tail`, (&exceptionRow{}).fields()...)
	logUsage   = rowsSQL(`INSERT INTO usage_log (at, owner, cpu_s, cost) SELECT * FROM`, `WHERE v.column2 <> ''`, 0, "", 0.0, 0.0)
	writeCount = rowsSQL(`UPDATE counts SET next_idx = v.column2, n_waiting = v.column3, n_retry = v.column4, n_active = v.column5,
		n_done = v.column6, n_failed = v.column7, n_killed = v.column8, n_requeued = v.column9 FROM`, `WHERE counts.job_id = v.column1`, 0, 0, 0, 0, 0, 0, 0, 0, 0)
	writeJobStates = rowsSQL(`UPDATE jobs SET state = v.column2, started_at = v.column3, finished_at = v.column4 FROM`, `WHERE jobs.id = v.column1`, 0, "", 0, 0)
)

// Moved is what a write changed of what the service mirrors.
type Moved struct {
	Running map[string]int // change of running cores per owner
	Waiting map[int64]int  // change of waiting tasks per job
	Changes []JobChange
}

// flush writes back the rows changed, and puts in b.moved the jobs' state
// changes and the moves of their counters.
func (b *batch) flush(now time.Time) error {
	var grants, excepts, usage, counts, states [][]any
	for _, gs := range b.byJob {
		for _, g := range gs {
			if g.dirty {
				grants = append(grants, []any{g.id, g.state, string(g.settled), g.open, g.done, g.failed})
			}
		}
	}
	for _, x := range b.exceptions {
		if x != nil && x.dirty {
			excepts = append(excepts, x.fields())
		}
	}
	for o, u := range b.usage {
		usage = append(usage, []any{u.At, o, u.CPU, u.Cost})
	}
	for _, j := range b.jobs {
		if j == nil || !j.moved {
			continue
		}
		counts = append(counts, []any{j.id, j.next, j.c.Waiting, j.retry, j.c.Active, j.c.Done, j.c.Failed, j.c.Killed, j.requd})
		b.moved.Running[j.owner] += (j.c.Active - j.was.Active) * j.cores
		b.moved.Waiting[j.id] = j.c.Waiting - j.was.Waiting
		if j.state = rules.JobState(j.from, j.started > 0, j.c); j.state != j.from {
			j.finished = 0
			if api.JobFinal(j.state) {
				j.finished = ms(now)
			}
			b.moved.Changes = append(b.moved.Changes, JobChange{j.id, j.from, j.state})
		}
		if j.state != j.from || j.startSet {
			states = append(states, []any{j.id, j.state, j.started, j.finished})
		}
	}
	rows := [][][]any{grants, excepts, usage, counts, states}
	for i, st := range []rowStatements{writeGrants, writeExcepts, logUsage, writeCount, writeJobStates} {
		b.run(st, rows[i], "", nil)
	}
	return b.err
}
