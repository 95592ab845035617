package agent

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/cenkalti/backoff/v4"

	"github.com/harvest-hpc/harvest/adapters"
)

// Run runs rounds every PollInterval (FastPoll while a round's Watch is
// set: see NextWait), and at once when a job-event check between rounds
// (every EventCheck) sees a job submitted, ended or cancelled, or when
// Wake receives, until ctx is done. While the batch system is unreachable it backs off exponentially (capped at MaxBackoff)
// and does nothing else: a failed snapshot never leads to a cancel.
func (r *Reconciler) Run(ctx context.Context) error {
	bo := backoff.NewExponentialBackOff()
	bo.InitialInterval = r.cfg.PollInterval
	bo.MaxInterval = r.cfg.MaxBackoff
	bo.MaxElapsedTime = 0 // never give up: the agent outlives slurmctld restarts
	bo.Reset()
	failing := false
	for {
		res, err := r.Round(ctx)
		wait := r.NextWait(res)
		switch {
		case ctx.Err() != nil:
			return nil
		case errors.Is(err, ErrNoSnapshot):
			if errors.Is(err, ErrBatchSystem) && r.Health != nil {
				r.Health.Fail(err)
			}
			wait = bo.NextBackOff()
			if !failing {
				r.log.Error("cannot see the cluster; holding still and retrying", "error", err, "retry_in", wait)
			} else {
				r.log.Warn("still cannot see the cluster", "error", err, "retry_in", wait)
			}
			failing = true
		case err != nil:
			r.log.Error("round failed", "error", err)
		default:
			if r.Health != nil {
				r.Health.OK()
			}
			if failing {
				r.log.Info("cluster visible again")
			}
			failing = false
			bo.Reset()
		}
		check, wake := r.cfg.EventCheck, r.Wake
		if failing {
			check, wake = 0, nil // the batch system does not answer: just back off
		}
		woke := false
		nap := func(ctx context.Context, d time.Duration) bool {
			ok, w := sleepOrWake(ctx, d, wake)
			woke = woke || w
			return ok
		}
		moved := func(ctx context.Context) (bool, bool) {
			if woke {
				return true, true
			}
			return r.eventCheck(ctx)
		}
		if !waitRound(ctx, wait, check, time.Now, nap, moved) {
			return nil
		}
	}
}

// eventCheck is one check between rounds: whether a round should come now.
func (r *Reconciler) eventCheck(ctx context.Context) (moved, ok bool) {
	moved, ok, err := r.EventsMoved(ctx)
	if err != nil && ctx.Err() == nil {
		// The next check or round asks again; a round still comes at its time.
		r.log.Debug("job-event check failed", "error", err)
	}
	return moved, ok
}

// sleepOrWake waits d, or until wake receives (woke), or until ctx is
// done (false). A nil wake never receives.
func sleepOrWake(ctx context.Context, d time.Duration, wake <-chan struct{}) (ok, woke bool) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false, false
	case <-t.C:
		return true, false
	case <-wake:
		return true, true
	}
}

// waitRound waits until the next round is due: wait from now, or sooner if
// a check (every check, when positive) says the job events moved. It
// returns false when ctx ends first. A check that reports the adapter
// cannot count (ok false) stops the checks: the rest is one wait. The
// round keeps its time however long the checks take (now reads the clock:
// an sdiag on a loaded head node took about a second, and ten of them
// pushed a 10 s round to 17 s on the mini-cluster).
func waitRound(ctx context.Context, wait, check time.Duration, now func() time.Time,
	sleep func(context.Context, time.Duration) bool,
	moved func(context.Context) (moved, ok bool)) bool {
	due := now().Add(wait)
	for {
		left := due.Sub(now())
		if left <= 0 {
			break
		}
		step := left
		if check > 0 {
			step = min(left, check)
		}
		if !sleep(ctx, step) {
			return false
		}
		if check <= 0 || !now().Before(due) {
			break
		}
		m, ok := moved(ctx)
		if m {
			return true
		}
		if !ok {
			check = 0
		}
	}
	return ctx.Err() == nil
}

// WaitForAdapter asks the adapter for its Info until it answers, backing
// off like the rounds do (from cfg.PollInterval up to cfg.MaxBackoff), and
// reports every failure to health. The agent starts its queue before this,
// so users can submit and look at their jobs while slurmctld is down or
// answers garbage. It returns an error only when ctx ends.
func WaitForAdapter(ctx context.Context, ad adapters.Adapter, cfg Config, health *Health, log *slog.Logger) (adapters.Info, error) {
	bo := backoff.NewExponentialBackOff()
	bo.InitialInterval = cfg.PollInterval
	bo.MaxInterval = cfg.MaxBackoff
	bo.MaxElapsedTime = 0
	bo.Reset()
	return waitForAdapter(ctx, ad, cfg.SnapshotTimeout, bo, health, log)
}

func waitForAdapter(ctx context.Context, ad adapters.Adapter, timeout time.Duration, bo backoff.BackOff, health *Health, log *slog.Logger) (adapters.Info, error) {
	var info adapters.Info
	op := func() error {
		ictx, cancel := context.WithTimeout(ctx, timeout)
		defer cancel()
		var err error
		info, err = ad.Info(ictx)
		if err != nil && ctx.Err() != nil {
			return backoff.Permanent(ctx.Err())
		}
		return err
	}
	notify := func(err error, wait time.Duration) {
		health.Fail(err)
		log.Error("batch system unreachable; the queue is up, retrying the adapter", "error", err, "retry_in", wait)
	}
	if err := backoff.RetryNotify(op, backoff.WithContext(bo, ctx), notify); err != nil {
		return info, err
	}
	health.OK()
	return info, nil
}
