package queue

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/harvest-hpc/harvest/queue/api"
)

// counts are a job's task counters as stored in the jobs row.
type counts struct {
	total, waiting, active, done, failed, killed int
}

// jobState derives a job's state from its tasks (the master-job/sub-job
// rule). KILLED and ERROR_EW are set by cancel and expiry and stay.
func jobState(cur string, started bool, c counts) string {
	switch {
	case cur == api.JobKilled || cur == api.JobErrorEW || cur == submitting:
		return cur
	case c.total > 0 && c.done+c.failed+c.killed == c.total:
		switch {
		case c.failed == 0 && c.killed == 0:
			return api.JobDone
		case c.done == 0:
			return api.JobFailed
		}
		return api.JobDoneWarn
	case started || c.active > 0 || c.done+c.failed > 0:
		return api.JobRunning
	}
	return api.JobWaiting
}

// refreshJob recomputes a job's state from its counters inside tx.
func (q *Queue) refreshJob(ctx context.Context, tx *sql.Tx, id int64, now int64) error {
	var cur string
	var started int64
	var c counts
	err := tx.QueryRowContext(ctx, `SELECT state, started_at, n_total, n_waiting, n_active, n_done, n_failed, n_killed FROM jobs WHERE id = ?`, id).
		Scan(&cur, &started, &c.total, &c.waiting, &c.active, &c.done, &c.failed, &c.killed)
	if err != nil {
		return fmt.Errorf("job %d: %w", id, err)
	}
	next := jobState(cur, started > 0, c)
	if next == cur {
		return nil
	}
	fin := int64(0)
	if api.JobFinal(next) {
		fin = now
	}
	_, err = tx.ExecContext(ctx, `UPDATE jobs SET state = ?, finished_at = ? WHERE id = ?`, next, fin, id)
	if err == nil {
		q.log.Info("job state changed", "job", id, "from", cur, "to", next)
	}
	return err
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

// Job returns one job. A user asking for another user's job gets
// api.ErrNotFound, exactly as for a job that does not exist, so job ids do not
// leak who runs what; admins see every job.
func (q *Queue) Job(ctx context.Context, caller string, admin bool, id int64) (api.Job, error) {
	j, err := scanJob(q.r.QueryRowContext(ctx, `SELECT `+jobColumns+` FROM jobs WHERE id = ? AND state != ?`, id, submitting))
	if errors.Is(err, sql.ErrNoRows) || (err == nil && !admin && j.Owner != caller) {
		return api.Job{}, fmt.Errorf("%w: job %d", api.ErrNotFound, id)
	}
	if err != nil {
		return api.Job{}, fmt.Errorf("read job %d: %w", id, err)
	}
	return j, nil
}

// ListFilter selects jobs for ListJobs.
type ListFilter struct {
	Owner  string // "" = all (admin only)
	State  string // "" = any
	Cursor int64  // list ids below this (0 = from the newest)
	Limit  int
}

// ListJobs returns a page of jobs, newest first.
func (q *Queue) ListJobs(ctx context.Context, f ListFilter) (api.JobList, error) {
	if f.Limit <= 0 {
		f.Limit = api.DefaultPageLim
	}
	if f.Limit > api.MaxPageLimit {
		return api.JobList{}, invalid("limit %d exceeds %d", f.Limit, api.MaxPageLimit)
	}
	if f.Cursor < 0 {
		return api.JobList{}, invalid("cursor must not be negative")
	}
	if f.State != "" && !knownJobState(f.State) {
		return api.JobList{}, invalid("unknown job state %q", f.State)
	}
	cursor := f.Cursor
	if cursor == 0 {
		cursor = 1<<63 - 1
	}
	rows, err := q.r.QueryContext(ctx, `SELECT `+jobColumns+` FROM jobs WHERE id < ? AND state != ? AND (? = '' OR owner = ?) AND (? = '' OR state = ?)
		ORDER BY id DESC LIMIT ?`, cursor, submitting, f.Owner, f.Owner, f.State, f.State, f.Limit+1)
	if err != nil {
		return api.JobList{}, fmt.Errorf("list jobs: %w", err)
	}
	defer rows.Close()
	out := api.JobList{Jobs: []api.Job{}}
	for rows.Next() {
		j, err := scanJob(rows)
		if err != nil {
			return api.JobList{}, fmt.Errorf("list jobs: %w", err)
		}
		out.Jobs = append(out.Jobs, j)
	}
	if err := rows.Err(); err != nil {
		return api.JobList{}, fmt.Errorf("list jobs: %w", err)
	}
	if len(out.Jobs) > f.Limit {
		out.Jobs = out.Jobs[:f.Limit]
		out.NextCursor = out.Jobs[f.Limit-1].ID
	}
	return out, nil
}

func knownJobState(s string) bool {
	switch s {
	case api.JobWaiting, api.JobRunning, api.JobDone, api.JobDoneWarn, api.JobFailed, api.JobKilled, api.JobErrorEW:
		return true
	}
	return false
}

// Cancel kills a job: its waiting tasks will never run and its running
// tasks are stopped by the master, which learns it at its next exchange.
// Cancelling a final job is a conflict and changes nothing.
func (q *Queue) Cancel(ctx context.Context, caller string, admin bool, id int64) (api.Job, error) {
	j, err := q.Job(ctx, caller, admin, id)
	if err != nil {
		return j, err
	}
	if api.JobFinal(j.State) {
		return j, fmt.Errorf("%w: job %d is already %s", api.ErrConflict, id, j.State)
	}
	q.mut.Lock()
	defer q.mut.Unlock()
	now := ms(q.now())
	var active, cores int
	var owner string
	err = q.write(ctx, func(tx *sql.Tx) error {
		var state string
		if err := tx.QueryRowContext(ctx, `SELECT state, n_active, cores, owner FROM jobs WHERE id = ?`, id).Scan(&state, &active, &cores, &owner); err != nil {
			return err
		}
		if api.JobFinal(state) {
			return fmt.Errorf("%w: job %d is already %s", api.ErrConflict, id, state)
		}
		_, err := tx.ExecContext(ctx, `UPDATE jobs SET state = 'KILLED', cancelled_at = ?, finished_at = ?,
			n_killed = n_killed + n_waiting + n_active, n_waiting = 0, n_active = 0 WHERE id = ?`, now, now, id)
		return err
	})
	if err != nil {
		return j, fmt.Errorf("cancel job %d: %w", id, err)
	}
	q.mu.Lock()
	q.userLocked(owner).running -= active * cores
	q.users[owner].dirty = true
	q.mu.Unlock()
	// The job is KILLED already (pulls skip it); its tasks follow in short writes.
	for {
		var n int64
		err := q.write(ctx, func(tx *sql.Tx) error {
			res, err := tx.ExecContext(ctx, `UPDATE tasks SET state = 'KILLED', finished_at = ? WHERE id IN
				(SELECT id FROM tasks WHERE job_id = ? AND state IN ('WAITING', 'ASSIGNED', 'RUNNING', 'ZOMBIE') LIMIT ?)`, now, id, q.cfg.InsertChunk)
			if err != nil {
				return err
			}
			n, err = res.RowsAffected()
			return err
		})
		if err != nil {
			return j, fmt.Errorf("cancel tasks of job %d: %w", id, err)
		}
		if n == 0 {
			break
		}
	}
	q.log.Info("job cancelled", "job", id, "by", caller, "running_tasks", active)
	return q.Job(ctx, caller, admin, id)
}

// cancelledSince lists jobs cancelled in the last CancelNotice, which the
// master must stop (repeated at every exchange in that window, so a lost
// answer costs nothing).
func (q *Queue) cancelledSince(ctx context.Context) ([]int64, error) {
	ids, err := q.ids(ctx, `SELECT id FROM jobs WHERE cancelled_at > ? ORDER BY id`, ms(q.now().Add(-q.cfg.CancelNotice)))
	if err != nil {
		return nil, fmt.Errorf("list cancelled jobs: %w", err)
	}
	return ids, nil
}

// ids runs a read query whose rows are single ids.
func (q *Queue) ids(ctx context.Context, query string, args ...any) ([]int64, error) {
	rows, err := q.r.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var ids []int64
	for rows.Next() {
		var id int64
		if err := rows.Scan(&id); err != nil {
			return nil, err
		}
		ids = append(ids, id)
	}
	return ids, rows.Err()
}
