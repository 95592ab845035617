package policy

import (
	"math/rand/v2"
	"testing"

	"github.com/harvest-hpc/harvest/cluster"
)

// scanEarliest and scanMinFree are the plain statements: a pass over every
// step from time 0.
func scanEarliest(p *plan, n int, d cluster.Limit) int64 {
	for i := range p.times {
		if p.free[i] < n {
			continue
		}
		j := i + 1
		for j < len(p.times) && p.free[j] >= n {
			j++
		}
		end := never
		if j < len(p.times) {
			end = p.times[j]
		}
		if end == never || addTime(p.times[i], d) <= end {
			return p.times[i]
		}
	}
	return never
}

func scanMinFree(p *plan, s int64, d cluster.Limit) int {
	end := addTime(s, d)
	m := -1
	for i := range p.times {
		next := never
		if i+1 < len(p.times) {
			next = p.times[i+1]
		}
		if next <= s || end != never && p.times[i] >= end {
			continue
		}
		if m < 0 || p.free[i] < m {
			m = p.free[i]
		}
	}
	return m
}

// TestPlanTreeSearchesAsAScan walks random plans as a walk does (searches,
// reservations where they fit, more searches) and checks every search and
// minFree, by the memos or by the tree, against a scan of every step.
func TestPlanTreeSearchesAsAScan(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 34))
	limit := func() cluster.Limit {
		if r.IntN(20) == 0 {
			return cluster.Unlimited
		}
		return cluster.Limit(r.IntN(5000))
	}
	trees := 0
	for round := range 3000 {
		total := 1 + r.IntN(200)
		var ends []freeing
		held := 0
		for range r.IntN(300) {
			n := 1 + r.IntN(8)
			if held+n > total {
				break
			}
			held += n
			ends = append(ends, freeing{after: cluster.Limit(1 + r.IntN(8000)), nodes: n})
		}
		p := newPlan(total-held, ends)
		for range 400 {
			n, d := 1+r.IntN(total+2), limit()
			if r.IntN(3) == 0 {
				// minFree over a window that starts at a step or between two.
				s := int64(r.IntN(9000))
				if got, want := p.minFree(s, d), scanMinFree(&p, s, d); got != want {
					t.Fatalf("round %d: minFree(%d, %v) = %d, a scan says %d (tree %v)", round, s, d, got, want, p.tree.size > 0)
				}
				continue
			}
			want := scanEarliest(&p, n, d)
			if p.tree.size > 0 {
				trees++
			}
			if got := p.earliest(n, d); got != want {
				t.Fatalf("round %d: earliest(%d, %v) = %d, a scan says %d (tree %v)", round, n, d, got, want, p.tree.size > 0)
			}
			if want != never && r.IntN(10) == 0 {
				p.reserve(want, d, n)
			}
		}
	}
	if trees == 0 {
		t.Fatal("no search went by the tree")
	}
}
