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

// Every lease is a row of leases, named by its pool: a site's master
// lease (the site's name; a pool never seen has epoch 0 and no holder),
// the sweeps' lease (sweepPool) and each agent's liveness (agentPool and
// the agent's name) when several agents share the database. No site's
// name starts with "~".
const (
	sweepPool = "~sweeps"
	agentPool = "~agent:"
)

var leaseQuery = hot(`SELECT epoch, holder, address, expires_at FROM leases WHERE pool = ?`)

// readLeaseTx reads a pool's lease inside a write transaction, locking
// the row as lock says (FOR SHARE, FOR UPDATE) on PostgreSQL.
func (s *Store) readLeaseTx(ctx context.Context, tx *wtx, pool, lock string) (rules.Lease, error) {
	if st := s.stmts[leaseQuery]; st != nil {
		return scanLease(tx.StmtContext(ctx, st).QueryRowContext(inline(ctx), pool), pool)
	}
	return scanLease(tx.QueryRowContext(inline(ctx), leaseQuery+" "+lock, pool), pool)
}

// scanLease reads a lease row (after the columns first, if any); no row
// is a pool never seen, the zero lease.
func scanLease(row scanner, pool string, first ...any) (rules.Lease, error) {
	var l rules.Lease
	var exp int64
	err := row.Scan(append(first, &l.Epoch, &l.Holder, &l.Address, &exp)...)
	if errors.Is(err, sql.ErrNoRows) {
		return rules.Lease{}, nil
	}
	if err != nil {
		return l, fmt.Errorf("read lease of pool %q: %w", pool, err)
	}
	l.Expires = time.UnixMilli(exp)
	return l, nil
}

var saveLeaseSQL = hot(`INSERT INTO leases (pool, epoch, holder, address, expires_at) VALUES (?, ?, ?, ?, ?)
		ON CONFLICT (pool) DO UPDATE SET epoch = excluded.epoch, holder = excluded.holder, address = excluded.address, expires_at = excluded.expires_at`)

func (s *Store) saveLease(ctx context.Context, tx *wtx, pool string, l rules.Lease) error {
	if _, err := s.exec(ctx, tx, saveLeaseSQL, pool, l.Epoch, l.Holder, l.Address, ms(l.Expires)); err != nil {
		return fmt.Errorf("save lease of pool %q: %w", pool, err)
	}
	return nil
}

// Lease returns a pool's current lease, read on a reader (for display and
// the queue's early check; a fenced write reads it in its transaction).
func (s *Store) Lease(ctx context.Context, pool string) (rules.Lease, error) {
	return scanLease(s.r.QueryRowContext(ctx, leaseQuery, pool), pool)
}

// Leases reads every pool's lease.
func (s *Store) Leases(ctx context.Context) (map[string]rules.Lease, error) {
	out := map[string]rules.Lease{}
	return out, s.each(ctx, "read leases", func(r *sql.Rows) error {
		var pool string
		l, err := scanLease(r, "", &pool)
		out[pool] = l
		return err
	}, `SELECT pool, epoch, holder, address, expires_at FROM leases`)
}

// DecideLease applies rules.DecideLease to a pool's stored lease in one
// write transaction and returns the previous lease and the decision.
func (s *Store) DecideLease(ctx context.Context, pool string, req pilotproto.LeaseRequest, now time.Time, ttl time.Duration) (prev rules.Lease, d rules.LeaseDecision, err error) {
	err = s.write(ctx, func(tx *wtx) error {
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

// CheckEpoch is an empty fenced write: it answers whether epoch is the
// pool's current, alive lease at a point serialised with every other write
// (for a master's writes that store nothing here, like a recommendation).
func (s *Store) CheckEpoch(ctx context.Context, pool string, epoch int64, now time.Time) error {
	return s.fenced(ctx, pool, epoch, now, func(*wtx, rules.Lease) error { return nil })
}

// TakeSweep grants the sweep lease to holder, or renews it, until now+ttl,
// when nobody else holds it alive. It returns the lease's epoch, which
// rises with every change of holder, and whether holder holds it now.
func (s *Store) TakeSweep(ctx context.Context, holder string, now time.Time, ttl time.Duration) (epoch int64, held bool, err error) {
	err = s.write(ctx, func(tx *wtx) error {
		l, err := s.readLeaseTx(ctx, tx, sweepPool, "FOR UPDATE")
		if err != nil || l.Holder != holder && l.Expires.After(now) {
			return err // another agent's, alive
		}
		if l.Holder != holder {
			l.Epoch++
		}
		epoch = l.Epoch
		err = s.saveLease(ctx, tx, sweepPool, rules.Lease{Epoch: l.Epoch, Holder: holder, Expires: now.Add(ttl)})
		held = err == nil
		return err
	})
	if err != nil {
		return 0, false, fmt.Errorf("sweep lease: %w", err)
	}
	return epoch, held, nil
}

// ErrSweepLost is the error of a write made under SweepFenced after the
// sweep lease passed to another agent: the write changed nothing.
var ErrSweepLost = errors.New("the sweep lease has passed to another agent")

type sweepFenceKey struct{}

type sweepFence struct {
	holder string
	epoch  int64
}

// SweepFenced returns ctx for a sweep's writes: each write transaction
// under it first checks that holder still holds the sweep lease at epoch,
// else fails with ErrSweepLost, changing nothing. A lapsed lease nobody
// took keeps its epoch: its holder may still sweep.
func SweepFenced(ctx context.Context, holder string, epoch int64) context.Context {
	return context.WithValue(ctx, sweepFenceKey{}, sweepFence{holder, epoch})
}

func (s *Store) checkSweep(ctx context.Context, tx *wtx, f sweepFence) error {
	l, err := s.readLeaseTx(ctx, tx, sweepPool, "FOR SHARE")
	if err == nil && (l.Epoch != f.epoch || l.Holder != f.holder) {
		err = fmt.Errorf("%w (epoch %d of %s, not %d of %s)", ErrSweepLost, l.Epoch, l.Holder, f.epoch, f.holder)
	}
	return err
}

// BeatAgent renews this agent's (Share's holder) liveness until now+ttl.
func (s *Store) BeatAgent(ctx context.Context, now time.Time, ttl time.Duration) error {
	return s.write(ctx, func(tx *wtx) error {
		return s.saveLease(ctx, tx, agentPool+s.holder, rules.Lease{Holder: s.holder, Expires: now.Add(ttl)})
	})
}

// ReleaseSweep lets holder's sweep lease (if held) lapse now, so another
// agent takes the sweeps at its next round, not after the TTL.
func (s *Store) ReleaseSweep(ctx context.Context, holder string) error {
	return s.release(ctx, sweepPool, holder)
}

// ReleaseAgent lets this agent's liveness lapse (an agent that stops):
// its submissions under way, if any, may be taken over at once.
func (s *Store) ReleaseAgent(ctx context.Context) error {
	return s.release(ctx, agentPool+s.holder, s.holder)
}

func (s *Store) release(ctx context.Context, pool, holder string) error {
	_, err := s.do(ctx, "release the lease "+pool, `UPDATE leases SET expires_at = 0 WHERE pool = ? AND holder = ?`, pool, holder)
	return err
}

// PruneAgents removes the liveness rows that lapsed before cut (killed
// agents leave theirs). A missing row counts as a dead agent.
func (s *Store) PruneAgents(ctx context.Context, cut time.Time) error {
	_, err := s.do(ctx, "prune the liveness of dead agents", `DELETE FROM leases WHERE pool LIKE ? AND expires_at < ?`, agentPool+"%", ms(cut))
	return err
}

// TakeOverSubmission frees the idempotency key of the SUBMITTING job id
// if its storer is dead (liveness row lapsed or gone), so a retry here
// stores a new job, and takes the storer away (a resumed storer gets
// ErrSubmissionTaken); the caller drops the job. ok is false, nothing
// changed, while the storer lives or the job is no longer SUBMITTING.
func (s *Store) TakeOverSubmission(ctx context.Context, id int64, now time.Time) (ok bool, err error) {
	n, err := s.do(ctx, fmt.Sprintf("take over the submission of job %d", id), `UPDATE jobs SET idem_key = '', storer = ''
		WHERE id = ? AND state = ? AND storer <> ? AND NOT EXISTS (SELECT 1 FROM leases WHERE pool = CAST(? AS TEXT) || jobs.storer AND expires_at > ?)`,
		id, rules.JobSubmitting, s.holder, agentPool, ms(now))
	return n == 1, err
}
