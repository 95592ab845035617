package queue

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/harvest-hpc/harvest/pilotproto"
	"github.com/harvest-hpc/harvest/queue/api"
)

// leaseState mirrors the single lease row (the queue is its only writer).
type leaseState struct {
	epoch   int64
	holder  string
	address string
	expires time.Time
}

func (q *Queue) loadLease(ctx context.Context) error {
	var exp int64
	err := q.r.QueryRowContext(ctx, `SELECT epoch, holder, address, expires_at FROM lease WHERE id = 1`).
		Scan(&q.lease.epoch, &q.lease.holder, &q.lease.address, &exp)
	if err != nil {
		return fmt.Errorf("load lease: %w", err)
	}
	q.lease.expires = time.UnixMilli(exp)
	return nil
}

func (q *Queue) saveLease(ctx context.Context, l leaseState) error {
	return q.write(ctx, func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `UPDATE lease SET epoch = ?, holder = ?, address = ?, expires_at = ? WHERE id = 1`,
			l.epoch, l.holder, l.address, ms(l.expires))
		return err
	})
}

func (q *Queue) leaseView(l leaseState, granted bool) pilotproto.Lease {
	return pilotproto.Lease{Granted: granted, Epoch: l.epoch, Holder: l.holder, Address: l.address,
		ExpiresAt: l.expires.Unix(), TTLSecond: int64(q.cfg.LeaseTTL / time.Second), TTLMS: q.cfg.LeaseTTL.Milliseconds()}
}

// Lease grants, renews or refuses the master lease. The first asker, or
// the first after the TTL expired, becomes master with epoch+1. The holder
// renews by sending its pilot id and current epoch (even after expiry, as
// long as nobody else took the lease). An epoch older than the current one
// is stale: 409.
func (q *Queue) Lease(ctx context.Context, req pilotproto.LeaseRequest) (pilotproto.Lease, error) {
	if req.PilotID == "" || len(req.PilotID) > 256 {
		return pilotproto.Lease{}, invalid("pilot_id is required (at most 256 bytes)")
	}
	if len(req.Address) > 1024 {
		return pilotproto.Lease{}, invalid("address is longer than 1024 bytes")
	}
	if req.Epoch < 0 {
		return pilotproto.Lease{}, invalid("epoch must not be negative")
	}
	q.mu.Lock()
	defer q.mu.Unlock() // lease changes are rare; one tiny write under the lock
	cur := q.lease
	now := q.now()
	if req.Epoch != 0 && req.Epoch < cur.epoch {
		return pilotproto.Lease{}, fmt.Errorf("%w: epoch %d is older than the current epoch %d", api.ErrStaleEpoch, req.Epoch, cur.epoch)
	}
	if req.Epoch > cur.epoch {
		return pilotproto.Lease{}, fmt.Errorf("%w: epoch %d was never granted (current %d)", api.ErrStaleEpoch, req.Epoch, cur.epoch)
	}
	next := cur
	if req.Release {
		if req.Epoch == 0 || req.PilotID != cur.holder {
			return pilotproto.Lease{}, fmt.Errorf("%w: only the holder may release the lease, with its epoch (held by %s, epoch %d)", api.ErrStaleEpoch, cur.holder, cur.epoch)
		}
		next.expires = now // expired: the next asker gets epoch+1 at once
		if err := q.saveLease(ctx, next); err != nil {
			return pilotproto.Lease{}, fmt.Errorf("save lease: %w", err)
		}
		q.log.Info("master released the lease", "pilot", cur.holder, "epoch", cur.epoch)
		q.lease = next
		return q.leaseView(next, false), nil
	}
	switch {
	case req.Epoch != 0 && req.Epoch == cur.epoch && req.PilotID == cur.holder:
		// renewal by the holder
	case req.Epoch == 0 && req.PilotID == cur.holder && now.Before(cur.expires):
		// the holder asking again (its first answer was lost): idempotent
	case cur.holder == "" || !now.Before(cur.expires):
		next.epoch = cur.epoch + 1
		next.holder = req.PilotID
	default:
		if req.Epoch != 0 { // a renewal by somebody who is not the holder
			return pilotproto.Lease{}, fmt.Errorf("%w: epoch %d is held by %s", api.ErrStaleEpoch, req.Epoch, cur.holder)
		}
		return q.leaseView(cur, false), nil
	}
	if req.Address != "" {
		next.address = req.Address
	}
	next.expires = now.Add(q.cfg.LeaseTTL)
	if err := q.saveLease(ctx, next); err != nil {
		return pilotproto.Lease{}, fmt.Errorf("save lease: %w", err)
	}
	if next.epoch != cur.epoch {
		q.log.Info("new master", "pilot", next.holder, "epoch", next.epoch, "address", next.address)
	}
	q.lease = next
	return q.leaseView(next, true), nil
}

// checkEpoch fences a master write: the epoch must be the current one and
// the lease alive. q.mu must not be held.
func (q *Queue) checkEpoch(epoch int64) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.checkEpochLocked(epoch)
}

func (q *Queue) checkEpochLocked(epoch int64) error {
	cur := q.lease
	switch {
	case epoch <= 0:
		return invalid("epoch is required (the lease's epoch)")
	case epoch < cur.epoch:
		return fmt.Errorf("%w: epoch %d is older than the current epoch %d", api.ErrStaleEpoch, epoch, cur.epoch)
	case epoch > cur.epoch:
		return fmt.Errorf("%w: epoch %d was never granted (current %d)", api.ErrStaleEpoch, epoch, cur.epoch)
	case !q.now().Before(cur.expires):
		return fmt.Errorf("%w: the lease of epoch %d expired at %s; renew it", api.ErrLeaseExpired, epoch, cur.expires.UTC().Format(time.RFC3339))
	}
	return nil
}

// renewLocked extends the current lease (a heartbeat counts as renewal).
func (q *Queue) renewLocked(ctx context.Context) error {
	next := q.lease
	next.expires = q.now().Add(q.cfg.LeaseTTL)
	if err := q.saveLease(ctx, next); err != nil {
		return err
	}
	q.lease = next
	return nil
}

// MasterAddress returns the published master address and whether the
// lease is alive.
func (q *Queue) MasterAddress() (string, bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.lease.address, q.lease.holder != "" && q.now().Before(q.lease.expires)
}
