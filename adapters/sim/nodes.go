package sim

import "math/bits"

// Nodes with cores, shared as SLURM's select/cons_tres shares them. The
// scheduler's plan (profile) counts free cores; which node a job's cores
// are on matters for the pilots, which take whole idle nodes only, and for
// the nodes a job shows in snapshots. cons_tres (_eval_nodes, equal node
// weights) places a job that fits in one node on the available node with
// the fewest free cores that still fits it (best fit), and a job that
// does not on nodes in index order, taking what each has free; any job of
// P cores therefore starts wherever P cores are free in all, so the plan
// in cores decides when a job starts and placement only where. (cons_tres
// first picks a set of consecutive available nodes, the smallest that is
// large enough: this index ignores node contiguity, which topology-less
// clusters do not need.)
//
// With one core per node this is the whole-node model: every node is idle
// or full, and a job of n cores takes n idle nodes.

// share is the cores a job holds on one node.
type share struct {
	node, cores int32
}

// nodeIndex is the free cores of every node, with the nodes indexed by
// their free cores (a bitset per count) so that best fit, the lowest idle
// node and the nodes in index order are found without a walk of every
// node.
type nodeIndex struct {
	cores  int
	free   []int32
	byFree [][]uint64 // byFree[k]: the nodes with k free cores
	count  []int      // count[k]: how many nodes have k free cores
	some   []uint64   // the nodes with any free core
}

func newNodeIndex(nodes, cores int) *nodeIndex {
	words := (nodes + 63) / 64
	x := &nodeIndex{cores: cores, free: make([]int32, nodes), byFree: make([][]uint64, cores+1), count: make([]int, cores+1), some: make([]uint64, words)}
	for k := range x.byFree {
		x.byFree[k] = make([]uint64, words)
	}
	for n := range nodes {
		x.free[n] = int32(cores)
		x.byFree[cores][n/64] |= 1 << (n % 64)
		x.some[n/64] |= 1 << (n % 64)
	}
	x.count[cores] = nodes
	return x
}

// idle is the number of wholly idle nodes.
func (x *nodeIndex) idle() int { return x.count[x.cores] }

// set moves node n to k free cores.
func (x *nodeIndex) set(n int, k int32) {
	old := x.free[n]
	w, b := n/64, uint64(1)<<(n%64)
	x.byFree[old][w] &^= b
	x.count[old]--
	x.byFree[k][w] |= b
	x.count[k]++
	x.free[n] = k
	if k > 0 {
		x.some[w] |= b
	} else {
		x.some[w] &^= b
	}
}

// lowest is the lowest node in set s at or after node from, or -1.
func lowest(s []uint64, from int) int {
	for w := from / 64; w < len(s); w++ {
		m := s[w]
		if w == from/64 {
			m &= ^uint64(0) << (from % 64)
		}
		if m != 0 {
			return w*64 + bits.TrailingZeros64(m)
		}
	}
	return -1
}

// place takes p cores (at most the free ones: the caller checked) and
// appends where to out: best fit on one node if one has p free, else nodes
// in index order. whole: p is a whole node that must be idle (a pilot);
// the caller checked that one is.
func (x *nodeIndex) place(out []share, p int, whole bool) []share {
	if whole {
		n := lowest(x.byFree[x.cores], 0)
		x.set(n, 0)
		return append(out, share{node: int32(n), cores: int32(x.cores)})
	}
	for k := p; k <= x.cores; k++ {
		if x.count[k] > 0 {
			n := lowest(x.byFree[k], 0)
			x.set(n, int32(k-p))
			return append(out, share{node: int32(n), cores: int32(p)})
		}
	}
	for n := lowest(x.some, 0); p > 0 && n >= 0; n = lowest(x.some, n+1) {
		t := min(int32(p), x.free[n])
		x.set(n, x.free[n]-t)
		out = append(out, share{node: int32(n), cores: t})
		p -= int(t)
	}
	return out
}

// release gives back the cores of an allocation.
func (x *nodeIndex) release(a []share) {
	for _, s := range a {
		x.set(int(s.node), x.free[s.node]+s.cores)
	}
}
