package queue

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/harvest-hpc/harvest/queue/api"
)

// Sweep runs the time-driven transitions, each in short transactions:
// tasks without heartbeat for the zombie timeout become ZOMBIE; ZOMBIE for
// twice the timeout become EXPIRED (an attempt: requeued, or final after
// the last one); jobs still WAITING past their expiry become ERROR_EW; final
// jobs older than the retention are purged.
func (q *Queue) Sweep(ctx context.Context) error {
	return errors.Join(q.sweepZombies(ctx), q.sweepExpired(ctx), q.sweepJobExpiry(ctx), q.purge(ctx))
}

func (q *Queue) sweepZombies(ctx context.Context) error {
	cut := ms(q.now().Add(-q.cfg.ZombieTimeout))
	for {
		var n int64
		err := q.write(ctx, func(tx *sql.Tx) error {
			res, err := tx.ExecContext(ctx, `UPDATE tasks SET state = 'ZOMBIE' WHERE id IN
				(SELECT id FROM tasks WHERE state IN ('ASSIGNED', 'RUNNING') AND heartbeat_at < ? LIMIT ?)`, cut, q.cfg.WriteChunk)
			if err != nil {
				return err
			}
			n, err = res.RowsAffected()
			return err
		})
		if err != nil {
			return fmt.Errorf("sweep zombies: %w", err)
		}
		if n > 0 {
			q.log.Warn("tasks without heartbeat became ZOMBIE", "tasks", n)
		}
		if n < int64(q.cfg.WriteChunk) {
			return nil
		}
	}
}

func (q *Queue) sweepExpired(ctx context.Context) error {
	q.mut.Lock()
	defer q.mut.Unlock()
	now := q.now()
	cut := ms(now.Add(-2 * q.cfg.ZombieTimeout))
	for {
		var n int
		running := map[string]int{}
		err := q.write(ctx, func(tx *sql.Tx) error {
			n = 0
			clear(running)
			rows, err := tx.QueryContext(ctx, `SELECT t.id, t.job_id, t.tries, j.max_attempts, j.cores, j.owner FROM tasks t JOIN jobs j ON j.id = t.job_id
				WHERE t.state = 'ZOMBIE' AND t.heartbeat_at < ? LIMIT ?`, cut, q.cfg.WriteChunk)
			if err != nil {
				return err
			}
			type exp struct {
				id, job           int64
				tries, max, cores int
				owner             string
			}
			var list []exp
			for rows.Next() {
				var e exp
				if err := rows.Scan(&e.id, &e.job, &e.tries, &e.max, &e.cores, &e.owner); err != nil {
					rows.Close()
					return err
				}
				list = append(list, e)
			}
			rows.Close()
			jobs := map[int64]bool{}
			for _, e := range list {
				next, counter, fin := api.TaskWaiting, "n_waiting", int64(0)
				if e.tries+1 >= e.max {
					next, counter, fin = api.TaskExpired, "n_failed", ms(now)
				}
				if _, err := tx.ExecContext(ctx, `UPDATE tasks SET state = ?, tries = tries + 1, queued_at = ?, finished_at = ?, last_error = 'no heartbeat: expired' WHERE id = ?`,
					next, ms(now), fin, e.id); err != nil {
					return err
				}
				if _, err := tx.ExecContext(ctx, `UPDATE jobs SET n_active = n_active - 1, `+counter+` = `+counter+` + 1 WHERE id = ?`, e.job); err != nil {
					return err
				}
				running[e.owner] -= e.cores
				jobs[e.job] = true
			}
			for id := range jobs {
				if err := q.refreshJob(ctx, tx, id, ms(now)); err != nil {
					return err
				}
			}
			n = len(list)
			return nil
		})
		if err != nil {
			return fmt.Errorf("sweep expired tasks: %w", err)
		}
		q.mu.Lock()
		for owner, c := range running {
			u := q.userLocked(owner)
			u.running += c
			u.dirty = true
		}
		q.mu.Unlock()
		if n > 0 {
			q.log.Warn("ZOMBIE tasks expired", "tasks", n)
		}
		if n < q.cfg.WriteChunk {
			return nil
		}
	}
}

func (q *Queue) sweepJobExpiry(ctx context.Context) error {
	now := ms(q.now())
	ids, err := q.ids(ctx, `SELECT id FROM jobs WHERE state = 'WAITING' AND expires_at < ?`, now)
	if err != nil {
		return fmt.Errorf("find expired jobs: %w", err)
	}
	for _, id := range ids {
		var changed int64
		err := q.write(ctx, func(tx *sql.Tx) error {
			// Only a job that never started (no active task can exist then).
			res, err := tx.ExecContext(ctx, `UPDATE jobs SET state = 'ERROR_EW', finished_at = ?, n_killed = n_killed + n_waiting, n_waiting = 0
				WHERE id = ? AND state = 'WAITING' AND n_active = 0`, now, id)
			if err != nil {
				return err
			}
			changed, err = res.RowsAffected()
			return err
		})
		if err != nil {
			return fmt.Errorf("expire job %d: %w", id, err)
		}
		if changed == 0 {
			continue
		}
		q.log.Warn("job waited past its expiry", "job", id)
		for {
			var n int64
			err := q.write(ctx, func(tx *sql.Tx) error {
				res, err := tx.ExecContext(ctx, `UPDATE tasks SET state = 'KILLED', finished_at = ? WHERE id IN
					(SELECT id FROM tasks WHERE job_id = ? AND state = 'WAITING' LIMIT ?)`, now, id, q.cfg.InsertChunk)
				if err != nil {
					return err
				}
				n, err = res.RowsAffected()
				return err
			})
			if err != nil {
				return fmt.Errorf("expire tasks of job %d: %w", id, err)
			}
			if n == 0 {
				break
			}
		}
	}
	return nil
}

func (q *Queue) purge(ctx context.Context) error {
	cut := ms(q.now().Add(-q.cfg.Retention))
	ids, err := q.ids(ctx, `SELECT id FROM jobs WHERE state IN ('DONE', 'DONE_WARN', 'FAILED', 'KILLED', 'ERROR_EW') AND finished_at > 0 AND finished_at < ?`, cut)
	if err != nil {
		return fmt.Errorf("find jobs to purge: %w", err)
	}
	for _, id := range ids {
		if err := q.dropJob(ctx, id); err != nil {
			return fmt.Errorf("purge: %w", err)
		}
		q.log.Info("purged final job", "job", id)
	}
	return nil
}
