package agent

import (
	"context"
	"errors"
	"time"

	"github.com/cenkalti/backoff/v4"
)

// Run runs rounds every PollInterval until ctx is done. While the batch
// system is unreachable it backs off exponentially (capped at MaxBackoff)
// and does nothing else: a failed snapshot never leads to a cancel.
func (r *Reconciler) Run(ctx context.Context) error {
	bo := backoff.NewExponentialBackOff()
	bo.InitialInterval = r.cfg.PollInterval
	bo.MaxInterval = r.cfg.MaxBackoff
	bo.MaxElapsedTime = 0 // never give up: the agent outlives slurmctld restarts
	bo.Reset()
	failing := false
	for {
		wait := r.cfg.PollInterval
		_, err := r.Round(ctx)
		switch {
		case ctx.Err() != nil:
			return nil
		case errors.Is(err, ErrNoSnapshot):
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
			if failing {
				r.log.Info("cluster visible again")
			}
			failing = false
			bo.Reset()
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-t.C:
		}
	}
}
