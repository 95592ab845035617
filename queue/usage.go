package queue

import (
	"context"
	"database/sql"
	"fmt"
	"regexp"
	"sort"
	"time"

	"github.com/harvest-hpc/harvest/queue/api"
	"github.com/harvest-hpc/harvest/queue/fairshare"
)

// userNameRE accepts POSIX-ish user names.
var userNameRE = regexp.MustCompile(`^[a-z_][a-z0-9_.-]{0,63}\$?$`)

func validUserName(name string) error {
	if !userNameRE.MatchString(name) {
		return invalid("user name %q is not a valid user name", name)
	}
	return nil
}

// userLocked returns the in-memory state of a user, creating it with the
// default limits. q.mu must be held.
func (q *Queue) userLocked(name string) *userState {
	u := q.users[name]
	if u == nil {
		u = &userState{limits: q.cfg.DefaultLimits, dirty: true}
		q.users[name] = u
		q.recomputeHighestLocked()
	}
	return u
}

func (q *Queue) recomputeHighestLocked() {
	h := 0.0
	for _, u := range q.users {
		if u.limits.Priority > h {
			h = u.limits.Priority
		}
	}
	q.highest = h
}

// usageLocked returns the user's usage, sliding the window first.
func (q *Queue) usageLocked(u *userState, now time.Time) fairshare.Usage {
	cut := ms(now.Add(-q.cfg.UsageWindow))
	i := 0
	for i < len(u.events) && u.events[i].at <= cut {
		i++
	}
	if i > 0 {
		u.events = append(u.events[:0], u.events[i:]...)
		u.dirty = true
	}
	us := fairshare.Usage{RunningCores: u.running}
	for _, e := range u.events {
		us.CPUTime24h += e.cpu
		us.Cost24h += e.cost
	}
	return us
}

// ensureUser makes sure a users row exists (new users get the defaults).
func (q *Queue) ensureUser(ctx context.Context, name string) error {
	q.mu.Lock()
	_, ok := q.users[name]
	q.mu.Unlock()
	if ok {
		return nil
	}
	if err := validUserName(name); err != nil {
		return err
	}
	l := q.cfg.DefaultLimits
	err := q.write(ctx, func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `INSERT OR IGNORE INTO users (name, priority, max_cores, max_cpu_time, max_cost, created_at) VALUES (?, ?, ?, ?, ?, ?)`,
			name, l.Priority, l.MaxParallelJobs, l.MaxTotalRunningTime, l.MaxTotalCpuCost, ms(q.now()))
		return err
	})
	if err != nil {
		return fmt.Errorf("create user %s: %w", name, err)
	}
	q.mu.Lock()
	if _, ok := q.users[name]; !ok {
		q.users[name] = &userState{limits: l, dirty: true}
		q.recomputeHighestLocked()
	}
	q.mu.Unlock()
	return nil
}

// SetUser changes a user's priority and quotas (creating the user).
func (q *Queue) SetUser(ctx context.Context, name string, s api.UserSettings) (api.User, error) {
	if err := validUserName(name); err != nil {
		return api.User{}, err
	}
	q.mu.Lock()
	l := q.cfg.DefaultLimits
	if u, ok := q.users[name]; ok {
		l = u.limits
	}
	q.mu.Unlock()
	if s.Priority != nil {
		l.Priority = *s.Priority
	}
	if s.MaxCores != nil {
		l.MaxParallelJobs = *s.MaxCores
	}
	if s.MaxCPUTime != nil {
		l.MaxTotalRunningTime = *s.MaxCPUTime
	}
	if s.MaxCost != nil {
		l.MaxTotalCpuCost = *s.MaxCost
	}
	if err := l.Validate(); err != nil {
		return api.User{}, invalid("%v", err)
	}
	err := q.write(ctx, func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `INSERT INTO users (name, priority, max_cores, max_cpu_time, max_cost, created_at) VALUES (?, ?, ?, ?, ?, ?)
			ON CONFLICT(name) DO UPDATE SET priority = excluded.priority, max_cores = excluded.max_cores, max_cpu_time = excluded.max_cpu_time, max_cost = excluded.max_cost`,
			name, l.Priority, l.MaxParallelJobs, l.MaxTotalRunningTime, l.MaxTotalCpuCost, ms(q.now()))
		return err
	})
	if err != nil {
		return api.User{}, fmt.Errorf("set user %s: %w", name, err)
	}
	q.mu.Lock()
	u := q.userLocked(name)
	u.limits = l
	u.dirty = true
	q.recomputeHighestLocked()
	q.mu.Unlock()
	return q.User(ctx, name)
}

// Users returns every known user's standing, by name.
func (q *Queue) Users(ctx context.Context) ([]api.User, error) {
	waiting, err := q.waitingByOwner(ctx, "")
	if err != nil {
		return nil, err
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	now := q.now()
	out := make([]api.User, 0, len(q.users))
	for name, u := range q.users {
		out = append(out, q.userViewLocked(name, u, now, waiting[name]))
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// User returns one user's standing, or api.ErrUnknownUser.
func (q *Queue) User(ctx context.Context, name string) (api.User, error) {
	waiting, err := q.waitingByOwner(ctx, name)
	if err != nil {
		return api.User{}, err
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	u, ok := q.users[name]
	if !ok {
		return api.User{}, fmt.Errorf("%w %q", api.ErrUnknownUser, name)
	}
	return q.userViewLocked(name, u, q.now(), waiting[name]), nil
}

func (q *Queue) userViewLocked(name string, u *userState, now time.Time, waiting int) api.User {
	us := q.usageLocked(u, now)
	return api.User{
		Name: name, Priority: u.limits.Priority, MaxCores: u.limits.MaxParallelJobs,
		MaxCPUTime: u.limits.MaxTotalRunningTime, MaxCost: u.limits.MaxTotalCpuCost,
		RunningCores: us.RunningCores, CPUTime24h: us.CPUTime24h, Cost24h: us.Cost24h,
		ComputedPriority: fairshare.ComputedPriority(u.limits, us, q.highest), WaitingTasks: waiting,
	}
}

func (q *Queue) waitingByOwner(ctx context.Context, only string) (map[string]int, error) {
	rows, err := q.r.QueryContext(ctx, `SELECT owner, sum(n_waiting) FROM jobs WHERE state IN ('WAITING', 'RUNNING') AND (? = '' OR owner = ?) GROUP BY owner`, only, only)
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

// Reconcile recomputes every user's limits, running cores and windowed
// usage from the tables, correcting any drift of the in-memory counters.
// It holds the mutation lock (not SQLite's write lock) while it reads.
func (q *Queue) Reconcile(ctx context.Context) error {
	q.mut.Lock()
	defer q.mut.Unlock()
	limits := map[string]fairshare.Limits{}
	rows, err := q.r.QueryContext(ctx, `SELECT name, priority, max_cores, max_cpu_time, max_cost FROM users`)
	if err != nil {
		return fmt.Errorf("reconcile users: %w", err)
	}
	for rows.Next() {
		var n string
		var l fairshare.Limits
		if err := rows.Scan(&n, &l.Priority, &l.MaxParallelJobs, &l.MaxTotalRunningTime, &l.MaxTotalCpuCost); err != nil {
			rows.Close()
			return fmt.Errorf("reconcile users: %w", err)
		}
		limits[n] = l
	}
	rows.Close()
	running := map[string]int{}
	rows, err = q.r.QueryContext(ctx, `SELECT j.owner, sum(j.cores) FROM tasks t JOIN jobs j ON j.id = t.job_id WHERE t.state IN ('ASSIGNED', 'RUNNING', 'ZOMBIE') GROUP BY j.owner`)
	if err != nil {
		return fmt.Errorf("reconcile running cores: %w", err)
	}
	for rows.Next() {
		var n string
		var c int
		if err := rows.Scan(&n, &c); err != nil {
			rows.Close()
			return fmt.Errorf("reconcile running cores: %w", err)
		}
		running[n] = c
	}
	rows.Close()
	now := q.now()
	events := map[string][]usageEvent{}
	rows, err = q.r.QueryContext(ctx, `SELECT owner, received_at, cpu_s, cost FROM results WHERE received_at > ? ORDER BY received_at`, ms(now.Add(-q.cfg.UsageWindow)))
	if err != nil {
		return fmt.Errorf("reconcile usage: %w", err)
	}
	for rows.Next() {
		var n string
		var e usageEvent
		if err := rows.Scan(&n, &e.at, &e.cpu, &e.cost); err != nil {
			rows.Close()
			return fmt.Errorf("reconcile usage: %w", err)
		}
		events[n] = append(events[n], e)
	}
	rows.Close()

	q.mu.Lock()
	defer q.mu.Unlock()
	for n, l := range limits {
		u := q.users[n]
		if u == nil {
			u = &userState{}
			q.users[n] = u
		}
		u.limits = l
	}
	for n, u := range q.users {
		if _, ok := limits[n]; !ok {
			delete(q.users, n) // no row: not a user (cannot happen through the API)
			continue
		}
		if u.running != running[n] {
			q.log.Debug("reconciled running cores", "user", n, "memory", u.running, "tasks", running[n])
		}
		u.running = running[n]
		u.events = events[n]
		u.dirty = true
	}
	q.recomputeHighestLocked()
	return nil
}

// FlushStats reports one flush: users written, transactions, and the
// total and longest time the write lock was held.
type FlushStats struct {
	Users        int
	Transactions int
	Total        time.Duration
	Longest      time.Duration
}

// FlushUsage recomputes the priority of every user whose usage changed and
// writes it to the usage table in short transactions of WriteChunk users.
func (q *Queue) FlushUsage(ctx context.Context) (FlushStats, error) {
	type row struct {
		name string
		us   fairshare.Usage
		prio float64
	}
	var rows []row
	now := q.now()
	q.mu.Lock()
	for n, u := range q.users {
		us := q.usageLocked(u, now)
		if !u.dirty {
			continue
		}
		rows = append(rows, row{n, us, fairshare.ComputedPriority(u.limits, us, q.highest)})
		u.dirty = false
	}
	q.mu.Unlock()
	var st FlushStats
	for len(rows) > 0 {
		n := min(len(rows), q.cfg.WriteChunk)
		chunk := rows[:n]
		rows = rows[n:]
		start := time.Now()
		err := q.write(ctx, func(tx *sql.Tx) error {
			stmt, err := tx.PrepareContext(ctx, `INSERT INTO usage (user, running_cores, cpu_24h, cost_24h, computed_priority, updated_at) VALUES (?, ?, ?, ?, ?, ?)
				ON CONFLICT(user) DO UPDATE SET running_cores = excluded.running_cores, cpu_24h = excluded.cpu_24h, cost_24h = excluded.cost_24h,
				computed_priority = excluded.computed_priority, updated_at = excluded.updated_at`)
			if err != nil {
				return err
			}
			defer stmt.Close()
			for _, r := range chunk {
				if _, err := stmt.ExecContext(ctx, r.name, r.us.RunningCores, r.us.CPUTime24h, r.us.Cost24h, r.prio, ms(now)); err != nil {
					return err
				}
			}
			return nil
		})
		d := time.Since(start)
		if err != nil {
			for _, r := range append(chunk, rows...) { // retried at the next flush
				q.markDirty(r.name)
			}
			return st, fmt.Errorf("flush usage: %w", err)
		}
		st.Users += n
		st.Transactions++
		st.Total += d
		st.Longest = max(st.Longest, d)
	}
	return st, nil
}

func (q *Queue) markDirty(name string) {
	q.mu.Lock()
	if u := q.users[name]; u != nil {
		u.dirty = true
	}
	q.mu.Unlock()
}

func (q *Queue) nodes(ctx context.Context) (api.Nodes, error) {
	var n api.Nodes
	rows, err := q.r.QueryContext(ctx, `SELECT key, value FROM settings WHERE key IN ('min_nodes', 'max_nodes')`)
	if err != nil {
		return n, fmt.Errorf("read node settings: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var k string
		var v int
		if err := rows.Scan(&k, &v); err != nil {
			return n, fmt.Errorf("read node settings: %w", err)
		}
		if k == "min_nodes" {
			n.MinNodes = v
		} else {
			n.MaxNodes = v
		}
	}
	if err := rows.Err(); err != nil {
		return n, err
	}
	q.mu.Lock()
	if q.recFresh() {
		n.Recommendation = q.rec.minNodes
		n.RecommendedAt = q.rec.at.Unix()
	}
	q.mu.Unlock()
	d, err := q.Demand(ctx)
	if err != nil {
		return n, err
	}
	n.PendingTasks, n.RunningTasks = d.PendingTasks, d.RunningTasks
	return n, nil
}

// Nodes returns the node settings, the recommendation and the demand.
func (q *Queue) Nodes(ctx context.Context) (api.Nodes, error) { return q.nodes(ctx) }

// SetNodes sets the admin's floor and cap of pilot nodes.
func (q *Queue) SetNodes(ctx context.Context, s api.NodesSettings) (api.Nodes, error) {
	cur, err := q.nodes(ctx)
	if err != nil {
		return cur, err
	}
	if s.MinNodes != nil {
		cur.MinNodes = *s.MinNodes
	}
	if s.MaxNodes != nil {
		cur.MaxNodes = *s.MaxNodes
	}
	switch {
	case cur.MinNodes < 0 || cur.MaxNodes < 0:
		return cur, invalid("min_nodes and max_nodes must not be negative")
	case cur.MaxNodes > 0 && cur.MinNodes > cur.MaxNodes:
		return cur, invalid("min_nodes %d exceeds max_nodes %d", cur.MinNodes, cur.MaxNodes)
	}
	err = q.write(ctx, func(tx *sql.Tx) error {
		for k, v := range map[string]int{"min_nodes": cur.MinNodes, "max_nodes": cur.MaxNodes} {
			if _, err := tx.ExecContext(ctx, `INSERT INTO settings (key, value) VALUES (?, ?) ON CONFLICT(key) DO UPDATE SET value = excluded.value`, k, v); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return cur, fmt.Errorf("set nodes: %w", err)
	}
	return q.nodes(ctx)
}
