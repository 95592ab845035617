package queue

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"time"

	"github.com/harvest-hpc/harvest/pilotproto"

	"github.com/harvest-hpc/harvest/queue/api"
	"github.com/harvest-hpc/harvest/queue/store"
)

// Sweep runs the time-driven transitions, each in short transactions:
// tasks without heartbeat for the zombie timeout become ZOMBIE; ZOMBIE for
// twice the timeout become EXPIRED (an attempt: requeued, or final after
// the last one); jobs still WAITING past their expiry become ERROR_EW; final
// jobs older than the retention are purged.
//
// On a database several agents serve (Config.Shared) only the agent that
// holds the sweep lease runs these, so they run once across agents, and
// another agent takes over within three sweep intervals of the holder's
// death. Each agent still requeues the tasks its own masters' heartbeats
// show lost (it alone heard those heartbeats; the writes are fenced by the
// masters' epochs).
func (q *Queue) Sweep(ctx context.Context) error {
	unacked := q.sweepUnacknowledged(ctx)
	if q.cfg.Shared {
		epoch, err := q.holdSweeps(ctx)
		if err != nil || epoch == 0 {
			return errors.Join(unacked, err)
		}
		// Every sweep write checks the lease inside its transaction: an
		// agent paused past its lease while another took it changes
		// nothing when it resumes.
		ctx = store.SweepFenced(ctx, epoch)
		q.hook("sweeps")
	}
	return errors.Join(unacked, q.sweeps(ctx))
}

// sweeps runs the sweeps in turn, each after another's error too; on a
// shared database ErrSweepLost stops them (the rest would be refused as
// well) and this agent no longer holds the sweeps.
func (q *Queue) sweeps(ctx context.Context) error {
	var errs []error
	for _, f := range []func(context.Context) error{q.sweepZombies, q.sweepExpired, q.sweepJobExpiry, q.purge, q.sweepStaleSubmissions, q.sweepTokens} {
		err := f(ctx)
		if errors.Is(err, store.ErrSweepLost) {
			q.mu.Lock()
			q.sweepEpoch = 0
			q.mu.Unlock()
			q.log.Info("another agent took the sweeps", "holder", q.cfg.SweepHolder, "why", err)
			break
		}
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// holdSweeps takes or renews the sweep lease for three sweep intervals
// (renewed every interval, so a holder that misses two still keeps it)
// and returns its epoch if this agent holds it (0: it does not).
func (q *Queue) holdSweeps(ctx context.Context) (int64, error) {
	epoch, held, err := q.st.TakeSweep(ctx, q.now(), 3*q.cfg.SweepInterval)
	if err != nil {
		return 0, err
	}
	q.mu.Lock()
	was := q.sweepEpoch
	q.sweepEpoch = 0
	if held {
		q.sweepEpoch = epoch
	}
	q.mu.Unlock()
	if !held {
		return 0, nil
	}
	if was != epoch {
		q.log.Info("this agent runs the sweeps now", "holder", q.cfg.SweepHolder, "epoch", epoch)
	}
	return epoch, nil
}

// SweepEpoch is the epoch of the sweep lease this agent holds (0: it does
// not hold it, or the database is not shared).
func (q *Queue) SweepEpoch() int64 {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.sweepEpoch
}

// sweepStaleSubmissions removes, on a shared database, the submissions
// still half stored long after they started: their agent died (a single
// agent removes its own at start instead).
func (q *Queue) sweepStaleSubmissions(ctx context.Context) error {
	if !q.cfg.Shared {
		return nil
	}
	return q.cleanupPartialSubmits(ctx, q.now().Add(-q.cfg.StaleSubmission))
}

// poolBeat is a pool master's last heartbeat.
type poolBeat struct {
	epoch int64
	at    time.Time
}

// unackedGrace is how long before a master's heartbeat a task must have
// been handed to it for the heartbeat's silence about it to mean the
// master never got it: nine of its renewals (every TTL/3), and at least
// 10 s, well beyond a pull's answer on its way.
func (q *Queue) unackedGrace() time.Duration { return max(3*q.cfg.LeaseTTL, 10*time.Second) }

// sweepUnacknowledged requeues the tasks a pool's live master was handed
// and has never listed: a heartbeat lists every task the master holds and
// makes them RUNNING, so a task still ASSIGNED to the master's epoch,
// handed out long before its last heartbeat, is one whose pull answer was
// lost on the way (a timeout, a connection cut) after the master started.
// Nobody will run or report it; without this it waited for the zombie
// timeout (5 minutes by default). It is requeued as interrupted (no
// attempt counted); should the master report it after all, the report is
// idempotent like any other.
func (q *Queue) sweepUnacknowledged(ctx context.Context) error {
	q.mu.Lock()
	beats := maps.Clone(q.beats)
	q.mu.Unlock()
	grace := q.unackedGrace()
	var errs []error
	for site, b := range beats {
		refs, err := q.st.AssignedBefore(ctx, site, b.epoch, b.at.Add(-grace))
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if len(refs) == 0 {
			continue
		}
		now := q.now().UnixMilli()
		res := make([]pilotproto.Result, len(refs))
		for i, r := range refs {
			res[i] = pilotproto.Result{TaskID: r.TaskID, Attempt: r.Attempt, Status: pilotproto.StatusInterrupted,
				StartedAt: now, ErrorTail: "requeued: its master never acknowledged it (the pull's answer was lost)"}
		}
		if _, err := q.applyResults(ctx, site, b.epoch, res); err != nil {
			if errors.Is(err, api.ErrStaleEpoch) || errors.Is(err, api.ErrLeaseExpired) {
				continue // a new master's first heartbeat requeues what the old one held
			}
			errs = append(errs, fmt.Errorf("requeue unacknowledged tasks: %w", err))
			continue
		}
		q.log.Warn("requeued tasks their master never acknowledged", "site", site, "epoch", b.epoch, "tasks", len(refs))
	}
	return errors.Join(errs...)
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
		n, m, err := q.st.ExpireZombies(ctx, cut, now, q.cfg.WriteChunk)
		if err == nil {
			q.movedLocked(m)
		}
		q.mu.Unlock()
		if err != nil {
			return err
		}
		q.logChanges(m.Changes)
		if n > 0 {
			q.log.Warn("ZOMBIE tasks expired", "tasks", n)
		}
		if n < q.cfg.WriteChunk {
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
		ok, err := q.st.ExpireJob(ctx, id, now)
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
		q.hook("expiry-kill")
		if err := q.st.KillTasks(ctx, id, now, q.cfg.InsertChunk); err != nil {
			return fmt.Errorf("expire tasks of job %d: %w", id, err)
		}
	}
	return nil
}

func (q *Queue) purge(ctx context.Context) error {
	if err := q.st.PruneUsage(ctx, q.now().Add(-q.cfg.UsageWindow)); err != nil {
		return fmt.Errorf("purge: %w", err)
	}
	if q.cfg.Shared {
		if err := q.st.PruneAgents(ctx, q.now().Add(-q.cfg.StaleSubmission)); err != nil {
			return fmt.Errorf("purge: %w", err)
		}
	}
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
