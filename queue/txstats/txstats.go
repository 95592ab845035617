// Package txstats measures how long the queue's store holds its write
// lock: the transactions' count, time and distribution (exported as a
// Prometheus histogram by queue/metrics), and the slow ones by store
// method, for the queue's log.
package txstats

import (
	"maps"
	"math"
	"slices"
	"sync"
	"time"
)

// Stats are the write transactions' figures.
type Stats struct {
	Transactions int64
	Total        time.Duration
	Longest      time.Duration
	LongestIn    string // the store method that ran the longest transaction
	Slow         int64  // transactions longer than SlowTx
	// SlowBy counts the slow transactions by store method (nil until one
	// is slow).
	SlowBy map[string]int64
	// Hist counts the transactions by lock time in buckets of HistBucket
	// (the last one: everything longer).
	Hist [histBuckets]int64
	// Recent are the last RecentSlow slow transactions, oldest first:
	// which one, when and how long, for the queue's log.
	Recent []Slow
}

// RecentSlow is how many slow transactions Stats.Recent keeps.
const RecentSlow = 32

// Slow is one write transaction that held the lock over SlowTx: when it
// committed, the store method that ran it, the lock time.
type Slow struct {
	At   time.Time
	In   string
	Lock time.Duration
}

// SlowTx is the write transaction the queue aims to stay under (issue 17):
// Stats counts the longer ones, to tell a tail from an outlier.
const SlowTx = 5 * time.Millisecond

// HistBucket is the width of a bucket of Stats.Hist.
const (
	HistBucket  = 250 * time.Microsecond
	histBuckets = 4 * 50 // up to 50 ms
)

// Quantile returns the lock time that a fraction q of the transactions
// did not exceed, to a bucket's width (0 without transactions).
func (w Stats) Quantile(q float64) time.Duration {
	var n int64
	for _, c := range w.Hist {
		n += c
	}
	if n == 0 {
		return 0
	}
	need := int64(math.Ceil(q * float64(n)))
	var seen int64
	for i, c := range w.Hist {
		if seen += c; seen >= need {
			if i == histBuckets-1 {
				return w.Longest
			}
			return time.Duration(i+1) * HistBucket
		}
	}
	return w.Longest
}

// Recorder gathers Stats; safe for concurrent use (its mutex is a leaf).
type Recorder struct {
	mu sync.Mutex
	s  Stats
}

// Read returns the figures since the start (or the last reset).
func (r *Recorder) Read(reset bool) Stats {
	r.mu.Lock()
	defer r.mu.Unlock()
	st := r.s
	st.SlowBy = maps.Clone(st.SlowBy)
	st.Recent = slices.Clone(st.Recent)
	if reset {
		r.s = Stats{}
	}
	return st
}

// Add records a transaction that held the lock for d; in names the store
// method that ran it, asked only for a slow transaction or a new longest.
func (r *Recorder) Add(d time.Duration, in func() string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	st := &r.s
	st.Transactions++
	st.Total += d
	st.Hist[min(int(d/HistBucket), histBuckets-1)]++
	var name string
	if d > SlowTx {
		st.Slow++
		name = in()
		if st.SlowBy == nil {
			st.SlowBy = map[string]int64{}
		}
		st.SlowBy[name]++
		if len(st.Recent) == RecentSlow {
			st.Recent = append(st.Recent[:0], st.Recent[1:]...)
		}
		st.Recent = append(st.Recent, Slow{At: time.Now(), In: name, Lock: d})
	}
	if d > st.Longest {
		if name == "" {
			name = in()
		}
		st.Longest = d
		st.LongestIn = name
	}
}
