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

// Every pool (the pilots of one site) has its own lease row, made at its
// first request: a pool never seen has epoch 0 and no holder.
var leaseQuery = hot(`SELECT epoch, holder, address, expires_at FROM leases WHERE pool = ?`)

// readLeaseTx reads a pool's lease inside a write transaction, with the
// prepared statement on SQLite, locking the row as lock says (FOR SHARE,
// FOR UPDATE) on PostgreSQL.
func (s *Store) readLeaseTx(ctx context.Context, tx *wtx, pool, lock string) (rules.Lease, error) {
	if st := s.stmts[leaseQuery]; st != nil {
		return scanLease(tx.StmtContext(ctx, st).QueryRowContext(inline(ctx), pool), pool)
	}
	return scanLease(tx.QueryRowContext(inline(ctx), leaseQuery+" "+lock, pool), pool)
}

// scanLease reads a lease row (after the columns first, if any); no row
// is a pool never seen, the zero lease.
func scanLease(row interface{ Scan(...any) error }, pool string, first ...any) (rules.Lease, error) {
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
	_, err := s.exec(ctx, tx, saveLeaseSQL,
		pool, l.Epoch, l.Holder, l.Address, ms(l.Expires))
	if err != nil {
		return fmt.Errorf("save lease of pool %q: %w", pool, err)
	}
	return nil
}

// Lease returns a pool's current lease, read on a reader (for display and
// the queue's early check, not for fencing: a fenced write reads the row
// in its own transaction). A master asks once per pull or batch of
// results, each of many tasks: a read of one row by its key is nothing
// beside them.
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
