package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/harvest-hpc/harvest/pilotproto"
	"github.com/harvest-hpc/harvest/queue/rules"
)

// A lease is a row of leases granted by rules.DecideLease, named by its
// pool: a site's master lease (the site's name), the sweeps' (sweepPool),
// each sharing agent's liveness (agentPool+name). No site's name has "~".
const (
	sweepPool = "~sweeps"
	agentPool = "~agent:"
)

const leaseQuery = `SELECT epoch, holder, address, expires_at FROM leases WHERE pool = $1 `

// readLeaseTx reads a pool's lease in tx, on PostgreSQL locked by lock.
func (s *Store) readLeaseTx(ctx context.Context, tx *sql.Tx, pool, lock string) (rules.Lease, error) {
	if !s.pg {
		lock = "" // SQLite's writer holds the whole database
	}
	return scanLease(tx.QueryRowContext(inline(ctx), leaseQuery+lock, pool), pool)
}

// scanLease reads a lease row (after the columns first); none is the zero lease.
func scanLease(row scanner, pool string, first ...any) (rules.Lease, error) {
	var l rules.Lease
	var exp int64
	ok, err := found(row.Scan(append(first, &l.Epoch, &l.Holder, &l.Address, &exp)...))
	if ok {
		l.Expires = time.UnixMilli(exp)
	}
	return l, wrap(err, "read lease of pool %q", pool)
}

// Lease reads a pool's lease outside a write (fenced writes read theirs).
func (s *Store) Lease(ctx context.Context, pool string) (rules.Lease, error) {
	return scanLease(s.r.QueryRowContext(ctx, leaseQuery, pool), pool)
}

// Leases reads every pool's lease.
func (s *Store) Leases(ctx context.Context) (map[string]rules.Lease, error) {
	return byKey(ctx, s, "read leases", func(r scanner) (pool string, l rules.Lease, err error) {
		l, err = scanLease(r, "", &pool)
		return pool, l, err
	}, `SELECT pool, epoch, holder, address, expires_at FROM leases`)
}

// DecideLease applies rules.DecideLease to a pool's lease in one write.
func (s *Store) DecideLease(ctx context.Context, pool string, req pilotproto.LeaseRequest, now time.Time, ttl time.Duration) (prev rules.Lease, d rules.LeaseDecision, err error) {
	err = s.write(ctx, func(tx *sql.Tx) error {
		if prev, err = s.readLeaseTx(ctx, tx, pool, "FOR UPDATE"); err != nil {
			return err
		}
		if d, err = rules.DecideLease(prev, req, now, ttl); err != nil || !d.Write {
			return err
		}
		return s.saveLease(ctx, tx, pool, d.Next)
	})
	return prev, d, err
}

func (s *Store) saveLease(ctx context.Context, tx *sql.Tx, pool string, l rules.Lease) error {
	_, err := tx.ExecContext(inline(ctx), `INSERT INTO leases (pool, epoch, holder, address, expires_at) VALUES ($1, $2, $3, $4, $5)
		ON CONFLICT (pool) DO UPDATE SET epoch = excluded.epoch, holder = excluded.holder, address = excluded.address, expires_at = excluded.expires_at`,
		pool, l.Epoch, l.Holder, l.Address, ms(l.Expires))
	return wrap(err, "save lease of pool %q", pool)
}

// CheckEpoch is an empty fenced write: whether epoch is the pool's live lease, serialised
// with all writes (for a master's acts that store nothing here, like a recommendation).
func (s *Store) CheckEpoch(ctx context.Context, pool string, epoch int64, now time.Time) error {
	return s.fenced(ctx, pool, epoch, now, func(*sql.Tx, rules.Lease) error { return nil })
}

// TakeSweep grants or renews this agent's sweep lease until now+ttl unless
// another holds it alive: its epoch and whether this agent holds it.
func (s *Store) TakeSweep(ctx context.Context, now time.Time, ttl time.Duration) (epoch int64, held bool, err error) {
	_, d, err := s.DecideLease(ctx, sweepPool, pilotproto.LeaseRequest{PilotID: s.holder}, now, ttl)
	return d.Next.Epoch, d.Granted, wrap(err, "sweep lease")
}

// ErrSweepLost: a write under SweepFenced found the sweep lease another's.
var ErrSweepLost = errors.New("the sweep lease has passed to another agent")

type sweepEpochKey struct{}

// SweepFenced returns ctx for a sweep's writes: each first checks that
// this agent still holds the sweep lease at epoch (a lapsed lease nobody
// took keeps its epoch), else fails with ErrSweepLost, changing nothing.
func SweepFenced(ctx context.Context, epoch int64) context.Context {
	return context.WithValue(ctx, sweepEpochKey{}, epoch)
}

func (s *Store) checkSweep(ctx context.Context, tx *sql.Tx, epoch int64) error {
	l, err := s.readLeaseTx(ctx, tx, sweepPool, "FOR SHARE")
	if err == nil && (l.Epoch != epoch || l.Holder != s.holder) {
		err = fmt.Errorf("%w (epoch %d of %s, not %d of %s)", ErrSweepLost, l.Epoch, l.Holder, epoch, s.holder)
	}
	return err
}

// BeatAgent renews this agent's liveness until now+ttl.
func (s *Store) BeatAgent(ctx context.Context, now time.Time, ttl time.Duration) error {
	_, _, err := s.DecideLease(ctx, agentPool+s.holder, pilotproto.LeaseRequest{PilotID: s.holder}, now, ttl)
	return err
}

// Leave lets this agent's liveness and sweep lease lapse now: another
// agent takes the sweeps and this one's half-stored submissions at once.
func (s *Store) Leave(ctx context.Context) error {
	_, err := s.do(ctx, "release this agent's leases", `UPDATE leases SET expires_at = 0 WHERE pool IN ($1, $2) AND holder = $3`, sweepPool, agentPool+s.holder, s.holder)
	return err
}

// PruneAgents removes liveness rows lapsed before cut (killed agents leave theirs).
func (s *Store) PruneAgents(ctx context.Context, cut time.Time) error {
	_, err := s.do(ctx, "prune the liveness of dead agents", `DELETE FROM leases WHERE pool LIKE $1 AND expires_at < $2`, agentPool+"%", ms(cut))
	return err
}

// TakeOverSubmission frees the idempotency key of the SUBMITTING job id of
// a dead storer (liveness lapsed or gone), for a retry here, and takes the
// job from it (ErrSubmissionTaken if it resumes) for the caller to drop.
func (s *Store) TakeOverSubmission(ctx context.Context, id int64, now time.Time) (ok bool, err error) {
	n, err := s.do(ctx, fmt.Sprintf("take over the submission of job %d", id), `UPDATE jobs SET idem_key = '', storer = ''
		WHERE id = $1 AND state = $2 AND storer <> $3 AND NOT EXISTS (SELECT 1 FROM leases WHERE pool = CAST($4 AS TEXT) || jobs.storer AND expires_at > $5)`,
		id, rules.JobSubmitting, s.holder, agentPool, ms(now))
	return n == 1 && err == nil, err
}
