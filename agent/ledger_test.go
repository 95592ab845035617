package agent

import (
	"maps"
	"math/rand/v2"
	"slices"
	"strconv"
	"testing"

	"github.com/harvest-hpc/harvest/adapters"
	"github.com/harvest-hpc/harvest/agent/policy"
	"github.com/harvest-hpc/harvest/cluster"
)

func pilotJob(id string) cluster.Job {
	return cluster.Job{ID: id, State: cluster.Pending, Nodes: 1, TimeLimit: 600, Pilot: true}
}

func TestLedger(t *testing.T) {
	t.Run("a submitted pilot is upcoming until a snapshot shows it", func(t *testing.T) {
		l := NewLedger(300)
		l.Submitted("10", 600, false, 0)
		l.Observe(cluster.Snapshot{Now: 5})
		if l.Len() != 1 {
			t.Fatalf("Len = %d, want 1", l.Len())
		}
		l.Observe(cluster.Snapshot{Now: 10, Jobs: []cluster.Job{pilotJob("10")}})
		if l.Len() != 0 {
			t.Fatalf("Len = %d after the pilot showed up, want 0", l.Len())
		}
	})
	t.Run("an entry expires after the TTL", func(t *testing.T) {
		l := NewLedger(300)
		l.Submitted("10", 600, false, 0)
		l.Observe(cluster.Snapshot{Now: 301})
		if l.Len() != 0 {
			t.Fatalf("Len = %d, want 0 after TTL", l.Len())
		}
	})
	t.Run("an unknown submit is settled by a pilot nobody expected", func(t *testing.T) {
		l := NewLedger(300)
		l.Observe(cluster.Snapshot{Now: 0, Jobs: []cluster.Job{pilotJob("5")}})
		l.Unknown(600, false, 1)
		l.Unknown(600, false, 1)
		l.Observe(cluster.Snapshot{Now: 2, Jobs: []cluster.Job{pilotJob("5"), pilotJob("6")}})
		if l.Len() != 1 {
			t.Fatalf("Len = %d, want 1 (one unknown submit settled by pilot 6)", l.Len())
		}
		// The same pilot seen again settles nothing more.
		l.Observe(cluster.Snapshot{Now: 3, Jobs: []cluster.Job{pilotJob("5"), pilotJob("6")}})
		if l.Len() != 1 {
			t.Fatalf("Len = %d, want still 1", l.Len())
		}
	})
	t.Run("a known pilot does not settle an unknown submit", func(t *testing.T) {
		l := NewLedger(300)
		l.Submitted("7", 600, false, 0)
		l.Unknown(600, false, 0)
		l.Observe(cluster.Snapshot{Now: 1, Jobs: []cluster.Job{pilotJob("7")}})
		if l.Len() != 1 || len(l.unknown) != 1 {
			t.Fatalf("Len = %d unknown = %d, want the unknown entry kept", l.Len(), len(l.unknown))
		}
	})
}

// refLedger is the ledger's rule written plainly (maps, every visible
// pilot looked up): what the ledger must equal whatever it skips.
type refLedger struct {
	ttl     int64
	visible bool // Ledger.Visible: every entry goes at the next snapshot
	known   map[string]entry
	unknown []entry
	seen    map[string]bool
}

func (l *refLedger) submitted(id string, limit cluster.Limit, pre bool, now int64) {
	if !l.seen[id] {
		l.known[id] = entry{limit, now, pre}
	}
}

func (l *refLedger) observe(s cluster.Snapshot) {
	fresh, seen := 0, map[string]bool{}
	for _, j := range s.Jobs {
		if !j.Pilot {
			continue
		}
		seen[j.ID] = true
		if _, ok := l.known[j.ID]; ok {
			delete(l.known, j.ID)
		} else if len(l.unknown) > 0 && !l.seen[j.ID] {
			fresh++
		}
	}
	l.unknown = l.unknown[min(fresh, len(l.unknown)):]
	l.seen = seen
	for id, e := range l.known {
		if l.visible || s.Now-e.at > l.ttl {
			delete(l.known, id)
		}
	}
	var kept []entry
	for _, e := range l.unknown {
		if s.Now-e.at <= l.ttl {
			kept = append(kept, e)
		}
	}
	l.unknown = kept
}

// TestLedgerEqualsThePlainRule runs random rounds (pilots submitted, shown
// late or never, cancelled, submits of unknown outcome, expiries) through
// the ledger and the plain rule and compares what the policy reads after
// every step; with Visible (where a submit asks nothing of the last
// snapshot) after every snapshot, which is when the agent reads it.
func TestLedgerEqualsThePlainRule(t *testing.T) {
	for seed := int64(1); seed <= 60; seed++ {
		rng := rand.New(rand.NewPCG(uint64(seed), 7))
		l := NewLedger(50)
		l.Visible = seed > 30
		ref := &refLedger{ttl: 50, visible: l.Visible, known: map[string]entry{}, seen: map[string]bool{}}
		var shown []string // the pilots the batch system shows
		hidden := map[string]int64{}
		next, now := 0, int64(0)
		var jobs []cluster.Job
		for step := 0; step < 400; step++ {
			now += rng.Int64N(8)
			observed := false
			switch r := rng.IntN(10); {
			case r < 4: // a submit, visible at once, later or never
				next++
				id := strconv.Itoa(next)
				pre := rng.IntN(2) == 0
				l.Submitted(adapters.PilotID(id), 600, pre, now)
				ref.submitted(id, 600, pre, now)
				switch rng.IntN(3) {
				case 0:
					shown = append(shown, id)
				case 1:
					hidden[id] = now + rng.Int64N(80)
				}
			case r < 5: // an unknown outcome; the pilot may exist
				l.Unknown(600, false, now)
				ref.unknown = append(ref.unknown, entry{600, now, false})
				if rng.IntN(2) == 0 {
					next++
					shown = append(shown, strconv.Itoa(next))
				}
			case r < 6 && len(shown) > 0: // a pilot ends or is cancelled
				k := rng.IntN(len(shown))
				l.Forget(shown[k])
				delete(ref.known, shown[k])
				shown = slices.Delete(shown, k, k+1)
			case r < 7: // a pilot submitted by someone else (the same tag)
				next++
				shown = append(shown, "x"+strconv.Itoa(next))
			default: // a round
				for id, at := range hidden {
					if at <= now {
						shown = append(shown, id)
						delete(hidden, id)
					}
				}
				// One array for every snapshot, written in place (the
				// simulator's reused snapshots).
				s := cluster.Snapshot{Now: now, Jobs: jobs[:0]}
				for i, id := range shown {
					s.Jobs = append(s.Jobs, pilotJob(id))
					if i%3 == 0 {
						s.Jobs = append(s.Jobs, cluster.Job{ID: "f" + id, State: cluster.Running, Nodes: 1, TimeLimit: 60})
					}
				}
				l.Observe(s)
				ref.observe(s)
				observed = true
				jobs = s.Jobs
			}
			if l.Visible && !observed {
				continue
			}
			var want []policy.Upcoming
			ids := slices.Sorted(maps.Keys(ref.known))
			for _, id := range ids {
				e := ref.known[id]
				want = append(want, policy.Upcoming{Count: 1, TimeLimit: e.limit, SubmittedAt: e.at, Preemptible: e.preemptible})
			}
			for _, e := range ref.unknown {
				want = append(want, policy.Upcoming{Count: 1, TimeLimit: e.limit, SubmittedAt: e.at, Preemptible: e.preemptible})
			}
			if got := l.Upcoming(); !slices.Equal(got, want) || l.Len() != len(want) {
				t.Fatalf("seed %d step %d: upcoming %v (len %d), the plain rule %v", seed, step, got, l.Len(), want)
			}
		}
	}
}
