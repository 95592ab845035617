package fairshare

import "container/heap"

// Index keeps the users who have work in intake order, so a pull finds the
// next user in O(log users) instead of recomputing every user's priority
// for every task: a user's computedPriority changes only when their limits
// or usage change (a task handed out or finished, a usage event leaving
// the window) or when the highest baseline priority changes, and each of
// those updates one user (the last one all of them).
//
// The order is exactly the documented one: highest ComputedPriority
// first; between equal priorities, the user who got fewer picks (batches)
// in the current pull, then the smaller name. Users over quota (NoIntake) and
// users without work are not in the order. Not safe for concurrent use.
type Index struct {
	highest float64
	byName  map[string]*indexEntry
	h       entryHeap
	picked  []*indexEntry // entries with picks in the current pull
}

type indexEntry struct {
	name    string
	limits  Limits
	usage   Usage
	hasWork bool
	prio    float64
	picks   int
	at      int // position in the heap, -1 when out of it
}

// NewIndex returns an empty index.
func NewIndex() *Index { return &Index{byName: map[string]*indexEntry{}} }

// Set records a user's limits, usage and whether they have work waiting,
// and moves them to their place (O(log users)).
func (x *Index) Set(name string, l Limits, u Usage, hasWork bool) {
	e := x.byName[name]
	if e == nil {
		e = &indexEntry{name: name, at: -1}
		x.byName[name] = e
	}
	e.limits, e.usage, e.hasWork = l, u, hasWork
	e.prio = ComputedPriority(l, u, x.highest)
	x.place(e)
}

// Remove forgets a user.
func (x *Index) Remove(name string) {
	e := x.byName[name]
	if e == nil {
		return
	}
	if e.at >= 0 {
		heap.Remove(&x.h, e.at)
	}
	delete(x.byName, name)
}

// SetHighest changes the highest baseline priority of any user, which
// every user's priority depends on (O(users)).
func (x *Index) SetHighest(h float64) {
	if h == x.highest {
		return
	}
	x.highest = h
	x.h = x.h[:0]
	for _, e := range x.byName {
		e.prio = ComputedPriority(e.limits, e.usage, h)
		e.at = -1
		if e.eligible() {
			e.at = len(x.h)
			x.h = append(x.h, e)
		}
	}
	heap.Init(&x.h)
}

// Highest is the highest baseline priority the index computes with.
func (x *Index) Highest() float64 { return x.highest }

// Next is the user who gets the next pick, and their priority; ok is false
// when nobody with work is under quota.
func (x *Index) Next() (name string, prio float64, ok bool) {
	if len(x.h) == 0 {
		return "", 0, false
	}
	return x.h[0].name, x.h[0].prio, true
}

// Picked counts a pick (a batch of one job) handed to name in the current
// pull (the tie-break between equal priorities). The caller then Sets the
// user's new usage.
func (x *Index) Picked(name string) {
	e := x.byName[name]
	if e == nil {
		return
	}
	if e.picks == 0 {
		x.picked = append(x.picked, e)
	}
	e.picks++
	x.place(e)
}

// EndPull clears the pull's tie-break counts.
func (x *Index) EndPull() {
	for _, e := range x.picked {
		e.picks = 0
		x.place(e)
	}
	x.picked = x.picked[:0]
}

// Len is the number of users in the order (with work, under quota).
func (x *Index) Len() int { return len(x.h) }

func (e *indexEntry) eligible() bool { return e.hasWork && e.prio >= 0 }

// place puts e where it belongs: in the heap at its key, or out of it.
func (x *Index) place(e *indexEntry) {
	switch {
	case e.eligible() && e.at >= 0:
		heap.Fix(&x.h, e.at)
	case e.eligible():
		heap.Push(&x.h, e)
	case e.at >= 0:
		heap.Remove(&x.h, e.at)
	}
}

// before is the intake order: priority, then fewer picks, then name.
func before(a, b *indexEntry) bool {
	if a.prio != b.prio {
		return a.prio > b.prio
	}
	if a.picks != b.picks {
		return a.picks < b.picks
	}
	return a.name < b.name
}

type entryHeap []*indexEntry

func (h entryHeap) Len() int           { return len(h) }
func (h entryHeap) Less(i, j int) bool { return before(h[i], h[j]) }
func (h entryHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].at, h[j].at = i, j
}
func (h *entryHeap) Push(v any) {
	e := v.(*indexEntry)
	e.at = len(*h)
	*h = append(*h, e)
}
func (h *entryHeap) Pop() any {
	old := *h
	e := old[len(old)-1]
	old[len(old)-1] = nil
	e.at = -1
	*h = old[:len(old)-1]
	return e
}
