package pilotproto

import (
	"cmp"
	"fmt"
	"slices"
)

// A job's entries have consecutive task ids (the queue numbers entry i of
// job j as j<<32 | i) and a pull hands each job out as a range of them (a
// grant), so a heartbeat and a results report name ranges, not tasks: a
// pool's running set is about one range per grant it holds, and a report
// of a grant's plain successes one range with the sum of their run times.

// TaskRange is task ids First..Last (of one job) at one attempt.
type TaskRange struct {
	First, Last int64
	Attempt     int
}

// Len is how many tasks r names.
func (r TaskRange) Len() int64 { return r.Last - r.First + 1 }

// Ranges lists task ranges as columns: range i is N[i] ids from its first
// at Attempts[i]. First holds each range's first id as its difference
// from the previous range's (the first's from 0), so a report across
// many jobs costs a few bytes per range, not an object.
type Ranges struct {
	First    []int64 `json:"first"`
	N        []int64 `json:"n"`
	Attempts []int   `json:"attempts"`
}

// RangesOf merges refs into ranges: consecutive ids of one job at one
// attempt are one range. refs may come in any order; a ref listed twice
// starts a range of its own (a repeated result stays a duplicate).
func RangesOf(refs []TaskRef) []TaskRange {
	sorted := slices.SortedFunc(slices.Values(refs), func(a, b TaskRef) int {
		return cmp.Or(cmp.Compare(a.Attempt, b.Attempt), cmp.Compare(a.TaskID, b.TaskID))
	})
	var out []TaskRange
	for _, r := range sorted {
		if n := len(out); n > 0 && out[n-1].Attempt == r.Attempt && out[n-1].Last+1 == r.TaskID && r.TaskID>>32 == out[n-1].First>>32 {
			out[n-1].Last = r.TaskID
			continue
		}
		out = append(out, TaskRange{First: r.TaskID, Last: r.TaskID, Attempt: r.Attempt})
	}
	return out
}

// PackRanges is rs as columns.
func PackRanges(rs []TaskRange) Ranges {
	w := Ranges{First: make([]int64, len(rs)), N: make([]int64, len(rs)), Attempts: make([]int, len(rs))}
	var prev int64
	for i, r := range rs {
		w.First[i], w.N[i], w.Attempts[i] = r.First-prev, r.Len(), r.Attempt
		prev = r.First
	}
	return w
}

// Len is how many ranges w lists.
func (w *Ranges) Len() int { return len(w.First) }

// Unpack is the ranges w lists, at most max tasks in all. It refuses a
// malformed w (columns of unequal lengths, an empty range, one across two
// jobs, ids that are not positive, an attempt below 1) before it
// allocates for it.
func (w *Ranges) Unpack(max int) ([]TaskRange, error) {
	n := len(w.First)
	if len(w.N) != n || len(w.Attempts) != n {
		return nil, fmt.Errorf("ranges: %d first, %d n, %d attempts: want as many of each", n, len(w.N), len(w.Attempts))
	}
	var first, tasks int64
	for i := range n {
		var ok bool
		first, ok = addInt64(first, w.First[i])
		k := w.N[i]
		switch {
		case !ok || first <= 0:
			return nil, fmt.Errorf("range %d: first id must be positive", i)
		case k < 1 || k > int64(max):
			return nil, fmt.Errorf("range %d: n %d: want 1..%d", i, k, max)
		case (first+k-1)>>32 != first>>32:
			return nil, fmt.Errorf("range %d: ids %d..%d span two jobs", i, first, first+k-1)
		case w.Attempts[i] < 1:
			return nil, fmt.Errorf("range %d: attempt must be at least 1", i)
		}
		if tasks += k; tasks > int64(max) {
			return nil, fmt.Errorf("at most %d tasks per request", max)
		}
	}
	out := make([]TaskRange, n)
	first = 0
	for i := range out {
		first += w.First[i]
		out[i] = TaskRange{First: first, Last: first + w.N[i] - 1, Attempt: w.Attempts[i]}
	}
	return out, nil
}

// DoneRanges lists plain successes (IsPlain) as ranges with the sum of
// their run times (DurationMS[i] for range i): what the queue keeps of a
// plain success is that it is done and its run time, summed per job for
// usage and per site for the yield; its start and pilot it never reads.
type DoneRanges struct {
	Ranges
	DurationMS []int64 `json:"duration_ms"`
}

// packDone splits results into ranges of plain successes and the rest,
// in their order.
func packDone(results []Result) (*DoneRanges, []Result) {
	var refs []TaskRef
	var rest []Result
	ms := map[TaskRef]int64{}
	for i := range results {
		r := &results[i]
		k := TaskRef{TaskID: r.TaskID, Attempt: r.Attempt}
		if _, twice := ms[k]; !IsPlain(r) || twice || r.TaskID <= 0 || r.Attempt < 1 {
			rest = append(rest, *r) // a repeat goes in full: the queue counts it a duplicate
			continue
		}
		refs = append(refs, k)
		ms[k] = r.DurationMS
	}
	if len(refs) == 0 {
		return nil, rest
	}
	rs := RangesOf(refs)
	d := &DoneRanges{Ranges: PackRanges(rs), DurationMS: make([]int64, len(rs))}
	for i, g := range rs {
		for id := g.First; id <= g.Last; id++ {
			d.DurationMS[i] += ms[TaskRef{TaskID: id, Attempt: g.Attempt}]
		}
	}
	return d, rest
}

// unpack is the ranges of d (Ranges.Unpack), with their run times checked.
func (d *DoneRanges) unpack(max int) ([]TaskRange, error) {
	rs, err := d.Ranges.Unpack(max)
	if err != nil {
		return nil, err
	}
	if len(d.DurationMS) != len(rs) {
		return nil, fmt.Errorf("ranges: %d ranges, %d duration_ms: want as many of each", len(rs), len(d.DurationMS))
	}
	for i := range rs {
		if d.DurationMS[i] < 0 {
			return nil, fmt.Errorf("range %d: duration_ms must not be negative", i)
		}
	}
	return rs, nil
}

// appendDone appends the plain successes of ranges rs whose run times
// are ms (as DoneRanges.unpack checked them), each with an equal share
// of its range's (the first ones a millisecond more for the remainder).
func appendDone(out []Result, rs []TaskRange, ms []int64) []Result {
	for i, r := range rs {
		share, extra := ms[i]/r.Len(), ms[i]%r.Len()
		for id := r.First; id <= r.Last; id++ {
			d := share
			if id-r.First < extra {
				d++
			}
			out = append(out, Result{TaskID: id, Attempt: r.Attempt, Status: StatusDone, DurationMS: d})
		}
	}
	return out
}
