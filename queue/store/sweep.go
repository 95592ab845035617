package store

import (
	"context"
	"database/sql"
	"time"

	"github.com/harvest-hpc/harvest/queue/api"
	"github.com/harvest-hpc/harvest/queue/rules"
)

// MarkZombies makes up to limit live grants silent since cut ZOMBIE, and counts them.
func (s *Store) MarkZombies(ctx context.Context, cut time.Time, limit int) (int, error) {
	n, err := s.do(ctx, "sweep zombies", `UPDATE grants SET state = 'ZOMBIE' WHERE id IN
		(SELECT id FROM grants WHERE state != 'CLOSED' AND state != 'ZOMBIE' AND heartbeat_at < $1 LIMIT $2)`, ms(cut), limit)
	return int(n), err
}

// Expired is what ExpireZombies changed.
type Expired struct {
	Tasks   int
	Running map[string]int // change of running cores per owner
	Waiting map[int64]int  // requeued tasks per job
	Changes []JobChange
}

// ExpireZombies closes ZOMBIE grants of live jobs silent since cut, about
// limit entries in one transaction, each open entry as rules.AfterExpiry says.
func (s *Store) ExpireZombies(ctx context.Context, cut, now time.Time, limit int) (x Expired, err error) {
	err = s.write(ctx, func(tx *sql.Tx) (err error) {
		x = Expired{Running: map[string]int{}, Waiting: map[int64]int{}}
		x.Changes, _, err = s.newBatch(ctx, tx).closeGrants(now, limit, func(j *jobRow, e *exceptionRow) {
			tr := rules.AfterExpiry(e.tries, j.maxTries)
			e.state, e.tries = tr.State, e.tries+1
			e.failAttempt, e.status, e.exit, e.pool, e.pilot, e.started, e.duration, e.tail = 0, api.FailureStatusExpired, 0, "", "", 0, 0, "no heartbeat: expired"
			if tr.Final() {
				e.finished = ms(now)
			} else {
				e.queued = ms(now)
			}
			j.c.Active--
			if tr.Counter == rules.ToWaiting {
				j.c.Waiting++
				j.retry++
				x.Waiting[j.id]++
			} else {
				j.c.Failed++
			}
			j.moved = true
			x.Running[j.owner] -= j.cores
			x.Tasks++
		}, `WHERE g.state != 'CLOSED' AND g.state = 'ZOMBIE' AND g.heartbeat_at < $1 AND EXISTS (SELECT 1 FROM jobs j WHERE j.id = g.job_id AND j.state IN ('WAITING', 'RUNNING'))`, ms(cut))
		return err
	})
	return x, wrap(err, "sweep expired tasks")
}

// WaitingJobsExpiredBy lists the jobs still WAITING whose expiry is before now.
func (s *Store) WaitingJobsExpiredBy(ctx context.Context, now time.Time) ([]int64, error) {
	return s.ids(ctx, "find expired jobs", `SELECT id FROM jobs WHERE state = 'WAITING' AND expires_at < $1`, ms(now))
}

// ExpireJob makes a job that never started ERROR_EW, its waiting tasks
// killed (KillTasks follows); ok is false if it changed since listed.
func (s *Store) ExpireJob(ctx context.Context, id int64, now time.Time) (waiting int, ok bool, err error) {
	err = s.write(ctx, func(tx *sql.Tx) error {
		err := tx.QueryRowContext(inline(ctx), `SELECT n_waiting FROM `+jobsCounted+` WHERE id = $1 AND state = 'WAITING' AND n_active = 0`, id).Scan(&waiting)
		if ok, err = found(err); ok {
			return killJob(ctx, tx, id, api.JobErrorEW, 0, ms(now), expiryKills)
		}
		return err
	})
	return waiting, ok, wrap(err, "expire job %d", id)
}

// FinalJobsBefore lists the final jobs that finished before cut.
func (s *Store) FinalJobsBefore(ctx context.Context, cut time.Time) ([]int64, error) {
	return s.ids(ctx, "find jobs to purge", `SELECT id FROM jobs WHERE state IN ('DONE', 'DONE_WARN', 'FAILED', 'KILLED', 'ERROR_EW') AND finished_at > 0 AND finished_at < $1`, ms(cut))
}
