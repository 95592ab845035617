package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/harvest-hpc/harvest/queue/fairshare"
)

// EnsureUser inserts a user with limits unless the user exists.
func (s *Store) EnsureUser(ctx context.Context, name string, l fairshare.Limits, now time.Time) error {
	return s.putUser(ctx, name, l, now, `NOTHING`)
}

// PutUser creates or changes a user's limits.
func (s *Store) PutUser(ctx context.Context, name string, l fairshare.Limits, now time.Time) error {
	return s.putUser(ctx, name, l, now, `UPDATE SET priority = excluded.priority, max_cores = excluded.max_cores, max_cpu_time = excluded.max_cpu_time, max_cost = excluded.max_cost`)
}

func (s *Store) putUser(ctx context.Context, name string, l fairshare.Limits, now time.Time, onConflict string) error {
	_, err := s.do(ctx, "store user "+name, `INSERT INTO users (name, priority, max_cores, max_cpu_time, max_cost, created_at) VALUES ($1, $2, $3, $4, $5, $6)
		ON CONFLICT (name) DO `+onConflict, name, l.Priority, l.MaxParallelJobs, l.MaxTotalRunningTime, l.MaxTotalCpuCost, ms(now))
	return err
}

// Users reads every user's limits.
func (s *Store) Users(ctx context.Context) (map[string]fairshare.Limits, error) {
	return byKey(ctx, s, "read users", func(r scanner) (n string, l fairshare.Limits, err error) {
		err = r.Scan(&n, &l.Priority, &l.MaxParallelJobs, &l.MaxTotalRunningTime, &l.MaxTotalCpuCost)
		return n, l, err
	}, `SELECT name, priority, max_cores, max_cpu_time, max_cost FROM users`)
}

// WaitingByOwner sums live jobs' WAITING tasks per owner (only's, if set).
func (s *Store) WaitingByOwner(ctx context.Context, only string) (map[string]int, error) {
	return s.sums(ctx, "count waiting tasks", `SELECT owner, sum(n_waiting) FROM `+jobsCounted+` WHERE state IN ('WAITING', 'RUNNING') AND (CAST($1 AS TEXT) = '' OR owner = $1) GROUP BY owner`, only)
}

// UnfinishedOf counts owner's waiting and active tasks of live jobs.
func (s *Store) UnfinishedOf(ctx context.Context, owner string) (int, error) {
	v, err := s.sums(ctx, "count unfinished tasks of "+owner, `SELECT owner, sum(n_waiting + n_active) FROM `+jobsCounted+` WHERE state IN ('WAITING', 'RUNNING') AND owner = $1 GROUP BY owner`, owner)
	return v[owner], err
}

// sums reads a query's rows of name and count.
func (s *Store) sums(ctx context.Context, what, query string, args ...any) (map[string]int, error) {
	return byKey(ctx, s, what, func(r scanner) (k string, n int, err error) {
		err = r.Scan(&k, &n)
		return k, n, err
	}, query, args...)
}

// UsageEvent is one result's usage, at its arrival (Unix ms).
type UsageEvent struct {
	At        int64
	CPU, Cost float64
}

// UsageEvents reads per owner the usage received after since, oldest first (the window).
func (s *Store) UsageEvents(ctx context.Context, since time.Time) (map[string][]UsageEvent, error) {
	out := map[string][]UsageEvent{}
	return out, s.each(ctx, "read usage", func(r *sql.Rows) error {
		var n string
		var e UsageEvent
		err := r.Scan(&n, &e.At, &e.CPU, &e.Cost)
		out[n] = append(out[n], e)
		return err
	}, `SELECT owner, at, cpu_s, cost FROM usage_log WHERE at > $1 ORDER BY id`, ms(since))
}

// PruneUsage deletes the usage logged before cut (out of the window).
func (s *Store) PruneUsage(ctx context.Context, cut time.Time) error {
	_, err := s.do(ctx, "prune usage", `DELETE FROM usage_log WHERE at < $1`, ms(cut))
	return err
}

// UsageRow is a user's usage and computedPriority.
type UsageRow struct {
	User     string
	Usage    fairshare.Usage
	Priority float64
}

var putUsage = rowsSQL(`INSERT INTO usage ("user", running_cores, cpu_24h, cost_24h, computed_priority, updated_at) SELECT * FROM`,
	`WHERE v.column1 <> '' ON CONFLICT ("user") DO UPDATE SET running_cores = excluded.running_cores, cpu_24h = excluded.cpu_24h,
	cost_24h = excluded.cost_24h, computed_priority = excluded.computed_priority, updated_at = excluded.updated_at`, "", 0, 0.0, 0.0, 0.0, 0)

// PutUsage writes rows (one per user) in one transaction. A NaN is
// refused (SQLite would store NULL, PostgreSQL NaN).
func (s *Store) PutUsage(ctx context.Context, rows []UsageRow, now time.Time) error {
	vs := make([][]any, len(rows))
	for i, r := range rows {
		if math.IsNaN(r.Priority) || math.IsNaN(r.Usage.CPUTime24h) || math.IsNaN(r.Usage.Cost24h) {
			return fmt.Errorf("usage of %s: not a number", r.User)
		}
		vs[i] = []any{r.User, r.Usage.RunningCores, r.Usage.CPUTime24h, r.Usage.Cost24h, r.Priority, ms(now)}
	}
	return s.write(ctx, func(tx *sql.Tx) error { return s.newBatch(ctx, tx).run(putUsage, vs, "", nil) })
}

// TokenIdentity reads the user, role and expiry (zero: never) of a
// token's hash; ok is false if unknown.
func (s *Store) TokenIdentity(ctx context.Context, hash string) (user, role string, expires time.Time, ok bool, err error) {
	var exp int64
	err = s.r.QueryRowContext(ctx, `SELECT "user", role, expires_at FROM tokens WHERE hash = $1`, hash).Scan(&user, &role, &exp)
	ok, err = found(err)
	return user, role, fromMS(exp), ok, wrap(err, "look up token")
}

// fromMS reads a stored time, 0 being none.
func fromMS(v int64) time.Time {
	if v == 0 {
		return time.Time{}
	}
	return time.UnixMilli(v)
}

// ErrTokenCap: the user holds the most tokens of the role the queue allows.
var ErrTokenCap = errors.New("too many tokens")

// PutToken stores a token's hash expiring at expires (zero: never) unless
// user holds limit tokens of role (ErrTokenCap): one statement, so two at
// once cannot both take the last. Expired tokens count until swept.
func (s *Store) PutToken(ctx context.Context, hash, user, role string, now, expires time.Time, limit int) error {
	var exp int64
	if !expires.IsZero() {
		exp = ms(expires)
	}
	n, err := s.do(ctx, "store token", `INSERT INTO tokens (hash, "user", role, created_at, expires_at) SELECT CAST($1 AS TEXT), CAST($2 AS TEXT), CAST($3 AS TEXT), CAST($4 AS BIGINT), CAST($5 AS BIGINT)
		WHERE (SELECT count(*) FROM tokens WHERE "user" = $2 AND role = $3) < $6`, hash, user, role, ms(now), exp, limit)
	if err == nil && n == 0 {
		err = fmt.Errorf("store token: %w: %s holds %d %s tokens, the most the queue allows", ErrTokenCap, user, limit, role)
	}
	return err
}

// TokenInfo is a stored token: its hash (never the token), role, birth and
// expiry (zero: never).
type TokenInfo struct {
	Hash, User, Role string
	Created, Expires time.Time
}

// Tokens lists user's tokens, oldest first.
func (s *Store) Tokens(ctx context.Context, user string) ([]TokenInfo, error) {
	return list(ctx, s, "list tokens", func(r scanner) (t TokenInfo, err error) {
		var at, exp int64
		err = r.Scan(&t.Hash, &t.User, &t.Role, &at, &exp)
		t.Created, t.Expires = time.UnixMilli(at), fromMS(exp)
		return t, err
	}, `SELECT hash, "user", role, created_at, expires_at FROM tokens WHERE "user" = $1 ORDER BY created_at, hash`, user)
}

// SweepTokens deletes the tokens expired at now and returns how many.
func (s *Store) SweepTokens(ctx context.Context, now time.Time) (int64, error) {
	return s.do(ctx, "sweep expired tokens", `DELETE FROM tokens WHERE expires_at > 0 AND expires_at <= $1`, ms(now))
}

// DeleteTokens deletes and counts user's tokens of role whose hash starts
// with prefix (hex: no LIKE wildcard); with one, only if one matched.
func (s *Store) DeleteTokens(ctx context.Context, user, role, prefix string, one bool) (int, error) {
	n, err := s.do(ctx, "delete tokens", `DELETE FROM tokens WHERE "user" = $1 AND role = $2 AND hash LIKE $3
		AND (NOT $4 OR (SELECT count(*) FROM tokens WHERE "user" = $1 AND role = $2 AND hash LIKE $3) = 1)`, user, role, prefix+"%", one)
	return int(n), err
}
