package policy

import "math"

// stepTree holds the least and the most free nodes of every power-of-two
// block of a plan's steps (an implicit segment tree), so that a plan that
// stopped changing answers "the first step from i with at least n free"
// and "the first step from i with fewer than n free" in O(log steps)
// instead of a scan: unreservedNeed searches a walk's final plan once per
// pending job of a deep queue.
type stepTree struct {
	size   int   // leaves, a power of two >= the steps; 0: not built
	lo, hi []int // by node, 1 the root, leaves from size
	steps  int
}

// build makes t the tree of free.
func (t *stepTree) build(free []int) {
	size := 1
	for size < len(free) {
		size *= 2
	}
	if cap(t.lo) < 2*size {
		t.lo, t.hi = make([]int, 2*size), make([]int, 2*size)
	}
	t.lo, t.hi = t.lo[:2*size], t.hi[:2*size]
	t.size, t.steps = size, len(free)
	for i := range size {
		// Padding qualifies for neither search.
		f, g := math.MaxInt, math.MinInt
		if i < len(free) {
			f, g = free[i], free[i]
		}
		t.lo[size+i], t.hi[size+i] = f, g
	}
	for k := size - 1; k >= 1; k-- {
		t.lo[k] = min(t.lo[2*k], t.lo[2*k+1])
		t.hi[k] = max(t.hi[2*k], t.hi[2*k+1])
	}
}

// firstAtLeast is the first step i >= from with at least n free, -1 if none.
func (t *stepTree) firstAtLeast(from, n int) int {
	return t.first(from, func(k int) bool { return t.hi[k] >= n })
}

// firstBelow is the first step i >= from with fewer than n free, -1 if none.
func (t *stepTree) firstBelow(from, n int) int {
	return t.first(from, func(k int) bool { return t.lo[k] < n })
}

// first is the first leaf i >= from whose node has has(node), -1 if none,
// has(k) holding for a node when it holds for one of its leaves.
func (t *stepTree) first(from int, has func(int) bool) int {
	if from >= t.steps {
		return -1
	}
	k := from + t.size
	for !has(k) {
		// To the next block on the right: up while k is a right child.
		for k&1 == 1 {
			k >>= 1
		}
		if k == 0 {
			return -1
		}
		k++
	}
	for k < t.size {
		if k *= 2; !has(k) {
			k++
		}
	}
	if i := k - t.size; i < t.steps {
		return i
	}
	return -1
}

// least is the fewest free over steps [i, j), j > i.
func (t *stepTree) least(i, j int) int {
	m := math.MaxInt
	for l, r := i+t.size, j+t.size; l < r; l, r = l/2, r/2 {
		if l&1 == 1 {
			m = min(m, t.lo[l])
			l++
		}
		if r&1 == 1 {
			r--
			m = min(m, t.lo[r])
		}
	}
	return m
}
