package store

import (
	"context"
	"database/sql"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/harvest-hpc/harvest/pilotproto"
	"github.com/harvest-hpc/harvest/queue/api"
	"github.com/harvest-hpc/harvest/queue/rules"
)

// taskID is an entry's task id in the pilot protocol: job and index.
func taskID(job int64, idx int) int64 { return job<<32 | int64(idx) }

func entryOf(id int64) (job int64, idx int) { return id >> 32, int(id & 0xffffffff) }

// A grant's settled marks, one per entry.
const (
	open     = '-' // no result yet
	settledD = 'D' // done
	settledR = 'R' // another result recorded (failed, timeout, interrupted, stale)
	settledX = 'X' // closed without a result (expired, killed, requeued)
)

// TakenTask is a task handed out: ASSIGNED with its new attempt.
type TakenTask struct {
	ID      int64
	Name    string
	Attempt int
}

// Taken is what Assign handed out.
type Taken struct {
	Tasks   map[int64][]TakenTask // per job: retries first, then by index; fewer than asked if fewer wait
	Gone    []int64               // the jobs asked for that are no longer live
	Changes []JobChange
}

var (
	// The first n waiting retries of each job (job, n), a seek each from
	// index -1 up: SQLite allows no LIMIT naming an outer row.
	readRetries = rowsSQL(`WITH RECURSIVE r (job, idx, k, n) AS (SELECT v.column1, -1, 0, v.column2 FROM`,
		`UNION ALL SELECT r.job, (SELECT min(x.idx) FROM exceptions x WHERE x.job_id = r.job AND x.state = 'WAITING' AND x.idx > r.idx), r.k + 1, r.n
		FROM r WHERE r.k < r.n AND r.idx IS NOT NULL)
		SELECT r.job, r.idx, x.attempt, e.name FROM r JOIN exceptions x ON x.job_id = r.job AND x.idx = r.idx
		JOIN entries e ON e.job_id = r.job AND e.idx = r.idx ORDER BY r.job, r.idx`, 0, 0)
	insertGrants = rowsSQL(`INSERT INTO grants (job_id, first_idx, last_idx, attempt, pool, epoch, assigned_at, heartbeat_at, state, settled, n_open) SELECT * FROM`,
		`WHERE v.column1 <> 0`, 0, 0, 0, 0, "", 0, 0, 0, "", "", 0)
	// A retry's grant is the one of its entry and attempt.
	markGranted = rowsSQL(`UPDATE exceptions SET state = 'GRANTED', attempt = v.column3,
		grant_id = (SELECT g.id FROM grants g WHERE g.job_id = v.column1 AND g.attempt = v.column3 AND g.first_idx = v.column2) FROM`,
		`WHERE exceptions.job_id = v.column1 AND exceptions.idx = v.column2`, 0, 0, 0)
	readNames = rowsSQL(`SELECT e.job_id, e.idx, 1, e.name FROM`,
		`JOIN entries e ON e.job_id = v.column1 AND e.idx >= v.column2 AND e.idx <= v.column3 ORDER BY e.job_id, e.idx`, 0, 1, 0)
)

// Assign hands out, for each job of takes (how many of its tasks), the
// job's waiting entries of lowest index (retries, then fresh ones) to the
// pool's lease holder, in one fenced transaction: a grant of the fresh
// entries and one per retry.
func (s *Store) Assign(ctx context.Context, pool string, epoch int64, now time.Time, takes map[int64]int) (Taken, error) {
	ids := slices.Sorted(maps.Keys(takes))
	var out Taken
	err := s.fenced(ctx, pool, epoch, now, func(tx *sql.Tx, _ rules.Lease) error {
		out = Taken{Tasks: map[int64][]TakenTask{}}
		b := s.newBatch(ctx, tx)
		b.readJobs(ids, "FOR UPDATE OF c SKIP LOCKED")
		var asked [][]any // (job, n): the job's first n waiting retries
		for _, id := range ids {
			if j := b.jobs[id]; j != nil && j.retry > 0 && takes[id] > 0 {
				asked = append(asked, []any{id, min(takes[id], j.retry)})
			}
		}
		retries := map[int64][]TakenTask{} // with their last attempt
		b.run(readRetries, asked, "", scanTasks(retries))
		at := ms(now)
		var grants, marks, ranges [][]any // the new grants; the retries (job, idx, attempt); the fresh ranges (job, first, last)
		grant := func(job int64, first, n, attempt int) []any {
			return []any{job, first, first + n - 1, attempt, pool, epoch, at, at, "ASSIGNED", strings.Repeat(string(rune(open)), n), n}
		}
		for _, id := range ids {
			j := b.jobs[id]
			if j == nil && s.pg && b.err == nil { // skipped (another agent's write holds it), or gone
				var n int
				if b.err = tx.QueryRowContext(inline(ctx), `SELECT count(*) FROM jobs WHERE id = $1`, id).Scan(&n); n > 0 {
					continue
				}
			}
			if j == nil || !rules.JobLive(j.state) {
				out.Gone = append(out.Gone, id)
				continue
			}
			rs := retries[id]
			for _, r := range rs {
				r.Attempt = max(r.Attempt+1, 2) // attempt 1 is a fresh grant's, and only its
				_, idx := entryOf(r.ID)
				grants = append(grants, grant(id, idx, 1, r.Attempt))
				marks = append(marks, []any{id, idx, r.Attempt})
				out.Tasks[id] = append(out.Tasks[id], r)
			}
			k := max(min(takes[id]-len(rs), j.c.Total-j.next), 0) // fresh entries
			if k > 0 {
				grants = append(grants, grant(id, j.next, k, 1))
				ranges = append(ranges, []any{id, j.next, j.next + k - 1})
			}
			if taken := len(rs) + k; taken > 0 {
				j.next, j.retry, j.requd = j.next+k, j.retry-len(rs), j.requd+len(rs)
				j.c.Waiting, j.c.Active, j.moved = j.c.Waiting-taken, j.c.Active+taken, true
				if j.started == 0 {
					j.started, j.startSet = at, true
				}
			}
		}
		b.run(insertGrants, grants, "", nil)
		b.run(markGranted, marks, "", nil)
		b.run(readNames, ranges, "", scanTasks(out.Tasks))
		err := b.flush(now)
		out.Changes = b.moved.Changes
		return err
	})
	return out, wrap(err, "assign")
}

// scanTasks appends each task answered (job, index, attempt, name) to out.
func scanTasks(out map[int64][]TakenTask) func(*sql.Rows) error {
	return func(rs *sql.Rows) error {
		var job int64
		var idx int
		var t TakenTask
		err := rs.Scan(&job, &idx, &t.Attempt, &t.Name)
		t.ID = taskID(job, idx)
		out[job] = append(out[job], t)
		return err
	}
}

// Applied is what a batch of results changed.
type Applied struct {
	Moved
	Duplicates, Ignored int
	Outcomes            []Outcome             // the applied results, for the per-site figures
	Usage               map[string]UsageEvent // per owner, of the results recorded (applied or stale)
	LostMS              int64                 // run time of the interrupted attempts recorded (pilots that ended under them)
}

// Outcome is an applied result, for the per-site figures.
type Outcome struct {
	Job                      int64
	Status                   string
	TurnaroundMS, DurationMS int64
}

// ApplyResults records a pool's results in one fenced transaction,
// idempotent by (task, attempt): the entry's settled mark tells a
// duplicate. A result for an entry no longer open counts for usage only;
// a current one moves its entry as rules.AfterResult says; one for another
// pool's open entry is ignored. A fresh success writes no row of its own.
func (s *Store) ApplyResults(ctx context.Context, pool string, epoch int64, now time.Time, results []pilotproto.Result) (Applied, error) {
	var a Applied
	err := s.fenced(ctx, pool, epoch, now, func(tx *sql.Tx, _ rules.Lease) error {
		b := s.newBatch(ctx, tx)
		// One array each for the whole chunk: a result's outcome and job id
		// are appended per task, and growing them was an allocation and a
		// copy per doubling.
		a = Applied{Usage: b.usage, Outcomes: make([]Outcome, 0, len(results))}
		ids := make([]int64, 0, len(results))
		var excepts [][2]int64 // the entries that may have an exception row
		for _, r := range results {
			job, idx := entryOf(r.TaskID)
			ids = append(ids, job)
			if r.Attempt > 1 || r.Status != pilotproto.StatusDone {
				excepts = append(excepts, [2]int64{job, int64(idx)})
			}
		}
		b.readJobs(ids, "FOR UPDATE OF c")
		b.readGrants(results)
		b.readExceptions(excepts)
		for i := 0; i < len(results) && b.err == nil; i++ {
			b.result(&a, pool, results[i], now)
		}
		err := b.flush(now)
		a.Moved = b.moved
		return err
	})
	return a, wrap(err, "apply results")
}

// result applies r; an error stays in b.err.
func (b *batch) result(a *Applied, pool string, r pilotproto.Result, now time.Time) {
	job, idx := entryOf(r.TaskID)
	g, j := b.cached(job, r.Attempt, idx), b.jobs[job]
	if g == nil || j == nil || g.settled[idx-g.first] == open && g.pool != pool {
		a.Ignored++ // unknown, or another pool's
		return
	}
	i := idx - g.first
	mark := g.settled[i]
	if mark == settledD || mark == settledR {
		a.Duplicates++
		return
	}
	cpu, u := float64(j.cores)*float64(r.DurationMS)/1000, b.usage[j.owner]
	b.usage[j.owner] = UsageEvent{At: ms(now), CPU: u.CPU + cpu, Cost: u.Cost + cpu*j.price}
	if r.Status == pilotproto.StatusInterrupted {
		a.LostMS += r.DurationMS
	}
	g.dirty, g.settled[i] = true, settledR
	if mark != open || !rules.JobLive(j.state) {
		// Not current: the entry left its grant, or its job's kill (counted
		// already) has not reached the grant yet.
		a.Ignored++
		if mark == open {
			g.open--
			x := b.except(g, idx)
			x.state, x.finished = api.TaskKilled, ms(now)
		}
		return
	}
	x := b.exceptions[[2]int64{job, int64(idx)}] // none for a fresh entry
	tries := 0
	if x != nil {
		tries = x.tries
	}
	tr := rules.AfterResult(rules.ActiveTask{State: g.state, Attempt: g.attempt, Tries: tries, MaxAttempts: j.maxTries, JobState: j.state}, r.Status)
	g.open--
	if tr.State == api.TaskDone {
		g.settled[i], g.done = settledD, g.done+1
	} else if tr.CountsTry { // failed or timed out
		g.failed++
	}
	if tr.State != api.TaskDone || x != nil {
		x = b.except(g, idx)
	}
	move(j, x, tr, r, pool, now)
	a.Outcomes = append(a.Outcomes, Outcome{Job: job, Status: r.Status, TurnaroundMS: max(0, ms(now)-g.assigned), DurationMS: r.DurationMS})
}

// move takes an active entry of j out of Active as tr says, at now. Its
// exception row x (nil: a fresh entry done, which needs none) takes tr's
// state and, when tr counts a try, r (reported by pool) as its last failure.
func move(j *jobRow, x *exceptionRow, tr rules.Transition, r pilotproto.Result, pool string, now time.Time) {
	j.c.Active--
	switch tr.Counter {
	case rules.ToWaiting:
		j.c.Waiting++
		j.retry++
	case rules.ToDone:
		j.c.Done++
	case rules.ToFailed:
		j.c.Failed++
	}
	j.moved = true
	if x == nil {
		return
	}
	x.state = tr.State
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

// renewGrants makes RUNNING, beating now, the pool's grants of (job,
// attempt) that hold an entry of first..last open: a seek to the grant
// holding first (or the one before it), then those up to last.
var renewGrants = rowsSQL(`UPDATE grants SET state = 'RUNNING', heartbeat_at = v.column6 FROM`, `WHERE grants.job_id = v.column1 AND grants.attempt = v.column2
	AND grants.first_idx >= coalesce((SELECT h.first_idx FROM grants h WHERE h.job_id = v.column1 AND h.attempt = v.column2 AND h.first_idx <= v.column3
		ORDER BY h.first_idx DESC LIMIT 1), v.column3)
	AND grants.first_idx <= v.column4 AND grants.last_idx >= v.column3 AND grants.pool = v.column5 AND grants.state != 'CLOSED'
	AND substr(grants.settled, `+overlapStart+` - grants.first_idx + 1, `+overlapLen+`) LIKE '%-%'`, 0, 0, 0, -1, "", 0)

// The part of a grant that first..last (v.column3, v.column4) overlaps:
// its first index and its length (0 if none: PostgreSQL refuses a
// negative one, and need not test the overlap first), integers for substr.
const (
	overlapStart = `CAST(CASE WHEN v.column3 > grants.first_idx THEN v.column3 ELSE grants.first_idx END AS INTEGER)`
	overlapLen   = `CAST(CASE WHEN grants.first_idx > v.column4 OR grants.last_idx < v.column3 THEN 0
		ELSE CASE WHEN v.column4 < grants.last_idx THEN v.column4 ELSE grants.last_idx END - CASE WHEN v.column3 > grants.first_idx THEN v.column3 ELSE grants.first_idx END + 1 END AS INTEGER)`
)

// Heartbeat renews, in one fenced transaction, the pool's lease until
// now+ttl and its grants holding an entry of the listed ranges open: a
// row per range, whatever its length.
func (s *Store) Heartbeat(ctx context.Context, pool string, epoch int64, now time.Time, ttl time.Duration, held []pilotproto.TaskRange) error {
	rows := make([][]any, len(held))
	for i, r := range held {
		job, first := entryOf(r.First)
		_, last := entryOf(r.Last)
		rows[i] = []any{job, r.Attempt, first, last, pool, ms(now)}
	}
	err := s.fenced(ctx, pool, epoch, now, func(tx *sql.Tx, l rules.Lease) error {
		l.Expires = now.Add(ttl)
		if err := s.saveLease(ctx, tx, pool, l); err != nil {
			return err
		}
		return s.newBatch(ctx, tx).run(renewGrants, rows, "", nil)
	})
	return wrap(err, "heartbeat")
}

// ActiveTasksBefore lists the pool's active tasks handed out under an
// epoch older than epoch, or under epoch before t (the zero time: none).
func (s *Store) ActiveTasksBefore(ctx context.Context, pool string, epoch int64, t time.Time) ([]pilotproto.TaskRef, error) {
	return s.openEntries(ctx, "find tasks of older epochs", `(epoch < $2 OR epoch = $3 AND assigned_at < $4)`, pool, epoch, epoch, ms(t))
}

// AssignedBefore lists the tasks of pool still ASSIGNED to epoch (no
// heartbeat has listed them) that were handed out before t.
func (s *Store) AssignedBefore(ctx context.Context, pool string, epoch int64, t time.Time) ([]pilotproto.TaskRef, error) {
	return s.openEntries(ctx, "find tasks never acknowledged", `state = 'ASSIGNED' AND epoch = $2 AND assigned_at < $3`, pool, epoch, ms(t))
}

// openEntries lists the open entries of the pool's grants where selects.
func (s *Store) openEntries(ctx context.Context, what, where, pool string, args ...any) ([]pilotproto.TaskRef, error) {
	var out []pilotproto.TaskRef
	return out, s.each(ctx, what, func(r *sql.Rows) error {
		var job int64
		var first, attempt int
		var settled string
		err := r.Scan(&job, &first, &attempt, &settled)
		for i := 0; i < len(settled); i++ {
			if settled[i] == open {
				out = append(out, pilotproto.TaskRef{TaskID: taskID(job, first+i), Attempt: attempt})
			}
		}
		return err
	}, `SELECT job_id, first_idx, attempt, settled FROM grants WHERE state != 'CLOSED' AND pool = $1 AND `+where, append([]any{pool}, args...)...)
}

// Outstanding counts the open entries of each pool's live grants.
func (s *Store) Outstanding(ctx context.Context) (map[string]int, error) {
	return s.sums(ctx, "count outstanding tasks", `SELECT pool, sum(n_open) FROM grants WHERE state != 'CLOSED' GROUP BY pool HAVING sum(n_open) > 0`)
}

// JobPools returns, per pool, the done and failed attempts of a job.
func (s *Store) JobPools(ctx context.Context, job int64) (map[string][2]int, error) {
	return byKey(ctx, s, fmt.Sprintf("job %d per pool", job), func(r scanner) (pool string, n [2]int, err error) {
		err = r.Scan(&pool, &n[0], &n[1])
		return pool, n, err
	}, `SELECT pool, sum(done), sum(failed) FROM grants WHERE job_id = $1 AND pool != '' GROUP BY pool HAVING sum(done) + sum(failed) > 0`, job)
}
