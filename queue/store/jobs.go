package store

import (
	"cmp"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/harvest-hpc/harvest/queue/api"
	"github.com/harvest-hpc/harvest/queue/rules"
)

// NewJob is a validated job; IdemKey ("" = none) and IdemHash (its request's digest) dedupe it.
type NewJob struct {
	Owner, Name, Dataset string
	Command              []string
	BatchSize            int
	Price                float64
	Cores, MaxAttempts   int
	TimeoutS             int64
	Submitted, Expires   time.Time
	IdemKey, IdemHash    string
}

// CreateJob stores a job as SUBMITTING (invisible to reads and pulls).
func (s *Store) CreateJob(ctx context.Context, j NewJob) (id int64, err error) {
	cmd, _ := json.Marshal(j.Command) // a []string always encodes
	err = s.write(ctx, func(tx *sql.Tx) error {
		err := tx.QueryRowContext(inline(ctx), `INSERT INTO jobs (owner, name, state, dataset, output_dir, command, batch_size, price, cores, max_attempts, timeout_s, submitted_at, expires_at, idem_key, idem_hash, storer)
			VALUES ($1, $2, $3, $4, '', $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15) RETURNING id`,
			j.Owner, j.Name, rules.JobSubmitting, j.Dataset, string(cmd), j.BatchSize, j.Price, j.Cores, j.MaxAttempts, j.TimeoutS, ms(j.Submitted), ms(j.Expires), j.IdemKey, j.IdemHash, s.holder).Scan(&id)
		if duplicate(err) {
			return fmt.Errorf("%w: idempotency key %q is taken by a submission under way", api.ErrConflict, j.IdemKey)
		}
		if err == nil {
			_, err = tx.ExecContext(inline(ctx), `INSERT INTO counts (job_id) VALUES ($1)`, id)
		}
		return err
	})
	return id, wrap(err, "store job")
}

// JobByKey reads the id, request digest and state of the job key created.
func (s *Store) JobByKey(ctx context.Context, owner, key string) (id int64, hash, state string, ok bool, err error) {
	err = s.r.QueryRowContext(ctx, `SELECT id, idem_hash, state FROM jobs WHERE owner = $1 AND idem_key = $2`, owner, key).Scan(&id, &hash, &state)
	ok, err = found(err)
	return id, hash, state, ok, wrap(err, "find job by idempotency key")
}

// InsertTasks appends names (valid UTF-8: the queue's listing refuses
// others) to a SUBMITTING job's entries in transactions of at most chunk
// (chunkSizer), telling stored, if set, each one's count.
func (s *Store) InsertTasks(ctx context.Context, job int64, names []string, chunk int, stored func(int)) error {
	var next int
	err := s.r.QueryRowContext(ctx, `SELECT coalesce(max(idx) + 1, 0) FROM entries WHERE job_id = $1`, job).Scan(&next)
	for z := s.chunks(chunk); len(names) > 0 && err == nil; {
		if err = ctx.Err(); err != nil { // between chunks, not inside one
			break
		}
		part := names[:min(len(names), z.n)]
		names = names[len(part):]
		var d time.Duration
		d, err = s.transact(ctx, func(tx *sql.Tx) error {
			rows := make([][]any, len(part))
			for i, n := range part {
				rows[i] = []any{job, next + i, n}
			}
			return s.newBatch(ctx, tx).run(insertEntries, rows, "", nil)
		})
		next += len(part)
		z.took(len(part), d)
		if stored != nil && err == nil {
			stored(len(part))
		}
	}
	return wrap(err, "store tasks of job %d", job)
}

var insertEntries = rowsSQL(`INSERT INTO entries (job_id, idx, name) SELECT * FROM`, `WHERE v.column1 <> 0`, 0, 0, "")

// ErrSubmissionTaken: another agent took the submission over (TakeOverSubmission).
var ErrSubmissionTaken = errors.New("the submission is no longer stored by this agent (another agent took it over)")

// ActivateJob makes this agent's SUBMITTING job WAITING (visible).
func (s *Store) ActivateJob(ctx context.Context, id int64, outputDir string, n int) error {
	err := s.write(ctx, func(tx *sql.Tx) error {
		if ok, err := found(tx.QueryRowContext(inline(ctx), `UPDATE jobs SET state = $1, output_dir = $2, n_total = $3 WHERE id = $4 AND state = $5 AND storer = $6 RETURNING id`,
			api.JobWaiting, outputDir, n, id, rules.JobSubmitting, s.holder).Scan(new(int64))); !ok {
			return cmp.Or(err, ErrSubmissionTaken)
		}
		_, err := tx.ExecContext(inline(ctx), `UPDATE counts SET n_waiting = $1 WHERE job_id = $2`, n, id)
		return err
	})
	return wrap(err, "store job")
}

// DropJob deletes a job and all it holds, its entries in chunks (chunkSizer).
func (s *Store) DropJob(ctx context.Context, id int64, chunk int) error {
	var err error
	for z, more := s.chunks(chunk), true; more && err == nil; {
		k := z.n
		var d time.Duration
		d, err = s.transact(ctx, func(tx *sql.Tx) error {
			res, err := tx.ExecContext(inline(ctx), `DELETE FROM entries WHERE job_id = $1 AND idx <= (SELECT max(idx) FROM (SELECT idx FROM entries WHERE job_id = $1 ORDER BY idx LIMIT $2) AS c)`, id, k)
			var n int64
			if err == nil {
				n, err = res.RowsAffected()
			}
			if more = n == int64(k); err != nil || more {
				return err
			}
			return execs(ctx, tx, []any{`DELETE FROM exceptions WHERE job_id = $1`, id}, []any{`DELETE FROM grants WHERE job_id = $1`, id},
				[]any{`DELETE FROM counts WHERE job_id = $1`, id}, []any{`DELETE FROM jobs WHERE id = $1`, id})
		})
		z.took(k, d)
	}
	return wrap(err, "drop job %d", id)
}

// SubmittingBefore lists the jobs whose submission, begun before cut, is unfinished.
func (s *Store) SubmittingBefore(ctx context.Context, cut time.Time) ([]int64, error) {
	return s.ids(ctx, "find partial submissions", `SELECT id FROM jobs WHERE state = $1 AND submitted_at < $2`, rules.JobSubmitting, ms(cut))
}

// JobChange is a job's state change made by a write.
type JobChange struct {
	Job      int64
	From, To string
}

// jobColumns, read by scanJob from jobsCounted: jobs with their counters.
const (
	jobColumns = `id, owner, name, state, dataset, output_dir, command, batch_size, price, cores, max_attempts, timeout_s,
	submitted_at / 1000, started_at / 1000, finished_at / 1000, expires_at / 1000, n_total, n_waiting, n_active, n_done, n_failed, n_killed`
	jobsCounted = `jobs JOIN counts ON counts.job_id = jobs.id`
)

func scanJob(sc scanner) (api.Job, error) {
	var j api.Job
	var cmd string
	err := sc.Scan(&j.ID, &j.Owner, &j.Name, &j.State, &j.Dataset, &j.OutputDir, &cmd, &j.BatchSize, &j.Price, &j.Cores, &j.MaxAttempts, &j.TimeoutS,
		&j.SubmittedAt, &j.StartedAt, &j.FinishedAt, &j.ExpiresAt, &j.Tasks.Total, &j.Tasks.Waiting, &j.Tasks.Running, &j.Tasks.Done, &j.Tasks.Failed, &j.Tasks.Killed)
	if err == nil {
		err = wrap(json.Unmarshal([]byte(cmd), &j.Command), "job %d: stored command", j.ID)
	}
	return j, err
}

// Job reads one visible job; api.ErrNotFound when there is none.
func (s *Store) Job(ctx context.Context, id int64) (api.Job, error) {
	j, err := scanJob(s.r.QueryRowContext(ctx, `SELECT `+jobColumns+` FROM `+jobsCounted+` WHERE id = $1 AND state != $2`, id, rules.JobSubmitting))
	if errors.Is(err, sql.ErrNoRows) {
		return api.Job{}, fmt.Errorf("%w: job %d", api.ErrNotFound, id)
	}
	return j, wrap(err, "read job %d", id)
}

// ListJobs reads up to limit visible jobs of owner in state ("" = any) below cursor.
func (s *Store) ListJobs(ctx context.Context, owner, state string, cursor int64, limit int) ([]api.Job, error) {
	return list(ctx, s, "list jobs", scanJob, `SELECT `+jobColumns+` FROM `+jobsCounted+` WHERE id < $1 AND state != $2 AND (CAST($3 AS TEXT) = '' OR owner = $3) AND (CAST($4 AS TEXT) = '' OR state = $4)
		ORDER BY id DESC LIMIT $5`, cursor, rules.JobSubmitting, owner, state, limit)
}

// Cancelled is what a cancel took away from the job's owner.
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

// CancelJob makes a live job KILLED; a KILLED one is Already, others ErrConflict.
func (s *Store) CancelJob(ctx context.Context, id int64, now time.Time) (c Cancelled, err error) {
	err = s.write(ctx, func(tx *sql.Tx) error {
		var state string
		c = Cancelled{}
		if err := tx.QueryRowContext(inline(ctx), `SELECT state, n_active, cores, owner FROM `+jobsCounted+` WHERE id = $1`, id).Scan(&state, &c.Active, &c.Cores, &c.Owner); err != nil {
			return err
		}
		switch {
		case state == api.JobKilled:
			c.Active, c.Already = 0, true
			return nil
		case api.JobFinal(state):
			return fmt.Errorf("%w: job %d is already %s", api.ErrConflict, id, state)
		}
		return killJob(ctx, tx, id, api.JobKilled, ms(now), ms(now), cancelKills)
	})
	return c, wrap(err, "cancel job %d", id)
}

// killJob makes job id final, its waiting and active tasks counted killed,
// and records the task states KillTasks is to kill.
func killJob(ctx context.Context, tx *sql.Tx, id int64, state string, cancelled, finished int64, kills string) error {
	return execs(ctx, tx, []any{`UPDATE jobs SET state = $1, cancelled_at = $2, finished_at = $3, kill_states = $4 WHERE id = $5`, state, cancelled, finished, kills, id},
		[]any{`UPDATE counts SET n_killed = n_killed + n_waiting + n_active, n_waiting = 0, n_active = 0, n_retry = 0 WHERE job_id = $1`, id})
}

// KillTasks kills the tasks a cancel or expiry recorded (kill_states): live grants' open
// entries in chunks, the last with the waiting exceptions (counters moved with the job's
// state; fresh entries need no row), and clears the record, which a crash leaves (PendingKills).
func (s *Store) KillTasks(ctx context.Context, id int64, now time.Time, chunk int) error {
	var pending string
	err := s.r.QueryRowContext(ctx, `SELECT kill_states FROM jobs WHERE id = $1`, id).Scan(&pending)
	for more := pending != ""; more && err == nil; {
		err = s.write(ctx, func(tx *sql.Tx) (err error) {
			if more = pending == cancelKills; more {
				more, err = s.newBatch(ctx, tx).closeGrants(now, chunk, func(_ *jobRow, x *exceptionRow) { x.state, x.finished = api.TaskKilled, ms(now) },
					`WHERE g.job_id = $1 AND g.state != 'CLOSED' ORDER BY g.id`, id)
			}
			if err == nil && !more {
				err = execs(ctx, tx, []any{`UPDATE exceptions SET state = 'KILLED', finished_at = $1 WHERE job_id = $2 AND state = 'WAITING'`, ms(now), id},
					[]any{`UPDATE jobs SET kill_states = '' WHERE id = $1`, id})
			}
			return err
		})
	}
	return wrap(err, "kill tasks of job %d", id)
}

// PendingKills lists the jobs whose kill a crash cut, by id.
func (s *Store) PendingKills(ctx context.Context) ([]int64, error) {
	return s.ids(ctx, "list pending kills", `SELECT id FROM jobs WHERE kill_states != '' ORDER BY id`)
}

// CancelledSince lists the jobs cancelled after since, by id (at every
// pull: the WHERE repeats the partial index's).
func (s *Store) CancelledSince(ctx context.Context, since time.Time) ([]int64, error) {
	return s.ids(ctx, "list cancelled jobs", `SELECT id FROM jobs WHERE cancelled_at > 0 AND cancelled_at > $1 ORDER BY id`, ms(since))
}

// Demand sums the waiting and the active tasks of live jobs.
func (s *Store) Demand(ctx context.Context) (pending, running int, err error) {
	err = s.r.QueryRowContext(ctx, `SELECT coalesce(sum(n_waiting), 0), coalesce(sum(n_active), 0) FROM `+jobsCounted+` WHERE state IN ('WAITING', 'RUNNING')`).Scan(&pending, &running)
	return pending, running, wrap(err, "demand")
}

// TaskStats counts the tasks of stored jobs per owner, and the re-hand-outs.
func (s *Store) TaskStats(ctx context.Context) (byOwner map[string]api.TaskCounts, requeued int, err error) {
	byOwner, err = byKey(ctx, s, "stats", func(r scanner) (owner string, t api.TaskCounts, err error) {
		var n int
		err = r.Scan(&owner, &t.Total, &t.Waiting, &t.Running, &t.Done, &t.Failed, &t.Killed, &n)
		requeued += n
		return owner, t, err
	}, `SELECT owner, sum(n_total), sum(n_waiting), sum(n_active), sum(n_done), sum(n_failed), sum(n_killed), sum(n_requeued) FROM `+jobsCounted+` GROUP BY owner`)
	return byOwner, requeued, err
}

// Failures reads up to limit ever-failed entries of job above cursor, with their last failure.
func (s *Store) Failures(ctx context.Context, job, cursor int64, limit int) ([]api.Failure, error) {
	after := max(cursor-taskID(job, 0), -1)
	return list(ctx, s, fmt.Sprintf("read job %d's failures", job), func(r scanner) (f api.Failure, err error) {
		err = r.Scan(&f.Index, &f.Name, &f.State, &f.Tries, &f.Attempt, &f.Status, &f.ExitCode, &f.Site, &f.Pilot, &f.StartedAt, &f.DurationMS, &f.ErrorTail)
		f.TaskID = taskID(job, f.Index)
		return f, err
	}, `SELECT x.idx, e.name, CASE WHEN x.state = 'GRANTED' THEN coalesce(g.state, 'ASSIGNED') ELSE x.state END,
			x.tries, x.fail_attempt, x.status, x.exit_code, x.pool, x.pilot, x.started_at, x.duration_ms, x.error_tail
		FROM exceptions x JOIN entries e ON e.job_id = x.job_id AND e.idx = x.idx LEFT JOIN grants g ON g.id = x.grant_id AND x.state = 'GRANTED'
		WHERE x.job_id = $1 AND x.idx > $2 AND x.tries > 0 ORDER BY x.idx LIMIT $3`, job, after, limit)
}

// LiveJobs reads the live jobs, by price (highest first) then FIFO, and the
// cores each owner's active tasks hold.
func (s *Store) LiveJobs(ctx context.Context) (jobs []api.Job, running map[string]int, err error) {
	running = map[string]int{}
	jobs, err = list(ctx, s, "list live jobs", func(r scanner) (api.Job, error) {
		j, err := scanJob(r)
		running[j.Owner] += j.Cores * j.Tasks.Running
		return j, err
	}, `SELECT `+jobColumns+` FROM `+jobsCounted+` WHERE state IN ('WAITING', 'RUNNING') ORDER BY price DESC, id`)
	return jobs, running, err
}
