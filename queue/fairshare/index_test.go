package fairshare

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
)

// simUser is a user of the reference model: limits, usage, and the cores
// of each waiting task, in the order they are handed out.
type simUser struct {
	name   string
	limits Limits
	usage  Usage
	tasks  []int
}

// fullRecompute is the documented order computed the slow way, as the
// pull did before the index: for every task, every user with work gets
// their ComputedPriority recomputed, and the highest wins (ties: fewer
// tasks in this pull, then the smaller name).
func fullRecompute(users []*simUser, highest float64, want int) []string {
	picked := map[string]int{}
	var out []string
	for len(out) < want {
		var best *simUser
		bestPrio := 0.0
		for _, u := range users {
			if len(u.tasks) == 0 {
				continue
			}
			p := ComputedPriority(u.limits, u.usage, highest)
			if p < 0 {
				continue
			}
			if best == nil || p > bestPrio || (p == bestPrio && (picked[u.name] < picked[best.name] || (picked[u.name] == picked[best.name] && u.name < best.name))) {
				best, bestPrio = u, p
			}
		}
		if best == nil {
			break
		}
		out = append(out, best.name)
		picked[best.name]++
		best.usage.RunningCores += best.tasks[0]
		best.tasks = best.tasks[1:]
	}
	return out
}

// incremental is the same pull through the Index.
func incremental(x *Index, users map[string]*simUser, want int) []string {
	var out []string
	for len(out) < want {
		name, _, ok := x.Next()
		if !ok {
			break
		}
		u := users[name]
		out = append(out, name)
		u.usage.RunningCores += u.tasks[0]
		u.tasks = u.tasks[1:]
		x.Picked(name)
		x.Set(name, u.limits, u.usage, len(u.tasks) > 0)
	}
	x.EndPull()
	return out
}

func randomUser(r *rand.Rand, i int, equal bool) *simUser {
	u := &simUser{name: fmt.Sprintf("u%03d", i), limits: DefaultLimits()}
	if !equal {
		u.limits.Priority = float64(1 + r.IntN(4))
		u.limits.MaxParallelJobs = 1 + r.IntN(40)
		u.usage.RunningCores = r.IntN(u.limits.MaxParallelJobs + 2)
		// Costs across the boost bands (full, ramp, none) and near the quota.
		u.usage.Cost24h = []float64{0, 5e4, 3.5e5, 9e5, 2e6, 9.9e6, 1e7}[r.IntN(7)]
		u.usage.CPUTime24h = u.usage.Cost24h / 2
	}
	for n := r.IntN(30); n > 0; n-- {
		u.tasks = append(u.tasks, 1+r.IntN(3))
	}
	return u
}

func clone(users []*simUser) ([]*simUser, map[string]*simUser) {
	list := make([]*simUser, len(users))
	byName := map[string]*simUser{}
	for i, u := range users {
		c := *u
		c.tasks = slices.Clone(u.tasks)
		list[i], byName[u.name] = &c, &c
	}
	return list, byName
}

func TestIndexOrderEqualsAFullRecompute(t *testing.T) {
	for seed := uint64(1); seed <= 300; seed++ {
		r := rand.New(rand.NewPCG(seed, 7))
		equal := seed%3 == 0 // many exact ties
		n := 1 + r.IntN(60)
		users := make([]*simUser, n)
		highest := 0.0
		for i := range users {
			users[i] = randomUser(r, i, equal)
			highest = max(highest, users[i].limits.Priority)
		}
		ref, _ := clone(users)
		_, inc := clone(users)
		x := NewIndex()
		x.SetHighest(highest)
		for _, u := range inc {
			x.Set(u.name, u.limits, u.usage, len(u.tasks) > 0)
		}
		for pull := 0; pull < 6; pull++ {
			want := 1 + r.IntN(80)
			got, exp := incremental(x, inc, want), fullRecompute(ref, highest, want)
			if !slices.Equal(got, exp) {
				t.Fatalf("seed %d pull %d (%d users, equal=%v): the index handed out\n%v\nthe full recompute\n%v", seed, pull, n, equal, got, exp)
			}
			// Between pulls, some users finish tasks, get usage, change
			// limits (which can move the highest priority), or get work.
			for _, u := range ref {
				if r.IntN(3) != 0 {
					continue
				}
				iu := inc[u.name]
				done := r.IntN(u.usage.RunningCores + 1)
				cost := float64(r.IntN(4)) * 1e5
				u.usage.RunningCores -= done
				u.usage.Cost24h += cost
				u.usage.CPUTime24h += cost / 2
				if r.IntN(5) == 0 {
					u.limits.Priority = float64(1 + r.IntN(5))
				}
				if r.IntN(4) == 0 {
					u.tasks = append(u.tasks, 1, 2)
				}
				iu.usage, iu.limits, iu.tasks = u.usage, u.limits, slices.Clone(u.tasks)
				x.Set(u.name, iu.limits, iu.usage, len(iu.tasks) > 0)
			}
			highest = 0
			for _, u := range ref {
				highest = max(highest, u.limits.Priority)
			}
			x.SetHighest(highest)
		}
	}
}

func TestIndexLeavesOutUsersOverQuotaOrWithoutWork(t *testing.T) {
	x := NewIndex()
	x.SetHighest(1)
	l := DefaultLimits()
	x.Set("capped", l, Usage{RunningCores: l.MaxParallelJobs}, true)
	x.Set("idle", l, Usage{}, false)
	if _, _, ok := x.Next(); ok || x.Len() != 0 {
		t.Fatalf("a user over quota or without work is in the order (%d users)", x.Len())
	}
	x.Set("capped", l, Usage{RunningCores: l.MaxParallelJobs - 1}, true)
	if name, p, ok := x.Next(); !ok || name != "capped" || p != ComputedPriority(l, Usage{RunningCores: l.MaxParallelJobs - 1}, 1) {
		t.Fatalf("next %q %v %v, want capped back under quota", name, p, ok)
	}
	x.Remove("capped")
	if x.Len() != 0 {
		t.Fatal("a removed user is still in the order")
	}
}

// BenchmarkIndexPull1000Tasks10kUsers times the ordering of one 1,000-task
// pull among 10,000 users with work (the plan only, no database).
func BenchmarkIndexPull1000Tasks10kUsers(b *testing.B) {
	r := rand.New(rand.NewPCG(1, 1))
	x := NewIndex()
	x.SetHighest(4)
	users := map[string]*simUser{}
	for i := 0; i < 10_000; i++ {
		u := randomUser(r, i, false)
		u.limits.MaxParallelJobs = 1 << 20
		users[u.name] = u
		x.Set(u.name, u.limits, u.usage, true)
	}
	for b.Loop() {
		for i := 0; i < 1000; i++ {
			name, _, _ := x.Next()
			u := users[name]
			u.usage.RunningCores++
			x.Picked(name)
			x.Set(name, u.limits, u.usage, true)
		}
		x.EndPull()
	}
}
