package queue

import (
	"context"
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
	cut := q.now().Add(-q.cfg.ZombieTimeout)
	for {
		n, err := q.st.MarkZombies(ctx, cut, q.cfg.WriteChunk)
		if err != nil {
			return err
		}
		if n > 0 {
			q.log.Warn("tasks without heartbeat became ZOMBIE", "tasks", n)
		}
		if n < q.cfg.WriteChunk {
			return nil
		}
	}
}

func (q *Queue) sweepExpired(ctx context.Context) error {
	now := q.now()
	cut := now.Add(-2 * q.cfg.ZombieTimeout)
	for {
		q.mu.Lock()
		x, err := q.st.ExpireZombies(ctx, cut, now, q.cfg.WriteChunk)
		if err == nil {
			q.addRunningLocked(x.Running)
			q.addWaitingLocked(x.Waiting)
			q.jobChangesLocked(x.Changes)
		}
		q.mu.Unlock()
		if err != nil {
			return err
		}
		q.logChanges(x.Changes)
		if x.Tasks > 0 {
			q.log.Warn("ZOMBIE tasks expired", "tasks", x.Tasks)
		}
		if x.Tasks < q.cfg.WriteChunk {
			return nil
		}
	}
}

func (q *Queue) sweepJobExpiry(ctx context.Context) error {
	now := q.now()
	ids, err := q.st.WaitingJobsExpiredBy(ctx, now)
	if err != nil {
		return err
	}
	for _, id := range ids {
		q.mu.Lock()
		_, ok, err := q.st.ExpireJob(ctx, id, now)
		if ok {
			q.dropJobLocked(id)
		}
		q.mu.Unlock()
		if err != nil {
			return err
		}
		if !ok {
			continue
		}
		q.log.Warn("job waited past its expiry", "job", id)
		if err := q.st.KillTasks(ctx, id, []string{api.TaskWaiting}, now, q.cfg.InsertChunk); err != nil {
			return fmt.Errorf("expire tasks of job %d: %w", id, err)
		}
	}
	return nil
}

func (q *Queue) purge(ctx context.Context) error {
	ids, err := q.st.FinalJobsBefore(ctx, q.now().Add(-q.cfg.Retention))
	if err != nil {
		return err
	}
	for _, id := range ids {
		if err := q.st.DropJob(ctx, id, q.cfg.InsertChunk); err != nil {
			return fmt.Errorf("purge: %w", err)
		}
		q.log.Info("purged final job", "job", id)
	}
	return nil
}
