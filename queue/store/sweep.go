package store

import (
	"context"
	"database/sql"
	"errors"
	"time"

	"github.com/harvest-hpc/harvest/pilotproto"
	"github.com/harvest-hpc/harvest/queue/api"
	"github.com/harvest-hpc/harvest/queue/rules"
)

// MarkZombies makes up to limit live grants silent since cut ZOMBIE, and counts them.
func (s *Store) MarkZombies(ctx context.Context, cut time.Time, limit int) (int, error) {
	n, err := s.do(ctx, "sweep zombies", `UPDATE grants SET state = 'ZOMBIE' WHERE id IN
		(SELECT id FROM grants WHERE state != 'CLOSED' AND state != 'ZOMBIE' AND heartbeat_at < $1 LIMIT $2)`, ms(cut), limit)
	return int(n), err
}

// ExpireZombies closes ZOMBIE grants of live jobs silent since cut, about
// limit entries in one transaction, each open entry as rules.AfterExpiry
// says, and counts those entries.
func (s *Store) ExpireZombies(ctx context.Context, cut, now time.Time, limit int) (n int, m Moved, err error) {
	err = s.write(ctx, func(tx *sql.Tx) (err error) {
		b := s.newBatch(ctx, tx)
		n = 0 // fn runs again after a serialisation failure
		_, err = b.closeGrants(now, limit, func(j *jobRow, x *exceptionRow) {
			n++
			move(j, x, rules.AfterExpiry(x.tries, j.maxTries), pilotproto.Result{Status: api.FailureStatusExpired, ErrorTail: "no heartbeat: expired"}, "", now)
		}, `WHERE g.state != 'CLOSED' AND g.state = 'ZOMBIE' AND g.heartbeat_at < $1 AND EXISTS (SELECT 1 FROM jobs j WHERE j.id = g.job_id AND j.state IN ('WAITING', 'RUNNING'))`, ms(cut))
		m = b.moved
		return err
	})
	return n, m, wrap(err, "sweep expired tasks")
}

// closeGrants closes the grants query selects until they hold about limit
// open entries, each open entry an exception row end fills in, flushes the
// batch and says if more remain (the zombie sweep's and a kill's step).
func (b *batch) closeGrants(now time.Time, limit int, end func(*jobRow, *exceptionRow), query string, args ...any) (more bool, err error) {
	rows, err := b.tx.QueryContext(inline(b.ctx), `SELECT `+grantCols+` FROM grants g `+query, args...)
	if err != nil {
		return false, err
	}
	defer rows.Close()
	var gs []*grantRow
	var ids []int64
	var entries [][2]int64 // the open ones
	for n := 0; n < max(limit, 1) && rows.Next(); {
		g, err := scanGrant(rows)
		if err != nil {
			return false, err
		}
		g.dirty = true
		b.addGrant(g)
		gs, ids, n = append(gs, g), append(ids, g.job), n+g.open
		for i, c := range g.settled {
			if c == open {
				entries = append(entries, [2]int64{g.job, int64(g.first + i)})
			}
		}
	}
	more = rows.Next()
	if err := errors.Join(rows.Err(), rows.Close()); err != nil { // before the reads: PostgreSQL's connection runs one query at a time
		return false, err
	}
	b.readJobs(ids, "FOR UPDATE OF c")
	b.readExceptions(entries) // an error stays in b.err, and flush returns it
	for _, g := range gs {
		for i, c := range g.settled {
			if c == open && b.err == nil {
				x := b.except(g, g.first+i)
				end(b.jobs[g.job], x)
				g.settled[i] = settledX
			}
		}
		g.open = 0 // writeGrants closes a grant with none open
	}
	return more, b.flush(now)
}

// WaitingJobsExpiredBy lists the jobs still WAITING whose expiry is before now.
func (s *Store) WaitingJobsExpiredBy(ctx context.Context, now time.Time) ([]int64, error) {
	return s.ids(ctx, "find expired jobs", `SELECT id FROM jobs WHERE state = 'WAITING' AND expires_at < $1`, ms(now))
}

// ExpireJob makes a job that never started ERROR_EW, its waiting tasks
// killed (KillTasks follows); ok is false if it changed since listed.
func (s *Store) ExpireJob(ctx context.Context, id int64, now time.Time) (ok bool, err error) {
	err = s.write(ctx, func(tx *sql.Tx) (err error) {
		ok, err = found(tx.QueryRowContext(inline(ctx), `SELECT id FROM `+jobsCounted+` WHERE id = $1 AND state = 'WAITING' AND n_active = 0`, id).Scan(new(int64)))
		if ok {
			err = killJob(ctx, tx, id, api.JobErrorEW, 0, ms(now), expiryKills)
		}
		return err
	})
	return ok, wrap(err, "expire job %d", id)
}

// FinalJobsBefore lists the final jobs that finished before cut.
func (s *Store) FinalJobsBefore(ctx context.Context, cut time.Time) ([]int64, error) {
	return s.ids(ctx, "find jobs to purge", `SELECT id FROM jobs WHERE state IN ('DONE', 'DONE_WARN', 'FAILED', 'KILLED', 'ERROR_EW') AND finished_at > 0 AND finished_at < $1`, ms(cut))
}
