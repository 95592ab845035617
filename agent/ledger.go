package agent

import (
	"sort"

	"github.com/harvest-hpc/harvest/adapters"
	"github.com/harvest-hpc/harvest/agent/policy"
	"github.com/harvest-hpc/harvest/cluster"
)

// Ledger remembers pilots submitted in earlier rounds that the batch
// system does not show yet, so the policy counts them as held and never
// submits twice for the same hole (cluster-autoscaler's "upcoming nodes").
//
// Submits whose outcome is unknown are remembered without an id; a pilot
// that later appears with an id the ledger never saw is matched against
// them. Entries expire after TTL seconds of snapshot time: by then the
// batch system shows the pilot or it was never created.
//
// With Visible (the adapter's Info.SubmitsVisible: SLURM, HTCondor and the
// simulator list a job in every snapshot taken after its submit returned),
// a pilot submitted with an id that the next snapshot does not show has
// already left (a preemptible pilot preempted within the poll) and is
// forgotten: counting it as on its way for TTL seconds kept a node idle
// for five minutes on the mini-cluster.
type Ledger struct {
	TTL     int64
	Visible bool
	known   map[string]entry // id -> entry, submitted and not yet visible
	unknown []entry          // outcome unknown
	// seen holds the pilot ids of the last snapshot; seenSet is the same
	// as a set (an open-addressing table of indices into seen, by id
	// hash), built only when a round needs it (a submit, or an unknown
	// submit to settle): most rounds need neither, and a map of a thousand
	// pilots each round was a tenth of a simulated month (and a twentieth
	// when built only for submits).
	seen, spare []string
	seenSet     []int32
	seenBuilt   bool
	// last is the last snapshot's jobs while seen is not listed from
	// them yet (unlisted): a round that submits nothing of unknown outcome
	// and, with Visible, asks nothing of seen (the simulator's every
	// round) lists no pilot. The jobs hold until the round ends, and the
	// round's submits list them before it does (Unknown).
	last     []cluster.Job
	unlisted bool
	// scans counts the lookups in seen made by a scan since it changed:
	// the first few (a submit or two, the pilots submitted last round)
	// scan it rather than hash every id into the set.
	scans int
}

// scanFirst is how many lookups scan seen before the set is built: a
// scan compares lengths and a byte, a build hashes every id.
const scanFirst = 4

type entry struct {
	limit       cluster.Limit
	at          int64
	preemptible bool
}

// NewLedger returns an empty ledger whose entries expire after ttl seconds.
func NewLedger(ttl int64) *Ledger {
	return &Ledger{TTL: ttl, known: map[string]entry{}}
}

// list makes seen the pilots of the last snapshot, if not done yet.
func (l *Ledger) list() {
	if !l.unlisted {
		return
	}
	visible := l.spare[:0]
	for i := range l.last {
		if j := &l.last[i]; j.Pilot {
			visible = append(visible, j.ID)
		}
	}
	l.seen, l.spare, l.seenBuilt, l.scans = visible, l.seen, false, 0
	l.last, l.unlisted = nil, false
}

// wasSeen reports whether the last snapshot showed pilot id.
func (l *Ledger) wasSeen(id string) bool {
	l.list()
	if !l.seenBuilt && l.scans < scanFirst {
		l.scans++
		last := len(id) - 1
		for _, s := range l.seen {
			if len(s) == len(id) && (last < 0 || s[last] == id[last]) && s == id {
				return true
			}
		}
		return false
	}
	if !l.seenBuilt {
		size := 16
		for size < 2*len(l.seen) {
			size *= 2
		}
		if cap(l.seenSet) < size {
			l.seenSet = make([]int32, size)
		}
		l.seenSet = l.seenSet[:size]
		clear(l.seenSet)
		mask := uint64(size - 1)
		for i, s := range l.seen {
			k := cluster.IDHash(s) & mask
			for l.seenSet[k] != 0 {
				k = (k + 1) & mask
			}
			l.seenSet[k] = int32(i + 1)
		}
		l.seenBuilt = true
	}
	mask := uint64(len(l.seenSet) - 1)
	for k := cluster.IDHash(id) & mask; l.seenSet[k] != 0; k = (k + 1) & mask {
		if l.seen[l.seenSet[k]-1] == id {
			return true
		}
	}
	return false
}

// Submitted records a pilot the batch system accepted (to its preemptible
// tier if preemptible).
//
// With Visible the next Observe drops every entry (the snapshot shows the
// pilot or it has left), and nothing reads the ledger before it: whether
// the last snapshot showed the pilot changes nothing, and is not asked (a
// set of every visible pilot built per submitting round was a twentieth
// of a 5,000-node month).
func (l *Ledger) Submitted(id adapters.PilotID, limit cluster.Limit, preemptible bool, now int64) {
	if !l.Visible && l.wasSeen(string(id)) {
		return
	}
	l.known[string(id)] = entry{limit, now, preemptible}
}

// Unknown records a submit whose outcome is unknown.
func (l *Ledger) Unknown(limit cluster.Limit, preemptible bool, now int64) {
	l.list() // the next Observe reads this round's snapshot's pilots
	l.unknown = append(l.unknown, entry{limit, now, preemptible})
}

// Observe updates the ledger from a snapshot: visible pilots leave it,
// new unexpected pilots settle unknown submits, old entries expire. The
// ledger may read s's pilots until the round's submits are recorded (ids
// and pilot marks unchanged until then).
func (l *Ledger) Observe(s cluster.Snapshot) {
	if len(l.unknown) == 0 {
		// Nothing to settle: the visible pilots (thousands) are listed
		// when first asked, and the few submitted ones not seen yet
		// looked up in them, rather than every visible one in the map (a
		// twelfth of a simulated month). The set built for it is this
		// snapshot's seen set, which a submit in this round reads again.
		l.last, l.unlisted = s.Jobs, true
		if !l.Visible { // with Visible every entry goes below
			for id := range l.known {
				if l.wasSeen(id) {
					delete(l.known, id)
				}
			}
		}
	} else {
		// seen is listed: unknown entries come from Unknown, which lists
		// it, or from an Observe of this branch.
		visible := l.spare[:0]
		fresh := 0
		for i := range s.Jobs {
			j := &s.Jobs[i] // not a copy of every job a round
			if !j.Pilot {
				continue
			}
			visible = append(visible, j.ID)
			if _, ok := l.known[j.ID]; ok {
				delete(l.known, j.ID)
			} else if !l.wasSeen(j.ID) {
				fresh++
			}
		}
		l.unknown = l.unknown[min(fresh, len(l.unknown)):]
		// Forget ids no longer visible so the set does not grow forever; a
		// pilot never comes back once it has left the batch system.
		l.seen, l.spare, l.seenBuilt, l.scans = visible, l.seen, false, 0
	}
	for id, e := range l.known {
		// Rounds are sequential: every entry was submitted before s.
		if l.Visible || s.Now-e.at > l.TTL {
			delete(l.known, id)
		}
	}
	kept := l.unknown[:0]
	for _, e := range l.unknown {
		if s.Now-e.at <= l.TTL {
			kept = append(kept, e)
		}
	}
	l.unknown = kept
}

// Forget drops a pilot we cancelled before it became visible.
func (l *Ledger) Forget(id string) { delete(l.known, id) }

// Upcoming returns the ledger as the policy's input, oldest first.
func (l *Ledger) Upcoming() []policy.Upcoming {
	var out []policy.Upcoming
	ids := make([]string, 0, len(l.known))
	for id := range l.known {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, id := range ids {
		e := l.known[id]
		out = append(out, policy.Upcoming{Count: 1, TimeLimit: e.limit, SubmittedAt: e.at, Preemptible: e.preemptible})
	}
	for _, e := range l.unknown {
		out = append(out, policy.Upcoming{Count: 1, TimeLimit: e.limit, SubmittedAt: e.at, Preemptible: e.preemptible})
	}
	return out
}

// Len is the number of pilots the ledger counts as held.
func (l *Ledger) Len() int { return len(l.known) + len(l.unknown) }
