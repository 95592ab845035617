package policy

import (
	"slices"
	"strings"

	"github.com/harvest-hpc/harvest/cluster"
)

// releaseTier ranks pilots by what cancelling them costs: a queued pilot
// has started nothing, an idle one runs no task, a busy one loses work.
func releaseTier(p cluster.Job) int { return releaseTierRef(&p) }

func releaseTierRef(p *cluster.Job) int {
	switch {
	case p.State == cluster.Pending:
		return 0
	case !p.Busy:
		return 1
	}
	return 2
}

// ReleaseOrder returns the pilots in the order they should be cancelled,
// without changing the input slice:
//
//  1. queued (pending) pilots, then idle running pilots (Busy false), then
//     busy ones: cancelling a pilot that runs tasks wastes work;
//  2. within a tier, the soonest-ending first (remaining limit TL - RT; a
//     queued pilot's is its whole limit; unlimited ones last);
//  3. among equal remaining time, the pilot that hosts the master
//     (Job.Master) last: releasing it forces a master hand-over for
//     nothing (with one core per node the master runs no task, so it
//     looks idle);
//  4. then the newest first (the largest job id, compared numerically
//     digit run by digit run, so "10" > "9" and "12.10" > "12.9"), so the
//     oldest pilots live longest. Ties left after that fall back to byte
//     order, so the result never depends on the input order.
func ReleaseOrder(pilots []cluster.Job) []cluster.Job {
	out := slices.Clone(pilots)
	slices.SortFunc(out, compareRelease)
	return out
}

func compareRelease(a, b cluster.Job) int { return compareReleaseRef(&a, &b) }

// compareReleaseRef is compareRelease without copying the jobs.
func compareReleaseRef(a, b *cluster.Job) int {
	if ta, tb := releaseTierRef(a), releaseTierRef(b); ta != tb {
		return ta - tb
	}
	if c := compareLimit(a.Remaining(), b.Remaining()); c != 0 {
		return c
	}
	if a.Master != b.Master {
		if a.Master {
			return 1
		}
		return -1
	}
	return -compareIDs(a.ID, b.ID) // newest first
}

// compareLimit orders limits with unlimited the largest.
func compareLimit(a, b cluster.Limit) int {
	switch {
	case a == b:
		return 0
	case a.IsUnlimited():
		return 1
	case b.IsUnlimited():
		return -1
	case a < b:
		return -1
	}
	return 1
}

// compareIDs compares job ids naturally: runs of digits numerically, the
// rest byte-wise; equal ids under that order fall back to byte order.
func compareIDs(a, b string) int {
	i, j := 0, 0
	for i < len(a) && j < len(b) {
		if isDigit(a[i]) && isDigit(b[j]) {
			ei, ej := digitsEnd(a, i), digitsEnd(b, j)
			if c := compareNumbers(a[i:ei], b[j:ej]); c != 0 {
				return c
			}
			i, j = ei, ej
			continue
		}
		if a[i] != b[j] {
			if a[i] < b[j] {
				return -1
			}
			return 1
		}
		i++
		j++
	}
	switch {
	case len(a)-i < len(b)-j:
		return -1
	case len(a)-i > len(b)-j:
		return 1
	}
	return strings.Compare(a, b)
}

func isDigit(c byte) bool { return '0' <= c && c <= '9' }

func digitsEnd(s string, i int) int {
	for i < len(s) && isDigit(s[i]) {
		i++
	}
	return i
}

// compareNumbers compares two digit strings of any length as numbers.
func compareNumbers(a, b string) int {
	a = strings.TrimLeft(a, "0")
	b = strings.TrimLeft(b, "0")
	if len(a) != len(b) {
		if len(a) < len(b) {
			return -1
		}
		return 1
	}
	return strings.Compare(a, b)
}
