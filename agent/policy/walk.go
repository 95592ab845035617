package policy

import (
	"math"
	"slices"
	"strings"

	"github.com/harvest-hpc/harvest/cluster"
)

// The queue walk: the pending foreign jobs in the batch system's order,
// each given the earliest start the free nodes over time allow, as a
// backfill scheduler does (SLURM's sched/backfill: a job starts now if it
// fits for its whole limit around the reservations of the jobs before it;
// a job that cannot start now gets a reservation at its earliest start, up
// to Config.Reservations jobs). The walk runs twice:
//
//   - the ideal view: the pilots above the floor gone (released when
//     polling, preempted in the preemption modes), which is what the
//     cluster would do without harvesting: every job it starts now must
//     start now;
//   - the batch system's view: the pilots there, each holding its node
//     until its limit, which is what the batch system does. A job the
//     ideal view starts and this one does not is held back by pilots, on
//     its nodes or only in the plan (a pilot with a long limit pushes a
//     reservation later, and the scheduler then keeps nodes for another
//     job instead).
//
// One round releases the fewest pilots, in release order, that make the
// batch system's view start every job the ideal view starts: a burst of N
// jobs gets its nodes in one round, not in N.

// walkDepth bounds the pending jobs one walk places, as SLURM's
// bf_max_job_test bounds its backfill pass (500 by default; the test
// cluster sets 1000): jobs deeper in the queue get no reservation there
// either, and a 10,000-job queue stays a sub-second round.
const walkDepth = 1000

// never is a start or an end that does not come.
const never = int64(math.MaxInt64)

// plan is the free nodes over time, a step function: free[i] nodes from
// times[i] (seconds from now) to times[i+1]. times[0] is 0.
type plan struct {
	times []int64
	free  []int
	// fits maps a node count n to a time before which no step has n
	// free (the first such step the last search for n found), and starts
	// n nodes for d to the start the last search for them returned. Steps
	// only lose free nodes during a walk (reserve), so both stay lower
	// bounds and the next search starts there, not at time 0 (a 10,000-job
	// queue searched the same full prefix again for every job).
	fits   map[int]int64
	starts map[span]int64
	// asked counts the searches since the plan last changed; a plan
	// searched often without a change (a walk past its reservations, or a
	// finished walk that unreservedNeed reads) is searched in tree, built
	// for its steps as they are.
	asked int
	tree  stepTree
}

// treeAfter is how many searches of an unchanged plan go by before the
// plan builds its tree (a build costs about two scans of every step).
const treeAfter = 4

// changed notes a change of the steps: the tree no longer holds.
func (p *plan) changed() {
	p.asked, p.tree.size = 0, 0
}

// span is n nodes for d.
type span struct {
	n int
	d cluster.Limit
}

func newPlan(free int, ends []freeing) plan {
	slices.SortFunc(ends, func(a, b freeing) int { return compareLimit(a.after, b.after) })
	return sortedPlan(free, ends)
}

// sortedPlan is newPlan of ends already sorted by when they free their
// nodes (the plan depends on the groups, not on their order).
func sortedPlan(free int, ends []freeing) plan {
	var p plan
	p.fill(free, ends)
	return p
}

// fill makes p sortedPlan(free, ends) in p's own arrays (and its search
// memos emptied): the probe walks of releaseFor reuse one plan.
func (p *plan) fill(free int, ends []freeing) {
	if cap(p.times) < len(ends)+1 {
		p.times, p.free = make([]int64, 0, len(ends)+1), make([]int, 0, len(ends)+1)
	}
	p.times = append(p.times[:0], 0)
	p.free = append(p.free[:0], free)
	p.changed()
	if p.fits != nil {
		clear(p.fits)
		clear(p.starts)
	}
	for _, e := range ends {
		if e.after.IsUnlimited() {
			break
		}
		t := max(int64(e.after), 0)
		i := p.split(t)
		for k := i; k < len(p.times); k++ {
			p.free[k] += e.nodes
		}
	}
}

// split makes t a breakpoint and returns its index.
func (p *plan) split(t int64) int {
	i, found := slices.BinarySearch(p.times, t)
	if found {
		return i
	}
	p.times = slices.Insert(p.times, i, t)
	p.free = slices.Insert(p.free, i, p.free[i-1])
	p.changed()
	return i
}

func addTime(t int64, d cluster.Limit) int64 {
	if d.IsUnlimited() || t == never {
		return never
	}
	return t + int64(d)
}

// earliest is the first time n nodes are free for d: one pass over the
// steps, following the current run of steps with n free.
func (p *plan) earliest(n int, d cluster.Limit) int64 {
	if p.searchTree() {
		return p.earliestInTree(n, d)
	}
	if p.fits == nil {
		// Made on first use: most of a round's walks place few jobs.
		p.fits, p.starts = map[int]int64{}, map[span]int64{}
	}
	start := -1
	key := span{n, d}
	from, _ := slices.BinarySearch(p.times, max(p.fits[n], p.starts[key]))
	// The first step with n free tells fits only if the search starts at
	// its bound (starts' may lie beyond: longer spans start later).
	first := p.fits[n] >= p.starts[key]
	for i := from; i < len(p.times); i++ {
		if p.free[i] < n {
			start = -1
			continue
		}
		if first {
			p.fits[n], first = p.times[i], false
		}
		if start < 0 {
			start = i
		}
		end := never
		if i+1 < len(p.times) {
			end = p.times[i+1]
		}
		if end == never || addTime(p.times[start], d) <= end {
			p.starts[key] = p.times[start]
			return p.times[start]
		}
	}
	if first {
		p.fits[n] = never // no step has n free, nor will
	}
	p.starts[key] = never
	return never
}

// searchTree reports whether this search goes by the tree, building it
// when the plan has been searched treeAfter times without a change.
func (p *plan) searchTree() bool {
	if p.tree.size > 0 {
		return true
	}
	if p.asked++; p.asked < treeAfter || len(p.times) < 2*treeAfter {
		return false
	}
	p.tree.build(p.free)
	return true
}

// earliestInTree is earliest by p's tree: the first run of steps with n
// free from time 0 (the memos' bounds are not needed) that lasts d.
func (p *plan) earliestInTree(n int, d cluster.Limit) int64 {
	for i := 0; ; {
		if i = p.tree.firstAtLeast(i, n); i < 0 {
			return never
		}
		j := p.tree.firstBelow(i+1, n)
		end := never
		if j >= 0 {
			end = p.times[j]
		}
		if end == never || addTime(p.times[i], d) <= end {
			return p.times[i]
		}
		i = j
	}
}

// reserve takes n nodes on [s, s+d).
func (p *plan) reserve(s int64, d cluster.Limit, n int) {
	i := p.split(s)
	j := len(p.times)
	if end := addTime(s, d); end != never {
		j = p.split(end)
	}
	for k := i; k < j; k++ {
		p.free[k] -= n
	}
	p.changed()
}

// firstShort is the first time fewer than n nodes are free (never if
// none): how long n new pilots may hold nodes without delaying anybody.
func (p *plan) firstShort(n int) int64 {
	for i := range p.times {
		if p.free[i] < n {
			return p.times[i]
		}
	}
	return never
}

// walked is the outcome of one walk.
type walked struct {
	plan plan
	// starts are the indices (in the snapshot's jobs) of the pending
	// foreign jobs that start now, in order; nodes is their total.
	starts []int
	nodes  int
	// topAt is J_top's start in the walk (never if it has none).
	topAt int64
	// at maps the foreign jobs placed (index in the snapshot's jobs) to
	// their starts, now or reserved.
	at map[int]int64
}

// walkQueue places the pending foreign jobs, in the snapshot's order, in
// plan p. With queued, the queued pilots not in gone are placed too, in
// their places in the order (they are pending jobs to the batch system:
// one that does not fit its plan stays queued and takes no node).
func (v *view) walkQueue(p plan, queued bool, gone []bool) walked {
	w := walked{plan: p, at: map[int]int64{}}
	v.walkInto(&w, queued, gone)
	return w
}

// walkInto is walkQueue on w.plan, with w's start list and map emptied
// and reused.
func (v *view) walkInto(w *walked, queued bool, gone []bool) {
	w.starts, w.nodes, w.topAt = w.starts[:0], 0, never
	clear(w.at)
	reserved, placed := 0, 0
	for _, i := range v.walkBase().pending {
		j := &v.s.Jobs[i]
		if j.Pilot && (!queued || gone != nil && gone[i] || v.cfg.Preemption && j.Preemptible) {
			continue
		}
		if placed++; placed > walkDepth {
			break
		}
		canReserve := v.cfg.Reservations == 0 || reserved < v.cfg.Reservations
		if j.Nodes > w.plan.free[0] && !canReserve {
			continue
		}
		s := w.plan.earliest(j.Nodes, j.TimeLimit)
		if i == v.top {
			w.topAt = s
		}
		if !j.Pilot && (s == 0 || s != never && canReserve) {
			w.at[i] = s
		}
		switch {
		case s == 0:
			w.plan.reserve(0, j.TimeLimit, j.Nodes)
			if !j.Pilot {
				w.starts = append(w.starts, i)
				w.nodes += j.Nodes
			}
		case s != never && canReserve:
			w.plan.reserve(s, j.TimeLimit, j.Nodes)
			reserved++
		}
	}
}

// batch is the batch system's walk with the pilots in gone (by index in
// the snapshot's jobs; nil: none) released.
func (v *view) batch(gone []bool) walked {
	if gone == nil {
		// The same walk serves releaseFor, holeLimit and Steady.
		if v.batch0 == nil {
			var w walked
			if buf := v.buf; buf != nil {
				v.batchFree(nil, &buf.batch)
				buf.batchAt = emptied(buf.batchAt)
				w = walked{plan: buf.batch, at: buf.batchAt}
				v.walkInto(&w, true, nil)
				buf.batch = w.plan // the arrays as the walk grew them
			} else {
				w = v.walkQueue(v.batchPlan(nil), true, nil)
			}
			v.batch0 = &w
		}
		return *v.batch0
	}
	// releaseFor's searches walk a dozen release sets a round and read
	// each walk only until the next: one walk's arrays and maps serve
	// them all (fresh ones were a twentieth of a simulated month). The
	// result is valid until the next call with gone != nil.
	b := v.walkBase()
	if b.probe.at == nil {
		b.probe.at = map[int]int64{}
	}
	v.batchFree(gone, &b.probe.plan)
	v.walkInto(&b.probe, true, gone)
	return b.probe
}

// ideal is the walk with the pilots above the floor gone.
func (v *view) ideal() walked {
	if v.ideal0 == nil {
		var w walked
		if buf := v.buf; buf != nil {
			v.idealInto(&buf.ideal)
			buf.idealAt = emptied(buf.idealAt)
			w = walked{plan: buf.ideal, at: buf.idealAt}
			v.walkInto(&w, false, nil)
			buf.ideal = w.plan
		} else {
			w = v.walkQueue(v.idealPlan(), false, nil)
		}
		v.ideal0 = &w
	}
	return *v.ideal0
}

// walkBase is what every walk of a round reads of the snapshot, derived
// once per round rather than once per walk (releaseFor's searches walk
// the queue a dozen times a round): which pilots are the floor's, the
// pending jobs, and the running jobs and pilots that hold nodes in the
// batch system's view, sorted by when they free them.
type walkBase struct {
	floor   []bool // by index in the snapshot's jobs
	pending []int  // indices of the pending jobs, in the queue's order
	// held: the running foreign jobs and the running pilots outside the
	// preemptible tier (in preemption mode), in the order they free their
	// nodes; job is the index of a pilot, -1 for a foreign job.
	held []heldBy
	// tierFree is the nodes of the running pilots of the preemptible
	// tier: free in every view.
	tierFree int
	ends     []freeing // scratch for batchPlan
	probe    walked    // scratch for batch(gone), gone != nil
	noneP    plan      // the arrays of none
	// With no ledger, a plan with pilots released is the plan with none
	// released (none) plus their nodes until their ends (releasedPlan):
	// step is each holder's step in none (-1: unlimited), count the
	// holders ending at each step, add and left scratch by step.
	none        *plan
	step        []int32
	count, left []int32
	add         []int
}

type heldBy struct {
	freeing
	job int
	rem cluster.Limit // the remaining limit (freeing.after is overdue(rem))
}

func (v *view) walkBase() *walkBase {
	if v.base != nil {
		return v.base
	}
	s := v.s
	var b *walkBase
	if v.buf != nil {
		// Last round's arrays; the scratch (ends, probe, noneP) is
		// overwritten before it is read.
		b = &v.buf.base
		b.floor = bools(b.floor, len(s.Jobs))
		b.pending, b.held, b.tierFree, b.none = b.pending[:0], b.held[:0], 0, nil
	} else {
		b = &walkBase{floor: make([]bool, len(s.Jobs))}
	}
	for _, i := range v.hold.floorIdx {
		b.floor[i] = true
	}
	for i := range s.Jobs {
		j := &s.Jobs[i]
		switch {
		case j.State == cluster.Pending:
			b.pending = append(b.pending, i)
		case !j.Pilot:
			b.held = append(b.held, heldBy{freeing{after: overdue(j.Remaining()), nodes: j.Nodes}, -1, j.Remaining()})
		case v.cfg.Preemption && j.Preemptible:
			b.tierFree += j.Nodes
		default:
			b.held = append(b.held, heldBy{freeing{after: overdue(j.Remaining()), nodes: j.Nodes}, i, j.Remaining()})
		}
	}
	// By remaining limit, which also orders them by after (overdue only
	// lifts 0 to 1): the plans and maxTime's walk read the same order.
	slices.SortFunc(b.held, func(x, y heldBy) int { return compareLimit(x.rem, y.rem) })
	v.base = b
	return b
}

// idealPlan and batchPlan build the free nodes over time with the pilots
// as a view sees them. The ideal view (idealPlan): the pilots above the
// floor are gone (their running nodes free now, their queued and ledger
// pilots take nothing; queued and ledger floor pilots take idle nodes
// first). The batch system's view (batchPlan): the pilots in gone are
// released and the rest hold their nodes until their limits, ledger ones
// taking idle nodes first (queued ones are placed by the walk). Running
// preemptible pilots count as free in preemption mode in either view (the
// batch system preempts them for any job above their tier), and queued
// ones never compete for a node.
func (v *view) idealPlan() plan {
	var p plan
	v.idealInto(&p)
	return p
}

// idealInto is idealPlan in p's arrays.
func (v *view) idealInto(p *plan) {
	b := v.walkBase()
	free := v.s.IdleNodes + b.tierFree
	var takes []freeing
	take := func(n int, after cluster.Limit) {
		n = min(n, free)
		if n > 0 {
			free -= n
			takes = append(takes, freeing{after: after, nodes: n})
		}
	}
	ends := b.ends[:0]
	for _, h := range b.held {
		if h.job >= 0 && !b.floor[h.job] {
			free += h.nodes // above the floor: gone
			continue
		}
		ends = append(ends, h.freeing)
	}
	if len(v.hold.floorIdx) > 0 {
		// Queued floor pilots take idle nodes in the snapshot's order, the
		// running pilots above the floor before them in it already gone.
		free = v.s.IdleNodes
		for i := range v.s.Jobs {
			j := &v.s.Jobs[i]
			if !j.Pilot {
				continue
			}
			present := !(v.cfg.Preemption && j.Preemptible) && b.floor[i]
			switch {
			case j.State == cluster.Running && !present:
				free += j.Nodes
			case j.State == cluster.Pending && present:
				take(j.Nodes, j.TimeLimit)
			}
		}
	}
	v.ledgerTakes(v.hold.floorLedger, take)
	ends = mergeEnds(ends, takes)
	b.ends = ends
	p.fill(free, ends)
}

// mergeEnds returns the sorted ends with the few more merged in (sorted
// here), in ends' array when it has room.
func mergeEnds(ends, more []freeing) []freeing {
	if len(more) == 0 {
		return ends
	}
	slices.SortFunc(more, func(a, b freeing) int { return compareLimit(a.after, b.after) })
	n := len(ends)
	ends = slices.Grow(ends, len(more))[:n+len(more)]
	// From the back, so that nothing is overwritten before it is read.
	x, y := n-1, len(more)-1
	for k := len(ends) - 1; y >= 0; k-- {
		if x >= 0 && compareLimit(ends[x].after, more[y].after) > 0 {
			ends[k] = ends[x]
			x--
		} else {
			ends[k] = more[y]
			y--
		}
	}
	return ends
}

// ledgerTakes lets the first n ledger pilots (outside the preemptible
// tier in preemption mode) take idle nodes, each until its limit runs
// out counted from its submission.
func (v *view) ledgerTakes(n int, take func(int, cluster.Limit)) {
	for _, u := range v.in.Upcoming {
		if n <= 0 {
			break
		}
		if v.cfg.Preemption && u.Preemptible {
			continue
		}
		after := u.TimeLimit
		if !after.IsUnlimited() {
			after = cluster.Limit(max(0, int64(after)-max(0, v.s.Now-u.SubmittedAt)))
		}
		k := min(u.Count, n)
		n -= k
		take(k, after)
	}
}

func (v *view) batchPlan(gone []bool) plan {
	var p plan
	v.batchFree(gone, &p)
	return p
}

// batchFree is batchPlan in p's arrays.
func (v *view) batchFree(gone []bool, p *plan) {
	b := v.walkBase()
	if gone != nil && len(v.in.Upcoming) == 0 {
		v.releasedPlan(gone, p)
		return
	}
	free := v.s.IdleNodes + b.tierFree
	ends := b.ends[:0]
	for _, h := range b.held {
		if h.job >= 0 && gone != nil && gone[h.job] {
			free += h.nodes
			continue
		}
		ends = append(ends, h.freeing)
	}
	// The ledger's pilots take idle nodes after the released ones freed
	// theirs; they are few, and merged into the sorted holders.
	var led []freeing
	v.ledgerTakes(int(^uint(0)>>1), func(n int, after cluster.Limit) {
		if n = min(n, free); n > 0 {
			free -= n
			led = append(led, freeing{after: after, nodes: n})
		}
	})
	ends = mergeEnds(ends, led)
	b.ends = ends
	p.fill(free, ends)
}

// releasedPlan is batchFree(gone, p) for a round without a ledger: the
// plan with no pilot released, each released pilot's nodes added from
// time 0 to its end, and the steps that only released pilots ended at
// dropped. One pass over the holders and one over the steps, no sort and
// no search: releaseFor's bisection builds a dozen of these a round.
func (v *view) releasedPlan(gone []bool, p *plan) {
	b := v.walkBase()
	if b.none == nil {
		v.batchFree(nil, &b.noneP)
		none := &b.noneP
		b.none = none
		b.step = int32s(b.step, len(b.held))
		b.count = int32s(b.count, len(none.times))
		clear(b.count)
		for k, h := range b.held {
			if h.after.IsUnlimited() {
				b.step[k] = -1
				continue
			}
			i, _ := slices.BinarySearch(none.times, max(int64(h.after), 0))
			b.step[k] = int32(i)
			b.count[i]++
		}
		b.left = int32s(b.left, len(none.times))
		b.add = ints(b.add, len(none.times))
	}
	none := b.none
	copy(b.left, b.count)
	clear(b.add)
	always := 0 // nodes of released pilots that never end
	for k, h := range b.held {
		if h.job < 0 || !gone[h.job] {
			continue
		}
		if i := b.step[k]; i < 0 {
			always += h.nodes
		} else {
			b.add[i] += h.nodes
			b.left[i]--
		}
	}
	// A pilot ending at step i frees its nodes before i when released.
	n := len(none.times)
	p.times = append(p.times[:0], none.times...)
	p.free = append(p.free[:0], none.free...)
	later := always
	for i := n - 1; i >= 0; i-- {
		p.free[i] += later
		later += b.add[i]
	}
	k := 1
	for i := 1; i < n; i++ {
		if b.left[i] > 0 {
			p.times[k], p.free[k] = p.times[i], p.free[i]
			k++
		}
	}
	p.times, p.free = p.times[:k], p.free[:k]
	p.changed()
	if p.fits != nil {
		clear(p.fits)
		clear(p.starts)
	}
}

// overdue reads a running job past its limit as ending in a second, not
// now: its nodes are not idle yet.
func overdue(r cluster.Limit) cluster.Limit {
	if r == 0 {
		return 1
	}
	return r
}

// startsAll reports whether every job of want is among got's starts.
func startsAll(got walked, want []int) bool {
	k := 0
	for _, i := range got.starts {
		if k < len(want) && want[k] == i {
			k++
		}
	}
	return k == len(want)
}

// releaseFor returns the pilots to cancel so that the batch system does
// now what the ideal walk does.
//
// First, so that it starts every job the ideal walk starts: the shortest
// prefix of the releasable pilots (above Keep, ours to release) in release
// order, found by bisection (more pilots gone never starts fewer jobs
// now), or all of them when even that is not enough (enough false).
//
// Then, so that it plans no job earlier than the ideal walk: pilots whose
// long limits push J_top's reservation later let the batch system
// backfill jobs that then delay J_top for their whole limits (on KTH-SP2, 48-84-node jobs started up to 18 h late that way,
// never "blocked" by a pilot: a 60 h job took the nodes of pilots that
// ended a minute before the next round). The pilots with the longest
// remaining limits go first, as few as make the plans agree; none if no
// release can. Their nodes are refilled with pilots sized to the plan.
//
// plan counts the pilots released for the second reason. batchStarts:
// the batch system starts the ideal walk's jobs without a release.
func (v *view) releaseFor(ideal walked) (ids []string, batchStarts, enough bool, plan int) {
	b := v.batch(nil)
	batchStarts, enough = startsAll(b, ideal.starts), true
	// With Config.Shrink the pilots' ends are pulled in instead (see
	// withShrink): only the starts matter here.
	planned := v.cfg.Shrink || v.agrees(b, ideal)
	if batchStarts && planned {
		return nil, true, true, 0
	}
	cands := v.releasable()
	gone := v.emptySet(func(b *Buffers) *[]bool { return &b.gone })
	if !batchStarts {
		k, ok := shortest(len(cands), func(k int) bool {
			return startsAll(v.batch(v.with(gone, cands[:k])), ideal.starts)
		})
		mark(gone, cands[:k])
		enough = ok
	}
	if enough && !planned {
		var rest []int
		for _, i := range cands {
			if !gone[i] {
				rest = append(rest, i)
			}
		}
		jobs := v.s.Jobs
		slices.SortStableFunc(rest, func(a, b int) int { return -compareLimit(jobs[a].Remaining(), jobs[b].Remaining()) })
		agree := func(k int) bool {
			w := v.batch(v.with(gone, rest[:k]))
			return startsAll(w, ideal.starts) && v.agrees(w, ideal)
		}
		if !agree(0) {
			if k, ok := shortest(len(rest), agree); ok {
				mark(gone, rest[:k])
				plan = k
			}
		}
	}
	for _, i := range cands {
		if gone[i] {
			ids = append(ids, v.s.Jobs[i].ID)
		}
	}
	return ids, batchStarts, enough, plan
}

// shortest returns the smallest k in [1, n] with ok(k), by bisection (ok
// is taken to be monotone), and whether ok(n) holds at all.
func shortest(n int, ok func(int) bool) (int, bool) {
	if n == 0 || !ok(n) {
		return n, false
	}
	lo, hi := 1, n
	for lo < hi {
		if mid := (lo + hi) / 2; ok(mid) {
			hi = mid
		} else {
			lo = mid + 1
		}
	}
	return hi, true
}

// with returns gone plus the pilots of more (indices in the snapshot's
// jobs), as a new set; with Buffers, in their probe array, valid until the
// next call (gone must not be that array).
func (v *view) with(gone []bool, more []int) []bool {
	m := v.emptySet(func(b *Buffers) *[]bool { return &b.probe })
	copy(m, gone)
	mark(m, more)
	return m
}

// emptySet returns an empty set of the snapshot's jobs (by index): with
// Buffers, in the array of theirs that slot picks.
func (v *view) emptySet(slot func(*Buffers) *[]bool) []bool {
	if v.buf == nil {
		return make([]bool, len(v.s.Jobs))
	}
	a := slot(v.buf)
	*a = bools(*a, len(v.s.Jobs))
	return *a
}

// mark adds the pilots of more to the set gone.
func mark(gone []bool, more []int) {
	for _, i := range more {
		gone[i] = true
	}
}

// emptied returns m emptied, or a new map if m is nil.
func emptied(m map[int]int64) map[int]int64 {
	if m == nil {
		return map[int]int64{}
	}
	clear(m)
	return m
}

// agrees reports whether the batch system's walk w plans J_top no later
// than the ideal one while other jobs wait behind it, and no foreign job
// earlier. Pilots only take nodes, so a job gets an earlier start with
// them only because they pushed a reservation ahead of it later; and with
// J_top planned later, any job behind it may start the moment a pilot or a
// job ends (before the next round) and delay J_top for its whole limit.
func (v *view) agrees(w, ideal walked) bool {
	if w.topAt > ideal.topAt && v.behindTop() {
		return false
	}
	for i, t := range w.at {
		if it, ok := ideal.at[i]; !ok || t < it {
			return false
		}
	}
	return true
}

// releasable returns the visible pilots we may release for a waiting job,
// in release order: all but the floor, and in preemption mode only those
// outside the preemptible tier.
// The pilots are indices in the snapshot's jobs.
func (v *view) releasable() []int {
	if !v.relDone { // releaseFor and releaseAhead both ask
		var out []int
		var keys []releaseKey
		if v.buf != nil {
			out, keys = v.buf.rel[:0], v.buf.keys
		}
		out, keys = v.releaseOrder(out, keys)
		if v.buf != nil {
			v.buf.rel, v.buf.keys = out, keys
		}
		v.rel0, v.relDone = out, true
	}
	return v.rel0
}

// releaseOrder is releasable appended to out, sorted with keys' array.
func (v *view) releaseOrder(out []int, keys []releaseKey) ([]int, []releaseKey) {
	floor := v.walkBase().floor
	jobs := v.s.Jobs
	for i := range jobs {
		if p := &jobs[i]; p.Pilot && !floor[i] && !(v.cfg.Preemption && p.Preemptible) {
			out = append(out, i)
		}
	}
	keys, ok := releaseKeys(jobs, out, keys)
	if ok {
		slices.SortFunc(keys, func(a, b releaseKey) int {
			switch {
			case a.tier != b.tier:
				return a.tier - b.tier
			case a.rem != b.rem:
				return compareLimit(a.rem, b.rem)
			case a.master != b.master:
				if a.master {
					return 1
				}
				return -1
			case a.id > b.id:
				return -1 // newest first
			}
			return 1 // ids differ
		})
		for k, key := range keys {
			out[k] = key.job
		}
		return out, keys
	}
	slices.SortFunc(out, func(a, b int) int { return compareReleaseRef(&jobs[a], &jobs[b]) })
	return out, keys
}

// releaseKey is compareReleaseRef's key of a pilot whose id is a number
// after a prefix all the pilots share (the simulator's "pilot-N",
// SLURM's plain numbers): sorting these compares no strings (the sort was
// a twentieth of a 5,000-node month).
type releaseKey struct {
	tier   int
	rem    cluster.Limit
	master bool
	id     uint64
	job    int
}

// releaseKeys returns the keys of the pilots idx, or false unless every
// id is one prefix without digits and a number of at most 18 digits
// without a leading zero (compareIDs orders those by the number, and
// distinct ids get distinct numbers), in buf's array when it has room (buf
// itself with false).
func releaseKeys(jobs []cluster.Job, idx []int, buf []releaseKey) ([]releaseKey, bool) {
	if len(idx) == 0 {
		return buf, false
	}
	first := jobs[idx[0]].ID
	prefix := first[:len(first)-len(strings.TrimLeftFunc(first, func(r rune) bool { return r < '0' || r > '9' }))]
	keys := buf[:0]
	if cap(keys) < len(idx) {
		keys = make([]releaseKey, len(idx))
	}
	keys = keys[:len(idx)]
	for k, i := range idx {
		p := &jobs[i]
		if !strings.HasPrefix(p.ID, prefix) {
			return buf, false
		}
		id := p.ID[len(prefix):]
		if len(id) == 0 || len(id) > 18 || id[0] == '0' && len(id) > 1 {
			return buf, false
		}
		var n uint64
		for c := range len(id) {
			if !isDigit(id[c]) {
				return buf, false
			}
			n = n*10 + uint64(id[c]-'0')
		}
		keys[k] = releaseKey{releaseTierRef(p), p.Remaining(), p.Master, n, i}
	}
	return keys, true
}

// behindTop reports whether a pending foreign job waits behind J_top.
func (v *view) behindTop() bool {
	for i := v.top + 1; i < len(v.s.Jobs); i++ {
		if j := &v.s.Jobs[i]; !j.Pilot && j.State == cluster.Pending {
			return true
		}
	}
	return false
}

// idealNeed is the ideal walk's unreservedNeed for n new pilots, n >= 1.
func (v *view) idealNeed(n int) int64 {
	if v.needN != n {
		w := v.ideal()
		v.need0, v.needN = w.unreservedNeed(v, n), n
	}
	return v.need0
}

// unreservedNeed is the earliest start, in w's plan, of a pending foreign
// job J the walk reached but gave neither a start nor a reservation (the
// batch system backfills such a job the moment its nodes free) that n new
// pilots would make short of nodes; never if none. A pilot that outlives
// that start takes a node J gets at a foreseeable end: the batch system's
// pass in the second of that end starts J before the agent's next round
// can release the pilot, so a job ahead of J takes the nodes the round
// frees and J waits behind it (SDSC-SP2 days 150-180: a 4-node job due at
// a 1-node job's limit, pilots on its three idle nodes, 14.9 late
// job-hours). The plan keeps its reservations: this only shortens new
// pilots, it reserves nothing.
//
// J is skipped when a job K ahead of it in the walk still waits at J's
// start and could not start beside it (K's nodes and J's exceed the
// cluster): backfill starts J only against K's start computed from time
// limits, and once J runs K cannot start until J ends, however early the
// running jobs end; pilots that hold the nodes instead let the agent
// release them for K the round K fits (KTH-SP2 days 60-90: pilots that
// ended at a 64-node job's start handed it the nodes ahead of an 80-node
// one, 5.2 -> 83.3 late job-hours).
func (w *walked) unreservedNeed(v *view, n int) int64 {
	t, placed := never, 0
	type waiting struct {
		at    int64
		nodes int
	}
	var ahead []waiting
	for _, i := range v.walkBase().pending {
		j := &v.s.Jobs[i]
		if j.Pilot {
			continue
		}
		if placed++; placed > walkDepth {
			break
		}
		if at, ok := w.at[i]; ok {
			if at > 0 {
				ahead = append(ahead, waiting{at, j.Nodes})
			}
			continue
		}
		s := w.plan.earliest(j.Nodes, j.TimeLimit)
		if s == never || s == 0 {
			ahead = append(ahead, waiting{never, j.Nodes})
			continue
		}
		ahead = append(ahead, waiting{s, j.Nodes})
		if s >= t || w.plan.minFree(s, j.TimeLimit)-n >= j.Nodes {
			continue
		}
		blocks := false
		for _, k := range ahead[:len(ahead)-1] {
			if k.at > s && k.nodes+j.Nodes > v.s.TotalNodes {
				blocks = true
				break
			}
		}
		if !blocks {
			t = s
		}
	}
	return t
}

// minFree is the fewest nodes free on [s, s+d).
func (p *plan) minFree(s int64, d cluster.Limit) int {
	end := addTime(s, d)
	if p.tree.size > 0 {
		// The steps from the one s falls in to the last before end.
		i, found := slices.BinarySearch(p.times, s)
		if !found {
			i = max(i-1, 0)
		}
		j := len(p.times)
		if end != never {
			j, _ = slices.BinarySearch(p.times, end)
		}
		if i >= j {
			return -1
		}
		return p.tree.least(i, j)
	}
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
