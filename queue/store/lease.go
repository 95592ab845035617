package store

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/harvest-hpc/harvest/pilotproto"
	"github.com/harvest-hpc/harvest/queue/rules"
)

func readLease(ctx context.Context, db querier) (rules.Lease, error) {
	var l rules.Lease
	var exp int64
	err := db.QueryRowContext(ctx, `SELECT epoch, holder, address, expires_at FROM lease WHERE id = 1`).Scan(&l.Epoch, &l.Holder, &l.Address, &exp)
	if err != nil {
		return l, fmt.Errorf("read lease: %w", err)
	}
	l.Expires = time.UnixMilli(exp)
	return l, nil
}

func saveLease(ctx context.Context, tx *sql.Tx, l rules.Lease) error {
	_, err := tx.ExecContext(ctx, `UPDATE lease SET epoch = ?, holder = ?, address = ?, expires_at = ? WHERE id = 1`,
		l.Epoch, l.Holder, l.Address, ms(l.Expires))
	if err != nil {
		return fmt.Errorf("save lease: %w", err)
	}
	return nil
}

// Lease reads the current lease (a reader: for display, not for fencing).
func (s *Store) Lease(ctx context.Context) (rules.Lease, error) { return readLease(ctx, s.r) }

// DecideLease applies rules.DecideLease to the stored lease in one write
// transaction and returns the previous lease and the decision.
func (s *Store) DecideLease(ctx context.Context, req pilotproto.LeaseRequest, now time.Time, ttl time.Duration) (prev rules.Lease, d rules.LeaseDecision, err error) {
	err = s.write(ctx, func(tx *sql.Tx) error {
		if prev, err = readLease(ctx, tx); err != nil {
			return err
		}
		if d, err = rules.DecideLease(prev, req, now, ttl); err != nil || !d.Write {
			return err
		}
		return saveLease(ctx, tx, d.Next)
	})
	return prev, d, err
}

// CheckEpoch is an empty fenced write: it answers whether epoch is the
// current, alive lease at a point serialised with every other write (for
// a master's writes that store nothing here, like a recommendation).
func (s *Store) CheckEpoch(ctx context.Context, epoch int64, now time.Time) error {
	return s.fenced(ctx, epoch, now, func(*sql.Tx, rules.Lease) error { return nil })
}
