package queue

import (
	"context"
	"time"

	"github.com/harvest-hpc/harvest/pilotproto"
	"github.com/harvest-hpc/harvest/queue/rules"
)

// Pool is the pilot endpoints as one site's pool reaches them: its own
// master lease and epochs, the tasks handed to it, its pilots and its
// master's recommendation. The API picks the pool from the pilot token.
type Pool struct {
	q    *Queue
	site string
}

// Pool returns the endpoints of a site's pool.
func (q *Queue) Pool(site string) Pool { return Pool{q: q, site: site} }

// Lease is the local site's Pool.Lease.
func (q *Queue) Lease(ctx context.Context, req pilotproto.LeaseRequest) (pilotproto.Lease, error) {
	return q.Pool(q.cfg.LocalSite).Lease(ctx, req)
}

// Lease grants, renews, releases or refuses the pool's master lease
// (rules.DecideLease, applied in one write transaction). An epoch other
// than the current one is stale: 409.
func (p Pool) Lease(ctx context.Context, req pilotproto.LeaseRequest) (pilotproto.Lease, error) {
	q := p.q
	if req.PilotID == "" || len(req.PilotID) > 256 {
		return pilotproto.Lease{}, invalid("pilot_id is required (at most 256 bytes)")
	}
	if len(req.Address) > 1024 {
		return pilotproto.Lease{}, invalid("address is longer than 1024 bytes")
	}
	if req.Address != "" {
		// Handed to the pool's workers, who send it the pilot token.
		if err := pilotproto.CheckAddress(req.Address); err != nil {
			return pilotproto.Lease{}, invalid("%v", err)
		}
	}
	if req.Epoch < 0 {
		return pilotproto.Lease{}, invalid("epoch must not be negative")
	}
	if req.Peek && (req.Release || req.Epoch != 0) {
		return pilotproto.Lease{}, invalid("peek asks where the master is: no epoch, no release")
	}
	now := q.now()
	prev, d, err := q.st.DecideLease(ctx, p.site, req, now, q.cfg.LeaseTTL)
	if err != nil {
		return pilotproto.Lease{}, err
	}
	switch {
	case req.Release:
		q.log.Info("master released the lease", "site", p.site, "pilot", prev.Holder, "epoch", prev.Epoch)
	case d.Next.Epoch != prev.Epoch:
		q.log.Info("new master", "site", p.site, "pilot", d.Next.Holder, "epoch", d.Next.Epoch, "address", d.Next.Address)
	}
	q.seen(p.site)
	return q.leaseView(d.Next, d.Granted, now), nil
}

func (q *Queue) leaseView(l rules.Lease, granted bool, now time.Time) pilotproto.Lease {
	return pilotproto.Lease{Granted: granted, Epoch: l.Epoch, Holder: l.Holder, Address: l.Address,
		ExpiresAt: l.Expires.Unix(), TTLSecond: int64(q.cfg.LeaseTTL / time.Second), TTLMS: q.cfg.LeaseTTL.Milliseconds(),
		LeftMS: max(0, l.Expires.Sub(now).Milliseconds())}
}

// MasterAddress returns the local pool's published master address and
// whether its lease is alive.
func (q *Queue) MasterAddress(ctx context.Context) (string, bool, error) {
	l, err := q.st.Lease(ctx, q.cfg.LocalSite)
	if err != nil {
		return "", false, err
	}
	return l.Address, l.Alive(q.now()), nil
}

// MasterPilot returns the pilot id of the master while its lease is
// alive ("" when no master holds it): the agent releases that pilot last
// among equals.
func (q *Queue) MasterPilot(ctx context.Context) (string, error) {
	return q.masterPilot(ctx, q.cfg.LocalSite)
}

// masterPilot is the pilot id of a site pool's live master ("" if none).
func (q *Queue) masterPilot(ctx context.Context, site string) (string, error) {
	l, err := q.st.Lease(ctx, site)
	if err != nil || !l.Alive(q.now()) {
		return "", err
	}
	return l.Holder, nil
}

// precheckEpoch refuses a master request early from one read of the
// lease in the database (which another agent of a shared database may
// have granted or renewed). It is not the fence (the store checks the
// epoch again inside each write transaction): it answers a deposed master
// that has nothing to write, and a lease that changes after the read is
// the fence's to judge.
func (q *Queue) precheckEpoch(ctx context.Context, site string, epoch int64) error {
	l, err := q.st.Lease(ctx, site)
	if err != nil {
		return err
	}
	return rules.CheckEpoch(l, epoch, q.now())
}
