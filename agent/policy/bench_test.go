package policy

import (
	"encoding/json"
	"math/rand/v2"
	"strconv"
	"testing"

	"github.com/harvest-hpc/harvest/cluster"
)

// bigSnapshot builds a 1,000-node cluster with 10,000 jobs: about 900
// nodes under running foreign jobs of 1 to 16 nodes and limits from 10 min
// to 2 days (a few unlimited), 60 pilots (some queued, most busy), the
// rest of the 10,000 jobs pending with 1 to 64 nodes. If fullScan, no
// pending job fits the hole, so case 5 looks at every one of them before
// case 6 fills the hole: the slowest path through Decide.
func bigSnapshot(fullScan bool) cluster.Snapshot {
	r := rand.New(rand.NewPCG(10_000, 1_000))
	const total, jobs = 1000, 10_000
	s := cluster.Snapshot{Now: 1_700_000_000, TotalNodes: total, MinNodes: 20, MaxNodes: 200,
		Demand: &cluster.Demand{PendingTasks: 5000, RunningTasks: 400, SlotsPerNode: 8}}
	s.MaxTime = limitPtr(2 * 24 * 3600)
	id := 100_000
	next := func() string { id++; return strconv.Itoa(id) }
	limit := func() int64 {
		if r.IntN(50) == 0 {
			return unlimited
		}
		return int64(10+r.IntN(48*60-10)) * minute
	}
	used := 0
	for used < 900 {
		n := min(1+r.IntN(16), 900-used)
		tl := limit()
		rt := r.Int64N(3600)
		if tl > 0 {
			rt = r.Int64N(tl)
		}
		s.Jobs = append(s.Jobs, running(next(), n, tl, rt))
		used += n
	}
	for i := range 60 {
		if i%10 == 0 {
			s.Jobs = append(s.Jobs, queuedPilot(next(), 4*3600))
			continue
		}
		p := pilot(next(), int64(1+r.IntN(12))*3600, r.Int64N(3600))
		p.Busy = i%3 != 0
		s.Jobs = append(s.Jobs, p)
		used++
	}
	s.IdleNodes = total - used
	for first := true; len(s.Jobs) < jobs; first = false {
		n, tl := 1+r.IntN(64), limit()
		if first {
			n = 400 // the top job waits for many nodes
		}
		if fullScan && tl >= 0 {
			tl = 3 * 24 * 3600 // longer than any hole
		}
		s.Jobs = append(s.Jobs, pending(next(), n, tl))
	}
	return s
}

func BenchmarkDecide10kJobs1kNodes(b *testing.B) {
	for _, bc := range []struct {
		name     string
		fullScan bool
	}{{"mixed", false}, {"full-scan", true}} {
		b.Run(bc.name, func(b *testing.B) {
			in := Input{Snapshot: bigSnapshot(bc.fullScan), Upcoming: []Upcoming{{Count: 3, TimeLimit: 3600, SubmittedAt: 1_700_000_000 - 20}}}
			if err := in.Snapshot.Validate(); err != nil {
				b.Fatal(err)
			}
			cfg := DefaultConfig()
			d := Decide(in, cfg)
			if d.Case == CaseInvalidInput {
				b.Fatal(d.Reason)
			}
			b.Logf("%d jobs: %s: %s", len(in.Snapshot.Jobs), d.Case, d.Reason)
			b.ReportAllocs()
			for b.Loop() {
				Decide(in, cfg)
			}
		})
	}
}

// BenchmarkDecodeAndDecide10kJobs1kNodes is what `harvest decide` does
// with a dumped snapshot of that size: decode the JSON, then decide.
func BenchmarkDecodeAndDecide10kJobs1kNodes(b *testing.B) {
	raw, err := json.Marshal(bigSnapshot(true))
	if err != nil {
		b.Fatal(err)
	}
	b.Logf("snapshot JSON: %d bytes", len(raw))
	cfg := DefaultConfig()
	b.ReportAllocs()
	for b.Loop() {
		var s cluster.Snapshot
		if err := json.Unmarshal(raw, &s); err != nil {
			b.Fatal(err)
		}
		Decide(Input{Snapshot: s}, cfg)
	}
}
