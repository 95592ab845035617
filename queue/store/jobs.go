package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	sqlite3 "github.com/mattn/go-sqlite3"

	"github.com/harvest-hpc/harvest/queue/api"
	"github.com/harvest-hpc/harvest/queue/rules"
)

// NewJob is a validated job as the service stores it.
type NewJob struct {
	Owner, Name, Dataset string
	Command              []string
	BatchSize            int
	Price                float64
	Cores, MaxAttempts   int
	TimeoutS             int64
	Submitted, Expires   time.Time
	// IdemKey and IdemHash: the submission's idempotency key ("" = none)
	// and the digest of its request.
	IdemKey, IdemHash string
}

// CreateJob stores a job in the internal SUBMITTING state (invisible to
// reads and pulls) and returns its id.
func (s *Store) CreateJob(ctx context.Context, j NewJob) (int64, error) {
	cmd, err := json.Marshal(j.Command)
	if err != nil {
		return 0, fmt.Errorf("store job: %w", err)
	}
	var id int64
	err = s.write(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(inline(ctx), `INSERT INTO jobs (owner, name, state, dataset, output_dir, command, batch_size, price, cores, max_attempts, timeout_s, submitted_at, expires_at, idem_key, idem_hash)
			VALUES (?, ?, ?, ?, '', ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
			j.Owner, j.Name, rules.JobSubmitting, j.Dataset, string(cmd), j.BatchSize, j.Price, j.Cores, j.MaxAttempts, j.TimeoutS, ms(j.Submitted), ms(j.Expires), j.IdemKey, j.IdemHash)
		var se sqlite3.Error
		if errors.As(err, &se) && se.ExtendedCode == sqlite3.ErrConstraintUnique {
			return fmt.Errorf("%w: idempotency key %q is taken by a submission under way", api.ErrConflict, j.IdemKey)
		}
		if err != nil {
			return err
		}
		id, err = res.LastInsertId()
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("store job: %w", err)
	}
	return id, nil
}

// JobByKey finds the job a submission with an idempotency key created:
// its id, the digest of that request and its state; ok is false when none
// exists.
func (s *Store) JobByKey(ctx context.Context, owner, key string) (id int64, hash, state string, ok bool, err error) {
	if err = s.settle(ctx); err != nil {
		return
	}
	err = s.r.QueryRowContext(ctx, `SELECT id, idem_hash, state FROM jobs WHERE owner = ? AND idem_key = ?`, owner, key).Scan(&id, &hash, &state)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, "", "", false, nil
	}
	if err != nil {
		return 0, "", "", false, fmt.Errorf("find job by idempotency key: %w", err)
	}
	return id, hash, state, true, nil
}

// InsertTasks inserts WAITING tasks named names for a SUBMITTING job, in
// transactions of at most chunk tasks sized to hold the write lock about
// chunkBudget each (chunkSizer); stored, when set, hears how many are
// stored after each. The names must be valid UTF-8 (the submission checks
// a dataset's entries): they reach SQLite as one JSON array per chunk.
func (s *Store) InsertTasks(ctx context.Context, job int64, names []string, now time.Time, chunk int, stored func(int)) error {
	for _, n := range names {
		if !utf8.ValidString(n) {
			return fmt.Errorf("store tasks of job %d: task name %q is not valid UTF-8", job, n)
		}
	}
	z := newChunkSizer(chunk)
	var arg []byte
	for len(names) > 0 {
		// The statements run inline (they are not interrupted): a
		// cancelled submission stops between chunks.
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("store tasks of job %d: %w", job, err)
		}
		part := names[:min(len(names), z.size())]
		names = names[len(part):]
		arg = appendStrings(arg[:0], part) // outside the lock
		d, err := s.writeTimed(ctx, func(tx *sql.Tx) error {
			_, err := s.exec(ctx, tx, insertTasksSQL, job, ms(now), string(arg)) // JSON text, bound as TEXT
			return err
		})
		if err != nil {
			return fmt.Errorf("store tasks of job %d: %w", job, err)
		}
		z.took(len(part), d)
		if stored != nil {
			stored(len(part))
		}
	}
	return nil
}

// insertTasksSQL inserts a chunk of tasks from a JSON array of names: one
// statement prepared once, where a multi-row VALUES statement was compiled
// again in every transaction and bound three arguments a row (its lock
// time per task was 1.5 times this one's).
var insertTasksSQL = hot(`INSERT INTO tasks (job_id, name, state, queued_at) SELECT ?1, value, 'WAITING', ?2 FROM json_each(?3)`)

// appendStrings appends ss as a JSON array of strings.
func appendStrings(b []byte, ss []string) []byte {
	b = append(b, '[')
	for i, v := range ss {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendString(b, v)
	}
	return append(b, ']')
}

// ActivateJob makes a SUBMITTING job WAITING with its n tasks and output
// directory: from this commit on it is visible.
func (s *Store) ActivateJob(ctx context.Context, id int64, outputDir string, n int) error {
	err := s.write(ctx, func(tx *sql.Tx) error {
		_, err := tx.ExecContext(inline(ctx), `UPDATE jobs SET state = ?, output_dir = ?, n_total = ?, n_waiting = ? WHERE id = ?`, api.JobWaiting, outputDir, n, n, id)
		return err
	})
	if err != nil {
		return fmt.Errorf("store job: %w", err)
	}
	return nil
}

// DropJob deletes a job, its tasks and their results, in transactions of
// at most chunk tasks sized to hold the write lock about chunkBudget each.
func (s *Store) DropJob(ctx context.Context, id int64, chunk int) error {
	z := newChunkSizer(chunk)
	for {
		var n int64
		k := z.size()
		d, err := s.coldTimed(ctx, func(tx *sql.Tx) error {
			if _, err := tx.ExecContext(inline(ctx), `DELETE FROM results WHERE task_id IN (SELECT id FROM tasks WHERE job_id = ? ORDER BY id LIMIT ?)`, id, k); err != nil {
				return err
			}
			res, err := tx.ExecContext(inline(ctx), `DELETE FROM tasks WHERE id IN (SELECT id FROM tasks WHERE job_id = ? ORDER BY id LIMIT ?)`, id, k)
			if err != nil {
				return err
			}
			n, err = res.RowsAffected()
			return err
		})
		if err != nil {
			return fmt.Errorf("drop job %d: %w", id, err)
		}
		if n == 0 {
			break
		}
		z.took(int(n), d)
	}
	err := s.cold(ctx, func(tx *sql.Tx) error {
		if _, err := tx.ExecContext(inline(ctx), `DELETE FROM job_pools WHERE job_id = ?`, id); err != nil {
			return err
		}
		_, err := tx.ExecContext(inline(ctx), `DELETE FROM jobs WHERE id = ?`, id)
		return err
	})
	if err != nil {
		return fmt.Errorf("drop job %d: %w", id, err)
	}
	s.noteCancelled(id, 0)
	return nil
}

// SubmittingJobs lists the jobs whose submission never completed.
func (s *Store) SubmittingJobs(ctx context.Context) ([]int64, error) {
	out, err := ids(ctx, s.r, `SELECT id FROM jobs WHERE state = ?`, rules.JobSubmitting)
	if err != nil {
		return nil, fmt.Errorf("find partial submissions: %w", err)
	}
	return out, nil
}

// JobChange is a job's state change made by a write.
type JobChange struct {
	Job      int64
	From, To string
}

const jobColumns = `id, owner, name, state, dataset, output_dir, command, batch_size, price, cores, max_attempts, timeout_s,
	submitted_at, started_at, finished_at, expires_at, n_total, n_waiting, n_active, n_done, n_failed, n_killed`

func scanJob(sc interface{ Scan(...any) error }) (api.Job, error) {
	var j api.Job
	var cmd string
	var sub, st, fin, exp int64
	err := sc.Scan(&j.ID, &j.Owner, &j.Name, &j.State, &j.Dataset, &j.OutputDir, &cmd, &j.BatchSize, &j.Price, &j.Cores, &j.MaxAttempts, &j.TimeoutS,
		&sub, &st, &fin, &exp, &j.Tasks.Total, &j.Tasks.Waiting, &j.Tasks.Running, &j.Tasks.Done, &j.Tasks.Failed, &j.Tasks.Killed)
	if err != nil {
		return j, err
	}
	j.SubmittedAt, j.StartedAt, j.FinishedAt, j.ExpiresAt = sec(sub), sec(st), sec(fin), sec(exp)
	if err := json.Unmarshal([]byte(cmd), &j.Command); err != nil {
		return j, fmt.Errorf("job %d: stored command: %w", j.ID, err)
	}
	return j, nil
}

// Job reads one visible job; api.ErrNotFound when there is none.
func (s *Store) Job(ctx context.Context, id int64) (api.Job, error) {
	var j api.Job
	err := s.readPatched(func() (err error) {
		j, err = scanJob(s.r.QueryRowContext(ctx, `SELECT `+jobColumns+` FROM jobs WHERE id = ? AND state != ?`, id, rules.JobSubmitting))
		return err
	}, func() bool { return s.patchJob(&j) })
	if errors.Is(err, sql.ErrNoRows) {
		return api.Job{}, fmt.Errorf("%w: job %d", api.ErrNotFound, id)
	}
	if err != nil {
		return api.Job{}, fmt.Errorf("read job %d: %w", id, err)
	}
	return j, nil
}

// ListJobs reads up to limit visible jobs with ids below cursor, newest
// first, of owner and in state ("" = any).
//
// Counters and states come from the overlay where it holds the job; a
// listing by state folds first, since the table's state is what it
// selects on.
func (s *Store) ListJobs(ctx context.Context, owner, state string, cursor int64, limit int) ([]api.Job, error) {
	if state != "" {
		if err := s.settle(ctx); err != nil {
			return nil, err
		}
	}
	var out []api.Job
	read := func() error {
		rows, err := s.r.QueryContext(ctx, `SELECT `+jobColumns+` FROM jobs WHERE id < ? AND state != ? AND (? = '' OR owner = ?) AND (? = '' OR state = ?)
		ORDER BY id DESC LIMIT ?`, cursor, rules.JobSubmitting, owner, owner, state, state, limit)
		if err != nil {
			return err
		}
		defer rows.Close()
		out = []api.Job{}
		for rows.Next() {
			j, err := scanJob(rows)
			if err != nil {
				return err
			}
			out = append(out, j)
		}
		return rows.Err()
	}
	patch := func() bool {
		all := true
		for i := range out {
			all = s.patchJob(&out[i]) && all
		}
		return all
	}
	if err := s.readPatched(read, patch); err != nil {
		return nil, fmt.Errorf("list jobs: %w", err)
	}
	return out, nil
}

// Cancelled is what cancelling a job took away from its owner.
type Cancelled struct {
	Owner         string
	Active, Cores int  // tasks that were active, cores per task
	Already       bool // the job was KILLED before: nothing taken now
}

// The task states a cancel and an expiry kill (jobs.kill_states).
const (
	cancelKills = "WAITING,ASSIGNED,RUNNING,ZOMBIE"
	expiryKills = "WAITING"
)

// CancelJob marks a live job KILLED (its counters: every waiting and
// active task killed) and records that its tasks are to be killed, in one
// transaction. A job KILLED already is Already (a repeated cancel: its
// tasks' kill may still be pending); another final job is
// api.ErrConflict. Its tasks follow with KillTasks.
func (s *Store) CancelJob(ctx context.Context, id int64, now time.Time) (Cancelled, error) {
	var c Cancelled
	err := s.cold(ctx, func(tx *sql.Tx) error {
		var state string
		if err := tx.QueryRowContext(inline(ctx), `SELECT state, n_active, cores, owner FROM jobs WHERE id = ?`, id).Scan(&state, &c.Active, &c.Cores, &c.Owner); err != nil {
			return err
		}
		if state == api.JobKilled {
			c.Active, c.Already = 0, true
			return nil
		}
		if api.JobFinal(state) {
			return fmt.Errorf("%w: job %d is already %s", api.ErrConflict, id, state)
		}
		_, err := tx.ExecContext(inline(ctx), `UPDATE jobs SET state = 'KILLED', cancelled_at = ?, finished_at = ?, kill_states = ?,
			n_killed = n_killed + n_waiting + n_active, n_waiting = 0, n_active = 0 WHERE id = ?`, ms(now), ms(now), cancelKills, id)
		return err
	})
	if err != nil {
		return c, fmt.Errorf("cancel job %d: %w", id, err)
	}
	if !c.Already {
		s.noteCancelled(id, ms(now))
	}
	return c, nil
}

// KillTasks kills the tasks of a KILLED or ERROR_EW job that its cancel
// or expiry recorded (jobs.kill_states), in transactions of at most chunk
// tasks sized to hold the write lock about chunkBudget each; the last one
// clears the record. Nothing is pending: nothing to do. Its counters were
// set when the job was; results and sweeps leave the tasks of a job that
// is not live alone in the meantime (rules.JobLive). A crash in between
// leaves the record, and the queue finishes it at Open (PendingKills).
func (s *Store) KillTasks(ctx context.Context, id int64, now time.Time, chunk int) error {
	var pending string
	if err := s.r.QueryRowContext(ctx, `SELECT kill_states FROM jobs WHERE id = ?`, id).Scan(&pending); err != nil {
		return fmt.Errorf("kill tasks of job %d: %w", id, err)
	}
	if pending == "" {
		return nil
	}
	states := strings.Split(pending, ",")
	for _, st := range states {
		switch st {
		case api.TaskWaiting, api.TaskAssigned, api.TaskRunning, api.TaskZombie:
		default:
			return fmt.Errorf("kill tasks of job %d: unknown state %q recorded", id, st)
		}
	}
	in := "'" + strings.Join(states, "', '") + "'"
	// The job's tasks are walked once in id order (the job index), a
	// chunk at a time from where the last chunk stopped: tasks already
	// final are passed over once, not at every chunk.
	z := newChunkSizer(chunk)
	after := int64(0)
	for {
		var last sql.NullInt64
		k := z.size()
		d, err := s.coldTimed(ctx, func(tx *sql.Tx) error {
			if err := tx.QueryRowContext(inline(ctx), `SELECT max(id) FROM (SELECT id FROM tasks WHERE job_id = ?1 AND id > ?2 ORDER BY id LIMIT ?3)`,
				id, after, k).Scan(&last); err != nil {
				return err
			}
			if !last.Valid { // every task walked: the kill is done
				_, err := tx.ExecContext(inline(ctx), `UPDATE jobs SET kill_states = '' WHERE id = ?`, id)
				return err
			}
			_, err := tx.ExecContext(inline(ctx), `UPDATE tasks SET state = 'KILLED', finished_at = ?1
				WHERE job_id = ?2 AND id > ?3 AND id <= ?4 AND state IN (`+in+`)`, ms(now), id, after, last.Int64)
			return err
		})
		if err != nil {
			return fmt.Errorf("kill tasks of job %d: %w", id, err)
		}
		if !last.Valid {
			return nil
		}
		z.took(k, d)
		after = last.Int64
	}
}

// PendingKills lists the jobs whose cancel or expiry has tasks still to
// kill (a crash cut it), by id.
func (s *Store) PendingKills(ctx context.Context) ([]int64, error) {
	if err := s.settle(ctx); err != nil {
		return nil, err
	}
	out, err := ids(ctx, s.r, `SELECT id FROM jobs WHERE kill_states != '' ORDER BY id`)
	if err != nil {
		return nil, fmt.Errorf("list pending kills: %w", err)
	}
	return out, nil
}

// CancelledSince lists the jobs cancelled after since, by id. It is asked
// at every pull and every batch of results, so it answers from memory:
// the cancelled jobs and their times are read once (through the partial
// index, whose WHERE term must be repeated for SQLite to use it), then
// CancelJob adds to them and DropJob takes away, under s.cancelMu.
func (s *Store) CancelledSince(ctx context.Context, since time.Time) ([]int64, error) {
	s.cancelMu.Lock()
	defer s.cancelMu.Unlock()
	if s.cancelled == nil {
		rows, err := s.r.QueryContext(ctx, `SELECT id, cancelled_at FROM jobs INDEXED BY jobs_cancelled WHERE cancelled_at > 0`)
		if err != nil {
			return nil, fmt.Errorf("list cancelled jobs: %w", err)
		}
		m := map[int64]int64{}
		for rows.Next() {
			var id, at int64
			if err := rows.Scan(&id, &at); err != nil {
				rows.Close()
				return nil, fmt.Errorf("list cancelled jobs: %w", err)
			}
			m[id] = at
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return nil, fmt.Errorf("list cancelled jobs: %w", err)
		}
		s.cancelled = m
	}
	out := []int64{}
	for id, at := range s.cancelled {
		if at > ms(since) {
			out = append(out, id)
		}
	}
	slices.Sort(out)
	return out, nil
}

// noteCancelled keeps CancelledSince's memory in step with a committed
// cancel (at > 0) or drop (at = 0).
func (s *Store) noteCancelled(id, at int64) {
	s.cancelMu.Lock()
	defer s.cancelMu.Unlock()
	if s.cancelled == nil {
		return // not read yet: the first read will see the table
	}
	if at > 0 {
		s.cancelled[id] = at
	} else {
		delete(s.cancelled, id)
	}
}

// Demand sums the waiting and the active tasks of live jobs.
func (s *Store) Demand(ctx context.Context) (pending, running int, err error) {
	if err = s.settle(ctx); err != nil {
		return 0, 0, err
	}
	var p, r sql.NullInt64
	err = s.r.QueryRowContext(ctx, `SELECT sum(n_waiting), sum(n_active) FROM jobs WHERE state IN ('WAITING', 'RUNNING')`).Scan(&p, &r)
	if err != nil {
		return 0, 0, fmt.Errorf("demand: %w", err)
	}
	return int(p.Int64), int(r.Int64), nil
}

// TaskCounts are an owner's tasks by state over the stored jobs.
type TaskCounts struct {
	Waiting, Running, Done, Failed, Killed int
}

// TaskStats counts the tasks of stored jobs per owner, and the hand-outs
// beyond a task's first.
func (s *Store) TaskStats(ctx context.Context) (byOwner map[string]TaskCounts, requeued int, err error) {
	if err = s.settle(ctx); err != nil {
		return
	}
	byOwner = map[string]TaskCounts{}
	rows, err := s.r.QueryContext(ctx, `SELECT owner, sum(n_waiting), sum(n_active), sum(n_done), sum(n_failed), sum(n_killed) FROM jobs GROUP BY owner`)
	if err != nil {
		return nil, 0, fmt.Errorf("stats: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var owner string
		var t TaskCounts
		if err := rows.Scan(&owner, &t.Waiting, &t.Running, &t.Done, &t.Failed, &t.Killed); err != nil {
			return nil, 0, fmt.Errorf("stats: %w", err)
		}
		byOwner[owner] = t
	}
	if err := rows.Err(); err != nil {
		return nil, 0, fmt.Errorf("stats: %w", err)
	}
	if err := s.r.QueryRowContext(ctx, `SELECT coalesce(sum(attempt - 1), 0) FROM tasks WHERE attempt > 1`).Scan(&requeued); err != nil {
		return nil, 0, fmt.Errorf("stats: %w", err)
	}
	return byOwner, requeued, nil
}

// Failures reads up to limit tasks of job with ids above cursor that
// failed at least once (tries > 0), in id order, each with its last
// failed or timed-out result that counted, or, if its last failure was
// an expiry (no result came; its row's last error says so: only the
// attempts that count write it), Status expired from its row. It folds
// first: the results live in the overlay until then. The scan walks the
// job's tasks by the job's index on the reader, outside the write lock.
func (s *Store) Failures(ctx context.Context, job, cursor int64, limit int) ([]api.Failure, error) {
	if err := s.settle(ctx); err != nil {
		return nil, err
	}
	rows, err := s.r.QueryContext(ctx, `SELECT t.id, t.name, t.state, t.tries, t.last_error,
			coalesce(r.attempt, 0), coalesce(r.status, ''), coalesce(r.exit_code, t.exit_code), coalesce(r.pool, ''), coalesce(r.pilot, ''),
			coalesce(r.started_at, 0), coalesce(r.duration_ms, 0), coalesce(r.error_tail, '')
		FROM tasks t LEFT JOIN results r ON r.task_id = t.id AND r.attempt =
			(SELECT max(x.attempt) FROM results x WHERE x.task_id = t.id AND x.status IN ('failed', 'timeout') AND x.applied = 1)
		WHERE t.job_id = ? AND t.id > ? AND t.tries > 0 ORDER BY t.id LIMIT ?`, job, cursor, limit)
	if err != nil {
		return nil, fmt.Errorf("read job %d's failures: %w", job, err)
	}
	defer rows.Close()
	out := []api.Failure{}
	for rows.Next() {
		var f api.Failure
		var lastErr string
		if err := rows.Scan(&f.TaskID, &f.Name, &f.State, &f.Tries, &lastErr, &f.Attempt, &f.Status, &f.ExitCode, &f.Site, &f.Pilot,
			&f.StartedAt, &f.DurationMS, &f.ErrorTail); err != nil {
			return nil, fmt.Errorf("read job %d's failures: %w", job, err)
		}
		if f.Status == "" || lastErr == expiredError { // its last failure was an expiry
			f.Attempt, f.Status, f.ExitCode, f.Site, f.Pilot, f.StartedAt, f.DurationMS, f.ErrorTail = 0, api.FailureStatusExpired, 0, "", "", 0, 0, lastErr
		}
		out = append(out, f)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read job %d's failures: %w", job, err)
	}
	return out, nil
}
