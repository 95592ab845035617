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
	// The first n waiting retries of each job (job, n), an index seek
	// each (exceptions_waiting): SQLite allows no LIMIT that names an
	// outer row, so the walk is a recursive query.
	readRetries = rowsSQL(`WITH RECURSIVE r (job, idx, k, n) AS (
		SELECT v.column1, (SELECT min(x.idx) FROM exceptions x WHERE x.job_id = v.column1 AND x.state = 'WAITING'), 1, v.column2 FROM `,
		[]string{i64, i64}, `UNION ALL SELECT r.job, (SELECT min(x.idx) FROM exceptions x WHERE x.job_id = r.job AND x.state = 'WAITING' AND x.idx > r.idx), r.k + 1, r.n
		FROM r WHERE r.k < r.n AND r.idx IS NOT NULL)
		SELECT r.job, r.idx, x.attempt, e.name FROM r JOIN exceptions x ON x.job_id = r.job AND x.idx = r.idx
		JOIN entries e ON e.job_id = r.job AND e.idx = r.idx ORDER BY r.job, r.idx`, 0, 0)
	// Grants, fresh or of a retried entry (whose exception row is then
	// marked GRANTED to it).
	insertGrants = rowsSQL(`INSERT INTO grants (job_id, first_idx, last_idx, attempt, pool, epoch, pilot, assigned_at, heartbeat_at, state, settled, n_open) SELECT * FROM `,
		[]string{i64, i64, i64, i64, txt, i64, txt, i64, i64, txt, txt, i64}, `WHERE v.column1 <> 0 RETURNING id, job_id, first_idx, attempt`,
		0, 0, 0, 0, "", 0, "", 0, 0, "", "", 0)
	markGranted = rowsSQL(`UPDATE exceptions SET state = 'GRANTED', attempt = v.column3, grant_id = v.column4 FROM `,
		[]string{i64, i64, i64, i64}, `WHERE exceptions.job_id = v.column1 AND exceptions.idx = v.column2`, 0, 0, 0, 0)
	// The entries of ranges (job, first, last).
	readNames = rowsSQL(`SELECT e.job_id, e.idx, e.name FROM `, []string{i64, i64, i64},
		`JOIN entries e ON e.job_id = v.column1 AND e.idx >= v.column2 AND e.idx <= v.column3 ORDER BY e.job_id, e.idx`, 0, 1, 0)
)

// insertGrants inserts grants (rows of insertGrants' columns) and marks
// the exception rows of the retried entries among them GRANTED.
func (b *batch) insertGrants(rows [][]any) error {
	var marks [][]any
	err := b.run(insertGrants, rows, "", func(rs *sql.Rows) error {
		var id, job int64
		var idx, attempt int
		if err := rs.Scan(&id, &job, &idx, &attempt); err != nil {
			return err
		}
		if attempt > 1 {
			marks = append(marks, []any{job, idx, attempt, id})
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("insert grants: %w", err)
	}
	if err := b.run(markGranted, marks, "", nil); err != nil {
		return fmt.Errorf("mark retries granted: %w", err)
	}
	return nil
}

// names appends the fresh tasks of ranges (job, first, last) to out, each
// job's in index order after its retries.
func (b *batch) names(ranges [][]any, out map[int64][]TakenTask) error {
	return b.run(readNames, ranges, "", func(rs *sql.Rows) error {
		var job int64
		var idx int
		var name string
		if err := rs.Scan(&job, &idx, &name); err != nil {
			return err
		}
		out[job] = append(out[job], TakenTask{ID: taskID(job, idx), Name: name, Attempt: 1})
		return nil
	})
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
		if err := b.readJobs(ids); err != nil {
			return err
		}
		// The jobs' retries, read at once.
		want := map[int64]int{}
		for _, t := range takes {
			if j := b.jobs[t.Job]; j != nil && j.retry > 0 && t.N > 0 {
				want[t.Job] = min(want[t.Job]+t.N, j.retry)
			}
		}
		var asked [][]any
		for _, id := range slices.Sorted(maps.Keys(want)) {
			asked = append(asked, []any{id, want[id]})
		}
		retries := map[int64][]TakenTask{}
		err := b.run(readRetries, asked, "", func(rs *sql.Rows) error {
			var job int64
			var r TakenTask
			var idx int
			err := rs.Scan(&job, &idx, &r.Attempt, &r.Name)
			r.ID = taskID(job, idx)
			retries[job] = append(retries[job], r)
			return err
		})
		if err != nil {
			return fmt.Errorf("read retries: %w", err)
		}
		at := ms(now)
		var grants [][]any // the new grants' rows: a range of fresh entries, or one retried entry
		var ranges [][]any // the fresh ranges (job, first, last)
		for _, t := range takes {
			j := b.jobs[t.Job]
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
			rs := retries[t.Job][:min(n, len(retries[t.Job]))]
			retries[t.Job] = retries[t.Job][len(rs):]
			for _, r := range rs {
				// Attempt 1 is a fresh grant's, and only its.
				r.Attempt = max(r.Attempt+1, 2)
				_, idx := entryOf(r.ID)
				grants = append(grants, []any{t.Job, idx, idx, r.Attempt, pool, epoch, l.Holder, at, at, "ASSIGNED", string(rune(open)), 1})
				out.Tasks[t.Job] = append(out.Tasks[t.Job], r)
			}
			j.retry -= len(rs)
			j.requd += len(rs)
			n -= len(rs)
			if k := min(n, j.c.Total-j.next); k > 0 {
				grants = append(grants, []any{t.Job, j.next, j.next + k - 1, 1, pool, epoch, l.Holder, at, at, "ASSIGNED", strings.Repeat(string(rune(open)), k), k})
				ranges = append(ranges, []any{t.Job, j.next, j.next + k - 1})
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
		}
		if err := b.insertGrants(grants); err != nil {
			return err
		}
		if err := b.names(ranges, out.Tasks); err != nil {
			return err
		}
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
		// Every row the results need, a statement per kind: their jobs,
		// their grants, and the exception rows of the entries that are
		// not a first attempt's plain success.
		ids := make([]int64, len(results))
		keys := make([]entryKey, len(results))
		var excepts [][2]int64
		for i, r := range results {
			var idx int
			ids[i], idx = entryOf(r.TaskID)
			keys[i] = entryKey{ids[i], int64(r.Attempt), int64(idx)}
			if r.Attempt > 1 || r.Status != pilotproto.StatusDone {
				excepts = append(excepts, [2]int64{ids[i], int64(idx)})
			}
		}
		if err := b.readJobs(ids); err != nil {
			return err
		}
		if err := b.readGrants(keys); err != nil {
			return err
		}
		if err := b.readExceptions(excepts); err != nil {
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
// transaction: one UPDATE of the grants, nothing per task. It returns the
// renewed lease.
func (s *Store) Heartbeat(ctx context.Context, pool string, epoch int64, now time.Time, ttl time.Duration, refs []pilotproto.TaskRef) (rules.Lease, error) {
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
		if err := b.readGrants(keys); err != nil {
			return err
		}
		var beat [][]any
		for _, k := range keys {
			g := b.cached(k)
			if g == nil || g.beat || g.pool != pool || g.state == grantClosed || g.settled[int(k[2])-g.first] != open {
				continue
			}
			g.beat = true
			beat = append(beat, []any{g.id, ms(now)})
		}
		if err := b.run(beatGrants, beat, "", nil); err != nil {
			return err
		}
		return nil
	})
	if err != nil {
		return rules.Lease{}, fmt.Errorf("heartbeat: %w", err)
	}
	return next, nil
}

var beatGrants = rowsSQL(`UPDATE grants SET state = 'RUNNING', heartbeat_at = v.column2 FROM `, []string{i64, i64},
	`WHERE grants.id = v.column1 AND grants.state != 'CLOSED'`, 0, 0)

// ActiveTasksBefore lists the pool's active tasks handed out under an
// epoch older than epoch.
func (s *Store) ActiveTasksBefore(ctx context.Context, pool string, epoch int64) ([]pilotproto.TaskRef, error) {
	return s.openEntries(ctx, "find tasks of older epochs", `epoch < ?`, pool, epoch)
}

// ActiveTasksOfEpochBefore lists the pool's active tasks handed out under
// epoch before t.
func (s *Store) ActiveTasksOfEpochBefore(ctx context.Context, pool string, epoch int64, t time.Time) ([]pilotproto.TaskRef, error) {
	return s.openEntries(ctx, "find tasks handed out before the open", `epoch = ? AND assigned_at < ?`, pool, epoch, ms(t))
}

// AssignedBefore lists the tasks of pool still ASSIGNED to epoch (no
// heartbeat has listed them) that were handed out before t.
func (s *Store) AssignedBefore(ctx context.Context, pool string, epoch int64, t time.Time) ([]pilotproto.TaskRef, error) {
	return s.openEntries(ctx, "find tasks never acknowledged", `state = 'ASSIGNED' AND epoch = ? AND assigned_at < ?`, pool, epoch, ms(t))
}

// openEntries lists the open entries of a pool's live grants that where
// (with the arguments after pool) selects as task references, on a
// reader; what names the search in its errors.
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
	}, `SELECT job_id, first_idx, attempt, settled FROM grants WHERE state != 'CLOSED' AND pool = ? AND `+where, append([]any{pool}, args...)...)
}

// Outstanding counts the active tasks (handed out, not finished) of each
// pool: the open entries of its live grants.
func (s *Store) Outstanding(ctx context.Context) (map[string]int, error) {
	return s.sums(ctx, "count outstanding tasks", `SELECT pool, sum(n_open) FROM grants WHERE state != 'CLOSED' GROUP BY pool HAVING sum(n_open) > 0`)
}

// JobPools returns, per pool, the done and failed attempts of a job: where
// its tasks ran (the sums of its grants).
func (s *Store) JobPools(ctx context.Context, job int64) (map[string][2]int, error) {
	out := map[string][2]int{}
	return out, s.each(ctx, fmt.Sprintf("job %d per pool", job), func(r *sql.Rows) error {
		var pool string
		var d, f int
		err := r.Scan(&pool, &d, &f)
		out[pool] = [2]int{d, f}
		return err
	}, `SELECT pool, sum(done), sum(failed) FROM grants WHERE job_id = ? AND pool != '' GROUP BY pool HAVING sum(done) + sum(failed) > 0`, job)
}
