package queue

import (
	"cmp"
	"context"
	"fmt"
	"regexp"
	"slices"
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
	if err := q.st.EnsureUser(ctx, name, q.cfg.DefaultLimits, q.now()); err != nil {
		return fmt.Errorf("create user %s: %w", name, err)
	}
	q.userLocked(name)
	return nil
}

// KnownUser checks that an admin's request names a user: one the queue
// knows, or (account) a Unix account, unless create allows a new name.
// A mistyped name was silently created.
func (q *Queue) KnownUser(name string, account, create bool) error {
	if err := validUserName(name); err != nil {
		return err
	}
	q.mu.Lock()
	_, ok := q.users[name]
	q.mu.Unlock()
	if ok || create {
		return nil
	}
	if account {
		if _, err := q.cfg.LookupAccount(name); err == nil {
			return nil
		}
		return fmt.Errorf("%w %q: neither a user of this queue (`harvest users` lists them) nor a Unix account here; check the name, or add --create to make it anyway", api.ErrUnknownUser, name)
	}
	return fmt.Errorf("%w %q: not a user of this queue (`harvest users` lists them); check the name, or add --create to create it with these settings", api.ErrUnknownUser, name)
}

// SetUser changes a user's priority and quotas; a user the queue does not
// know is created only if s.Create.
func (q *Queue) SetUser(ctx context.Context, name string, s api.UserSettings) (api.User, error) {
	if err := q.KnownUser(name, false, s.Create); err != nil {
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
	lowered := l.Priority < u.limits.Priority
	u.limits = l
	q.touchLocked(u)
	if lowered || l.Priority > q.order.Highest() {
		q.recomputeHighestLocked()
	}
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
	q.slideLocked(q.now())
	out := make([]api.User, 0, len(q.users))
	for name, u := range q.users {
		out = append(out, q.userViewLocked(u, waiting[name]))
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
	q.slideLocked(q.now())
	return q.userViewLocked(u, waiting[name]), nil
}

func (q *Queue) userViewLocked(u *userState, waiting int) api.User {
	us := u.usage()
	return api.User{
		Name: u.name, Priority: u.limits.Priority, MaxCores: u.limits.MaxParallelJobs,
		MaxCPUTime: u.limits.MaxTotalRunningTime, MaxCost: u.limits.MaxTotalCpuCost,
		RunningCores: us.RunningCores, CPUTime24h: us.CPUTime24h, Cost24h: us.Cost24h,
		ComputedPriority: fairshare.ComputedPriority(u.limits, us, q.order.Highest()), WaitingTasks: waiting,
	}
}

// Reconcile rebuilds the in-memory mirror from the tables: every user's
// limits, running cores and windowed usage, the live jobs and their
// waiting counts, and the fair-share order, correcting any drift. It holds
// q.mu while it reads, so no mirrored write commits in between, and
// pullMu, so no pull is half way through with its tie-break counts.
func (q *Queue) Reconcile(ctx context.Context) error {
	q.pullMu.Lock()
	defer q.pullMu.Unlock()
	q.mu.Lock()
	defer q.mu.Unlock()
	now := q.now()
	limits, err := q.st.Users(ctx)
	if err != nil {
		return fmt.Errorf("reconcile: %w", err)
	}
	events, err := q.st.UsageEvents(ctx, now.Add(-q.cfg.UsageWindow))
	if err != nil {
		return fmt.Errorf("reconcile: %w", err)
	}
	live, running, err := q.st.LiveJobs(ctx)
	if err != nil {
		return fmt.Errorf("reconcile: %w", err)
	}
	users := make(map[string]*userState, len(limits))
	highest := 0.0
	var window []windowMark
	for n, l := range limits {
		u := &userState{name: n, limits: l, running: running[n], dirty: true}
		if old := q.users[n]; old != nil && old.running != u.running {
			q.log.Debug("reconciled running cores", "user", n, "memory", old.running, "tasks", u.running)
		}
		for _, e := range events[n] {
			if k := len(u.events); k > 0 && u.events[k-1].At == e.At {
				u.events[k-1].CPU += e.CPU
				u.events[k-1].Cost += e.Cost
			} else {
				u.events = append(u.events, e)
				window = append(window, windowMark{n, e.At})
			}
			u.cpu += e.CPU
			u.cost += e.Cost
		}
		users[n] = u
		highest = max(highest, l.Priority)
	}
	slices.SortStableFunc(window, func(a, b windowMark) int { return cmp.Compare(a.at, b.at) })
	jobs := make(map[int64]*liveJob, len(live))
	for _, r := range live { // by price, then FIFO: each user's list comes out in order
		j := &liveJob{ID: r.ID, Owner: r.Owner, Dataset: r.Dataset, OutputDir: r.OutputDir, Command: r.Command,
			Price: r.Price, Cores: r.Cores, BatchSize: r.BatchSize, Waiting: r.Tasks.Waiting, TimeoutS: r.TimeoutS}
		jobs[r.ID] = j
		u := users[r.Owner]
		if u == nil { // a job without a users row (not through the API): default limits
			u = &userState{name: r.Owner, limits: q.cfg.DefaultLimits, dirty: true}
			users[r.Owner] = u
			highest = max(highest, u.limits.Priority)
		}
		if j.Waiting > 0 {
			u.ready = append(u.ready, j)
		}
	}
	q.users, q.jobs, q.window = users, jobs, window
	q.order = fairshare.NewIndex()
	q.order.SetHighest(highest)
	for _, u := range users {
		q.touchLocked(u)
	}
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
	q.slideLocked(now)
	for n, u := range q.users {
		if !u.dirty {
			continue
		}
		us := u.usage()
		rows = append(rows, store.UsageRow{User: n, Usage: us, Priority: fairshare.ComputedPriority(u.limits, us, q.order.Highest())})
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
