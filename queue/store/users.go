package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math"
	"strconv"
	"time"

	"github.com/harvest-hpc/harvest/queue/fairshare"
)

// EnsureUser inserts a user with limits unless the user exists.
func (s *Store) EnsureUser(ctx context.Context, name string, l fairshare.Limits, now time.Time) error {
	return s.write(ctx, func(tx *wtx) error {
		_, err := tx.ExecContext(inline(ctx), `INSERT INTO users (name, priority, max_cores, max_cpu_time, max_cost, created_at) VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (name) DO NOTHING`,
			name, l.Priority, l.MaxParallelJobs, l.MaxTotalRunningTime, l.MaxTotalCpuCost, ms(now))
		return err
	})
}

// PutUser creates or changes a user's limits.
func (s *Store) PutUser(ctx context.Context, name string, l fairshare.Limits, now time.Time) error {
	return s.write(ctx, func(tx *wtx) error {
		_, err := tx.ExecContext(inline(ctx), `INSERT INTO users (name, priority, max_cores, max_cpu_time, max_cost, created_at) VALUES (?, ?, ?, ?, ?, ?)
			ON CONFLICT(name) DO UPDATE SET priority = excluded.priority, max_cores = excluded.max_cores, max_cpu_time = excluded.max_cpu_time, max_cost = excluded.max_cost`,
			name, l.Priority, l.MaxParallelJobs, l.MaxTotalRunningTime, l.MaxTotalCpuCost, ms(now))
		return err
	})
}

// Users reads every user's limits.
func (s *Store) Users(ctx context.Context) (map[string]fairshare.Limits, error) {
	rows, err := s.r.QueryContext(ctx, `SELECT name, priority, max_cores, max_cpu_time, max_cost FROM users`)
	if err != nil {
		return nil, fmt.Errorf("read users: %w", err)
	}
	defer rows.Close()
	out := map[string]fairshare.Limits{}
	for rows.Next() {
		var n string
		var l fairshare.Limits
		if err := rows.Scan(&n, &l.Priority, &l.MaxParallelJobs, &l.MaxTotalRunningTime, &l.MaxTotalCpuCost); err != nil {
			return nil, fmt.Errorf("read users: %w", err)
		}
		out[n] = l
	}
	return out, rows.Err()
}

// RunningCores sums, per owner, the cores of the active tasks (ASSIGNED,
// RUNNING, ZOMBIE) of live jobs.
func (s *Store) RunningCores(ctx context.Context) (map[string]int, error) {
	rows, err := s.r.QueryContext(ctx, `SELECT owner, sum(cores * n_active) FROM `+jobsCounted+`
		WHERE state IN ('WAITING', 'RUNNING') AND n_active > 0 GROUP BY owner`)
	if err != nil {
		return nil, fmt.Errorf("read running cores: %w", err)
	}
	defer rows.Close()
	out := map[string]int{}
	for rows.Next() {
		var n string
		var c int
		if err := rows.Scan(&n, &c); err != nil {
			return nil, fmt.Errorf("read running cores: %w", err)
		}
		out[n] = c
	}
	return out, rows.Err()
}

// UsageEvent is one result's usage, at its arrival (Unix ms).
type UsageEvent struct {
	At        int64
	CPU, Cost float64
}

// UsageEvents reads, per owner, the usage of the batches of results
// received after since, oldest first (the sliding usage window).
func (s *Store) UsageEvents(ctx context.Context, since time.Time) (map[string][]UsageEvent, error) {
	rows, err := s.r.QueryContext(ctx, `SELECT owner, at, cpu_s, cost FROM usage_log WHERE at > ? ORDER BY id`, ms(since))
	if err != nil {
		return nil, fmt.Errorf("read usage: %w", err)
	}
	defer rows.Close()
	out := map[string][]UsageEvent{}
	for rows.Next() {
		var n string
		var e UsageEvent
		if err := rows.Scan(&n, &e.At, &e.CPU, &e.Cost); err != nil {
			return nil, fmt.Errorf("read usage: %w", err)
		}
		out[n] = append(out[n], e)
	}
	return out, rows.Err()
}

// PruneUsage deletes the usage logged before cut (out of the window).
func (s *Store) PruneUsage(ctx context.Context, cut time.Time) error {
	return s.write(ctx, func(tx *wtx) error {
		_, err := tx.ExecContext(inline(ctx), `DELETE FROM usage_log WHERE at < ?`, ms(cut))
		return err
	})
}

// UsageRow is a user's usage and computedPriority as flushed.
type UsageRow struct {
	User     string
	Usage    fairshare.Usage
	Priority float64
}

// PutUsage writes rows into the usage table in one transaction (a
// prepared upsert per row).
func (s *Store) PutUsage(ctx context.Context, rows []UsageRow, now time.Time) error {
	if len(rows) == 0 {
		return nil
	}
	// SQLite stores a NaN as NULL (and its NOT NULL refuses it),
	// PostgreSQL as NaN: both refuse it here.
	for _, r := range rows {
		if math.IsNaN(r.Priority) || math.IsNaN(r.Usage.CPUTime24h) || math.IsNaN(r.Usage.Cost24h) {
			return fmt.Errorf("usage of %s: not a number", r.User)
		}
	}
	return s.write(ctx, func(tx *wtx) error {
		for _, r := range rows {
			if _, err := s.exec(ctx, tx, putUsageSQL, r.User, r.Usage.RunningCores, r.Usage.CPUTime24h, r.Usage.Cost24h, r.Priority, ms(now)); err != nil {
				return err
			}
		}
		return nil
	})
}

var putUsageSQL = hot(`INSERT INTO usage ("user", running_cores, cpu_24h, cost_24h, computed_priority, updated_at) VALUES (?, ?, ?, ?, ?, ?)
	ON CONFLICT ("user") DO UPDATE SET running_cores = excluded.running_cores, cpu_24h = excluded.cpu_24h, cost_24h = excluded.cost_24h,
	computed_priority = excluded.computed_priority, updated_at = excluded.updated_at`)

// WaitingByOwner sums the WAITING tasks of live jobs per owner (only one
// owner when only is set).
func (s *Store) WaitingByOwner(ctx context.Context, only string) (map[string]int, error) {
	rows, err := s.r.QueryContext(ctx, `SELECT owner, sum(n_waiting) FROM `+jobsCounted+` WHERE state IN ('WAITING', 'RUNNING') AND (CAST(? AS TEXT) = '' OR owner = ?) GROUP BY owner`, only, only)
	if err != nil {
		return nil, fmt.Errorf("count waiting tasks: %w", err)
	}
	defer rows.Close()
	out := map[string]int{}
	for rows.Next() {
		var o string
		var n int
		if err := rows.Scan(&o, &n); err != nil {
			return nil, fmt.Errorf("count waiting tasks: %w", err)
		}
		out[o] = n
	}
	return out, rows.Err()
}

// TokenIdentity returns the user and role of a token's hash; ok is false
// for an unknown token.
func (s *Store) TokenIdentity(ctx context.Context, hash string) (user, role string, ok bool, err error) {
	err = s.r.QueryRowContext(ctx, `SELECT "user", role FROM tokens WHERE hash = ?`, hash).Scan(&user, &role)
	if errors.Is(err, sql.ErrNoRows) {
		return "", "", false, nil
	}
	if err != nil {
		return "", "", false, fmt.Errorf("look up token: %w", err)
	}
	return user, role, true, nil
}

// PutToken stores a token's hash.
func (s *Store) PutToken(ctx context.Context, hash, user, role string, now time.Time) error {
	return s.write(ctx, func(tx *wtx) error {
		_, err := tx.ExecContext(inline(ctx), `INSERT INTO tokens (hash, "user", role, created_at) VALUES (?, ?, ?, ?)`, hash, user, role, ms(now))
		return err
	})
}

// DeleteTokens deletes every token of user with role and counts them.
func (s *Store) DeleteTokens(ctx context.Context, user, role string) (int, error) {
	var n int64
	err := s.write(ctx, func(tx *wtx) error {
		res, err := tx.ExecContext(inline(ctx), `DELETE FROM tokens WHERE "user" = ? AND role = ?`, user, role)
		if err != nil {
			return err
		}
		n, err = res.RowsAffected()
		return err
	})
	return int(n), err
}

// NodeSettings reads the admin's floor and cap of pilot nodes.
func (s *Store) NodeSettings(ctx context.Context) (minNodes, maxNodes int, err error) {
	rows, err := s.r.QueryContext(ctx, `SELECT key, value FROM settings WHERE key IN ('min_nodes', 'max_nodes')`)
	if err != nil {
		return 0, 0, fmt.Errorf("read node settings: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var k string
		var v int
		if err := rows.Scan(&k, &v); err != nil {
			return 0, 0, fmt.Errorf("read node settings: %w", err)
		}
		if k == "min_nodes" {
			minNodes = v
		} else {
			maxNodes = v
		}
	}
	return minNodes, maxNodes, rows.Err()
}

// PutNodeSettings stores the admin's floor and cap of pilot nodes.
func (s *Store) PutNodeSettings(ctx context.Context, minNodes, maxNodes int) error {
	return s.write(ctx, func(tx *wtx) error {
		for _, kv := range []struct {
			k string
			v int
		}{{"min_nodes", minNodes}, {"max_nodes", maxNodes}} {
			if _, err := tx.ExecContext(inline(ctx), `INSERT INTO settings (key, value) VALUES (?, ?) ON CONFLICT(key) DO UPDATE SET value = excluded.value`, kv.k, strconv.Itoa(kv.v)); err != nil {
				return err
			}
		}
		return nil
	})
}
