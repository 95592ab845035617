package store

import "time"

// A long write (a submission's entries, a drop) goes in transactions that
// each hold SQLite's write lock about chunkBudget, so that the pulls and
// results behind it wait little. No row count promises that: 1,000
// entries took 2.5 ms on an idle machine, over 5 ms on a busy one.
const (
	chunkBudget = time.Millisecond
	chunkStart  = 64 // small enough for any machine
	chunkMin    = 16 // a transaction's fixed cost stays under a fifth of it
)

// chunkSizer sizes a long write's transactions, in rows, to what would
// have held the lock chunkBudget: at most doubling, at least a quarter (a
// stretched transaction costs a few more commits), between floor
// (chunkMin) and max; on PostgreSQL always max, as no one waits for its lock.
type chunkSizer struct{ n, floor, max int } // n: the next transaction's rows

func (s *Store) chunks(limit int) *chunkSizer {
	limit = max(limit, 1)
	if s.pg {
		return &chunkSizer{n: limit, floor: limit, max: limit}
	}
	return &chunkSizer{n: min(chunkStart, limit), floor: chunkMin, max: limit}
}

// took records that a transaction of rows rows held the lock for d.
func (z *chunkSizer) took(rows int, d time.Duration) {
	if rows > 0 {
		want := int(float64(rows) * float64(chunkBudget) / float64(max(d, 1)))
		z.n = min(max(want, z.n/4, z.floor), 2*z.n, z.max) // under the floor only if the limit is
	}
}
