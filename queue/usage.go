package queue

import (
	"context"
	"fmt"
	"regexp"
	"sort"
	"time"

	"github.com/harvest-hpc/harvest/queue/api"
	"github.com/harvest-hpc/harvest/queue/fairshare"
	"github.com/harvest-hpc/harvest/queue/store"
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
		h = max(h, u.limits.Priority)
	}
	q.highest = h
}

// usageLocked returns the user's usage, sliding the window first.
func (q *Queue) usageLocked(u *userState, now time.Time) fairshare.Usage {
	cut := now.Add(-q.cfg.UsageWindow).UnixMilli()
	i := 0
	for i < len(u.events) && u.events[i].At <= cut {
		i++
	}
	if i > 0 {
		u.events = append(u.events[:0], u.events[i:]...)
		u.dirty = true
	}
	us := fairshare.Usage{RunningCores: u.running}
	for _, e := range u.events {
		us.CPUTime24h += e.CPU
		us.Cost24h += e.Cost
	}
	return us
}

// addRunningLocked applies a change of running cores per owner.
func (q *Queue) addRunningLocked(delta map[string]int) {
	for owner, c := range delta {
		u := q.userLocked(owner)
		u.running += c
		u.dirty = true
	}
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
	q.mu.Lock()
	defer q.mu.Unlock()
	l := q.cfg.DefaultLimits
	if err := q.st.EnsureUser(ctx, name, l, q.now()); err != nil {
		return fmt.Errorf("create user %s: %w", name, err)
	}
	if _, ok := q.users[name]; !ok {
		q.users[name] = &userState{limits: l, dirty: true}
		q.recomputeHighestLocked()
	}
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
		q.mu.Unlock()
		return api.User{}, invalid("%v", err)
	}
	if err := q.st.PutUser(ctx, name, l, q.now()); err != nil {
		q.mu.Unlock()
		return api.User{}, fmt.Errorf("set user %s: %w", name, err)
	}
	u := q.userLocked(name)
	u.limits = l
	u.dirty = true
	q.recomputeHighestLocked()
	q.mu.Unlock()
	return q.User(ctx, name)
}

// Users returns every known user's standing, by name.
func (q *Queue) Users(ctx context.Context) ([]api.User, error) {
	waiting, err := q.st.WaitingByOwner(ctx, "")
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
	if err := validUserName(name); err != nil {
		return api.User{}, err
	}
	waiting, err := q.st.WaitingByOwner(ctx, name)
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

// Reconcile recomputes every user's limits, running cores and windowed
// usage from the tables, correcting any drift of the in-memory mirror. It
// holds q.mu while it reads, so no mirrored write commits in between.
func (q *Queue) Reconcile(ctx context.Context) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	limits, err := q.st.Users(ctx)
	if err != nil {
		return fmt.Errorf("reconcile: %w", err)
	}
	running, err := q.st.RunningCores(ctx)
	if err != nil {
		return fmt.Errorf("reconcile: %w", err)
	}
	events, err := q.st.UsageEvents(ctx, q.now().Add(-q.cfg.UsageWindow))
	if err != nil {
		return fmt.Errorf("reconcile: %w", err)
	}
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
	var rows []store.UsageRow
	now := q.now()
	q.mu.Lock()
	for n, u := range q.users {
		us := q.usageLocked(u, now)
		if !u.dirty {
			continue
		}
		rows = append(rows, store.UsageRow{User: n, Usage: us, Priority: fairshare.ComputedPriority(u.limits, us, q.highest)})
		u.dirty = false
	}
	q.mu.Unlock()
	var st FlushStats
	for len(rows) > 0 {
		chunk := rows[:min(len(rows), q.cfg.WriteChunk)]
		rows = rows[len(chunk):]
		start := time.Now()
		if err := q.st.PutUsage(ctx, chunk, now); err != nil {
			q.mu.Lock()
			for _, r := range append(chunk, rows...) { // retried at the next flush
				if u := q.users[r.User]; u != nil {
					u.dirty = true
				}
			}
			q.mu.Unlock()
			return st, fmt.Errorf("flush usage: %w", err)
		}
		d := time.Since(start)
		st.Users += len(chunk)
		st.Transactions++
		st.Total += d
		st.Longest = max(st.Longest, d)
	}
	return st, nil
}
