package htcondor

import (
	"testing"
)

// A 10,000-job queue on a 1,000-machine pool, in -json form: the cost of
// one snapshot's parsing and mapping, without the commands themselves.
func BenchmarkSnapshot10kJobs1kMachines(b *testing.B) {
	q, st := jobAdsJSON(10000), slotAdsJSON(1000)
	b.SetBytes(int64(len(q) + len(st)))
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		slots, err := ParseCondorStatus(st, FormatJSON)
		if err != nil {
			b.Fatal(err)
		}
		jobs, err := ParseCondorQ(q, FormatJSON, nil)
		if err != nil {
			b.Fatal(err)
		}
		s, err := BuildSnapshot(slots, jobs, View{Tag: "harvest-pilot", Now: 1})
		if err != nil || len(s.Jobs) != 10000 {
			b.Fatalf("%v, %d jobs", err, len(s.Jobs))
		}
	}
}
