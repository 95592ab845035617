package store

import (
	"time"

	"github.com/harvest-hpc/harvest/pilotproto"
)

// chunkBudget is the write-lock time each transaction of a long write (a
// submission's tasks, a cancelled job's, a dropped job's) aims at: well
// under SlowTx, so that the pulls and results queued behind it wait
// little. A fixed row count cannot promise that: 1,000 tasks took 2.5-4 ms
// on this project's 2-core test machine when idle and over 5 ms on the
// same machine running a SLURM mini-cluster (docs/queue.md, "Long
// writes"); killing them took twice as long as inserting them.
const chunkBudget = time.Millisecond

// chunkMin and chunkStart bound the sizer from below and start it: a first
// chunk small enough for any machine, and a floor at which the
// transaction's fixed cost (BEGIN, the commit's WAL frames) still stays
// under a fifth of it.
const (
	chunkMin   = 16
	chunkStart = 64
)

// chunkSizer sizes the transactions of a long write, in rows: it starts
// at chunkStart (or the caller's limit, if lower) and after each
// transaction scales the next one so that it would have held the lock for
// chunkBudget, at most doubling and at least a quarter of the last size,
// between chunkMin and the limit. A transaction the hypervisor stretched
// shrinks the next few, which then grow back: the cost is a few more
// commits, never a long one.
type chunkSizer struct {
	n, max int
	fixed  bool // PostgreSQL: always max
}

// chunks sizes a long write's transactions: on SQLite to about
// chunkBudget of its one write lock each; on PostgreSQL, where a long
// transaction holds no lock that the others wait for (it writes rows of
// its own job), at limit.
func (s *Store) chunks(limit int) *chunkSizer {
	z := newChunkSizer(limit)
	if s.d.pg {
		z.n, z.fixed = z.max, true
	}
	return z
}

func newChunkSizer(limit int) *chunkSizer {
	limit = max(limit, 1)
	return &chunkSizer{n: min(chunkStart, limit), max: limit}
}

// size is how many rows the next transaction should write.
func (z *chunkSizer) size() int { return z.n }

// took records that a transaction of rows rows held the lock for d.
func (z *chunkSizer) took(rows int, d time.Duration) {
	if rows <= 0 || z.fixed {
		return
	}
	want := 2 * z.n
	if d > 0 {
		want = int(float64(rows) * float64(chunkBudget) / float64(d))
	}
	z.n = min(max(want, z.n/4, chunkMin), 2*z.n, z.max) // never under chunkMin unless the limit is
}

// chunkBytes bounds what one write transaction carries where rows differ
// in size: a result's error tail (up to 64 KiB by the API, 2 KiB from the
// worker by default) is stored whole in its entry's exception row. A row
// count alone let 100 results with 64 KiB tails hold the lock over 50 ms
// in one transaction (docs/queue.md, "Long writes").
const chunkBytes = 64 << 10

// rowOverhead is a result's size without its strings, for chunkBytes.
const rowOverhead = 128

// ResultsChunk is how many of rs, from the first, one ApplyResults
// transaction should apply: at most limit, and no more than chunkBytes of
// them, but at least one.
func ResultsChunk(rs []pilotproto.Result, limit int) int {
	n, size := 0, 0
	for n < min(len(rs), max(limit, 1)) {
		size += rowOverhead + len(rs[n].ErrorTail) + len(rs[n].Pilot)
		if n > 0 && size > chunkBytes {
			break
		}
		n++
	}
	return n
}
