package store

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/harvest-hpc/harvest/queue/rules"
)

// MarkZombies makes up to limit ASSIGNED or RUNNING tasks whose last
// heartbeat is older than cut ZOMBIE, in one transaction.
func (s *Store) MarkZombies(ctx context.Context, cut time.Time, limit int) (int, error) {
	var n int64
	err := s.cold(ctx, func(tx *sql.Tx) error {
		// The repeated state term makes the partial index of active tasks
		// usable (SQLite matches its WHERE term for term): without it the
		// sweep scanned every task inside its write transaction.
		res, err := tx.ExecContext(inline(ctx), `UPDATE tasks SET state = 'ZOMBIE' WHERE id IN
			(SELECT id FROM tasks INDEXED BY tasks_active
			WHERE state IN ('ASSIGNED', 'RUNNING', 'ZOMBIE') AND state != 'ZOMBIE' AND heartbeat_at < ? LIMIT ?)`, ms(cut), limit)
		if err != nil {
			return err
		}
		n, err = res.RowsAffected()
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("sweep zombies: %w", err)
	}
	return int(n), nil
}

// Expired is what ExpireZombies changed.
type Expired struct {
	Tasks   int
	Running map[string]int // change of running cores per owner
	Waiting map[int64]int  // requeued tasks per job
	Changes []JobChange
}

// expiredError is the last error of a task whose attempt expired.
const expiredError = "no heartbeat: expired"

// ExpireZombies moves up to limit ZOMBIE tasks of live jobs silent since
// before cut as rules.AfterExpiry says, in one transaction.
func (s *Store) ExpireZombies(ctx context.Context, cut, now time.Time, limit int) (Expired, error) {
	var x Expired
	err := s.cold(ctx, func(tx *sql.Tx) error {
		x = Expired{Running: map[string]int{}, Waiting: map[int64]int{}}
		// From the active tasks to their jobs, not the other way (every
		// task of every live job).
		rows, err := tx.QueryContext(inline(ctx), `SELECT t.id, t.job_id, t.tries FROM tasks t INDEXED BY tasks_active CROSS JOIN jobs j ON j.id = t.job_id
			WHERE t.state IN ('ASSIGNED', 'RUNNING', 'ZOMBIE') AND t.state = 'ZOMBIE' AND t.heartbeat_at < ? AND j.state IN ('WAITING', 'RUNNING') LIMIT ?`, ms(cut), limit)
		if err != nil {
			return err
		}
		type zombie struct {
			id, job int64
			tries   int
		}
		var list []zombie
		var ids []int64
		for rows.Next() {
			var z zombie
			if err := rows.Scan(&z.id, &z.job, &z.tries); err != nil {
				rows.Close()
				return err
			}
			list = append(list, z)
			ids = append(ids, z.job)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
		if len(list) == 0 {
			return nil
		}
		jobs, err := s.readJobs(ctx, tx, ids)
		if err != nil {
			return err
		}
		updates := make([][]any, 0, len(list))
		for _, z := range list {
			j := jobs[z.job]
			tr := rules.AfterExpiry(z.tries, j.maxTries)
			fin := int64(0)
			if tr.Final() {
				fin = ms(now)
			}
			updates = append(updates, []any{z.id, tr.State, fin})
			j.c.Active--
			if tr.Counter == rules.ToWaiting {
				j.c.Waiting++
				x.Waiting[z.job]++
			} else {
				j.c.Failed++
			}
			x.Running[j.owner] -= j.cores
		}
		arg, err := jsonArg(updates)
		if err != nil {
			return err
		}
		if _, err := tx.ExecContext(inline(ctx), `UPDATE tasks SET state = d.v->>1, tries = tries + 1, queued_at = ?2, finished_at = d.v->>2, last_error = ?3
			FROM (SELECT value AS v FROM jsonb_each(?1)) AS d WHERE tasks.id = d.v->>0`, arg, ms(now), expiredError); err != nil {
			return err
		}
		x.Tasks = len(list)
		x.Changes, err = s.writeJobs(ctx, tx, jobs, now)
		return err
	})
	if err != nil {
		return Expired{}, fmt.Errorf("sweep expired tasks: %w", err)
	}
	return x, nil
}

// WaitingJobsExpiredBy lists the jobs still WAITING whose expiry is before now.
func (s *Store) WaitingJobsExpiredBy(ctx context.Context, now time.Time) ([]int64, error) {
	if err := s.settle(ctx); err != nil {
		return nil, err
	}
	out, err := ids(ctx, s.r, `SELECT id FROM jobs WHERE state = 'WAITING' AND expires_at < ?`, ms(now))
	if err != nil {
		return nil, fmt.Errorf("find expired jobs: %w", err)
	}
	return out, nil
}

// ExpireJob makes a job that never started (WAITING, nothing active)
// ERROR_EW, its waiting tasks counted as killed, and returns how many
// were waiting; ok is false when the job has changed since it was listed.
// Its tasks follow with KillTasks.
func (s *Store) ExpireJob(ctx context.Context, id int64, now time.Time) (waiting int, ok bool, err error) {
	err = s.cold(ctx, func(tx *sql.Tx) error {
		err := tx.QueryRowContext(inline(ctx), `SELECT n_waiting FROM jobs WHERE id = ? AND state = 'WAITING' AND n_active = 0`, id).Scan(&waiting)
		if err == sql.ErrNoRows {
			return nil
		}
		if err != nil {
			return err
		}
		ok = true
		_, err = tx.ExecContext(inline(ctx), `UPDATE jobs SET state = 'ERROR_EW', finished_at = ?, kill_states = ?, n_killed = n_killed + n_waiting, n_waiting = 0 WHERE id = ?`, ms(now), expiryKills, id)
		return err
	})
	if err != nil {
		return 0, false, fmt.Errorf("expire job %d: %w", id, err)
	}
	return waiting, ok, nil
}

// FinalJobsBefore lists the final jobs that finished before cut.
func (s *Store) FinalJobsBefore(ctx context.Context, cut time.Time) ([]int64, error) {
	if err := s.settle(ctx); err != nil {
		return nil, err
	}
	out, err := ids(ctx, s.r, `SELECT id FROM jobs WHERE state IN ('DONE', 'DONE_WARN', 'FAILED', 'KILLED', 'ERROR_EW') AND finished_at > 0 AND finished_at < ?`, ms(cut))
	if err != nil {
		return nil, fmt.Errorf("find jobs to purge: %w", err)
	}
	return out, nil
}
