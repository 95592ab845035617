package rules

import (
	"fmt"
	"time"

	"github.com/harvest-hpc/harvest/pilotproto"
	"github.com/harvest-hpc/harvest/queue/api"
)

// Lease is the master lease: one row, the queue its only writer.
type Lease struct {
	Epoch   int64
	Holder  string
	Address string
	Expires time.Time
}

// Alive reports whether somebody holds the lease at now.
func (l Lease) Alive(now time.Time) bool { return l.Holder != "" && now.Before(l.Expires) }

// CheckEpoch fences a master write: epoch must be the current one and the
// lease alive. The store calls it inside the write transaction, so no new
// epoch can be granted between the check and the write.
func CheckEpoch(cur Lease, epoch int64, now time.Time) error {
	switch {
	case epoch <= 0:
		return fmt.Errorf("%w: epoch is required (the lease's epoch)", api.ErrInvalid)
	case epoch < cur.Epoch:
		return fmt.Errorf("%w: epoch %d is older than the current epoch %d", api.ErrStaleEpoch, epoch, cur.Epoch)
	case epoch > cur.Epoch:
		return fmt.Errorf("%w: epoch %d was never granted (current %d)", api.ErrStaleEpoch, epoch, cur.Epoch)
	case !now.Before(cur.Expires):
		return fmt.Errorf("%w: the lease of epoch %d expired at %s; renew it", api.ErrLeaseExpired, epoch, cur.Expires.UTC().Format(time.RFC3339))
	}
	return nil
}

// LeaseDecision is the outcome of a lease request.
type LeaseDecision struct {
	Next    Lease
	Granted bool // the asker is (still) master
	Write   bool // Next differs from the current lease and must be stored
}

// DecideLease grants, renews, releases or refuses the master lease. The
// first asker, or the first after the TTL expired, becomes master with
// epoch+1. The holder renews by sending its pilot id and current epoch
// (even after expiry, as long as nobody else took the lease); the holder
// asking again with epoch 0 gets its own lease back (a lost answer is
// harmless). An epoch other than the current one is stale. Only the holder,
// with its epoch, may release; the lease then expires at once.
func DecideLease(cur Lease, req pilotproto.LeaseRequest, now time.Time, ttl time.Duration) (LeaseDecision, error) {
	if req.Peek {
		return LeaseDecision{Next: cur}, nil // where the master is; nothing granted
	}
	if req.Epoch != 0 && req.Epoch < cur.Epoch {
		return LeaseDecision{}, fmt.Errorf("%w: epoch %d is older than the current epoch %d", api.ErrStaleEpoch, req.Epoch, cur.Epoch)
	}
	if req.Epoch > cur.Epoch {
		return LeaseDecision{}, fmt.Errorf("%w: epoch %d was never granted (current %d)", api.ErrStaleEpoch, req.Epoch, cur.Epoch)
	}
	next := cur
	if req.Release {
		if req.Epoch == 0 || req.PilotID != cur.Holder {
			return LeaseDecision{}, fmt.Errorf("%w: only the holder may release the lease, with its epoch (held by %s, epoch %d)", api.ErrStaleEpoch, cur.Holder, cur.Epoch)
		}
		next.Expires = now
		return LeaseDecision{Next: next, Write: true}, nil
	}
	switch {
	case req.Epoch != 0 && req.Epoch == cur.Epoch && req.PilotID == cur.Holder:
		// renewal by the holder
	case req.Epoch == 0 && req.PilotID == cur.Holder && now.Before(cur.Expires):
		// the holder asking again (its first answer was lost): idempotent
	case cur.Holder == "" || !now.Before(cur.Expires):
		next.Epoch = cur.Epoch + 1
		next.Holder = req.PilotID
	default:
		if req.Epoch != 0 { // a renewal by somebody who is not the holder
			return LeaseDecision{}, fmt.Errorf("%w: epoch %d is held by %s", api.ErrStaleEpoch, req.Epoch, cur.Holder)
		}
		return LeaseDecision{Next: cur}, nil
	}
	if req.Address != "" {
		next.Address = req.Address
	}
	next.Expires = now.Add(ttl)
	return LeaseDecision{Next: next, Granted: true, Write: true}, nil
}
