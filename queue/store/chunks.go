package store

import (
	"time"

	"github.com/harvest-hpc/harvest/pilotproto"
)

// chunkBudget is the write-lock time each transaction of a long write (a
// submission's, a kill's) aims at on SQLite, well under SlowTx so that the
// pulls and results behind it wait little. A row count cannot promise
// that: 1,000 tasks took 2.5-4 ms on an idle test machine and over 5 ms on
// a busy one (docs/queue.md, "Long writes").
const chunkBudget = time.Millisecond

// chunkStart is a first chunk small enough for any machine; chunkMin a
// floor at which a transaction's fixed cost stays under a fifth of it.
const (
	chunkMin   = 16
	chunkStart = 64
)

// chunkSizer sizes the transactions of a long write, in rows: after each
// one it scales the next to what would have held the lock chunkBudget,
// at most doubling, at least a quarter, between chunkMin and the limit.
// A transaction the hypervisor stretched costs a few more commits, never
// a long one.
type chunkSizer struct {
	n, max int
	fixed  bool // PostgreSQL: always max
}

// chunks sizes a long write's transactions: on SQLite by chunkBudget; on
// PostgreSQL at limit, as a long transaction there holds no lock the
// others wait for (it writes rows of its own job).
func (s *Store) chunks(limit int) *chunkSizer {
	limit = max(limit, 1)
	if s.d.pg {
		return &chunkSizer{n: limit, max: limit, fixed: true}
	}
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
	z.n = min(max(want, z.n/4, chunkMin), 2*z.n, z.max) // under chunkMin only if the limit is
}

// chunkBytes bounds what one transaction of results carries: a result's
// error tail (up to 64 KiB) is stored whole in its exception row, and 100
// results with 64 KiB tails held the lock over 50 ms in one transaction.
const chunkBytes = 64 << 10

// rowOverhead is a result's size without its strings.
const rowOverhead = 128

// ResultsChunk is how many of rs, from the first, one ApplyResults
// transaction should apply: at most limit and chunkBytes, at least one.
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
