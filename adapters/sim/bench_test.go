package sim

import (
	"math/rand/v2"
	"testing"

	"github.com/harvest-hpc/harvest/cluster"
)

// BenchmarkYearOf100kJobs replays a year-long synthetic trace of 100,000
// jobs on 128 nodes (offered load about 0.94), in baseline: the scheduler
// alone.
func BenchmarkYearOf100kJobs(b *testing.B) {
	const n, nodes, year = 100_000, 128, 365 * 86400
	r := rand.New(rand.NewPCG(1, 2))
	specs := make([]JobSpec, n)
	for i := range specs {
		limit := 60 + r.Int64N(4*3600)
		specs[i] = JobSpec{Nodes: 1 + r.IntN(20), TimeLimit: cluster.Seconds(limit), RunTime: 1 + r.Int64N(limit), Submit: int64(i) * year / n}
	}
	b.ResetTimer()
	for range b.N {
		cfg := DefaultConfig()
		cfg.Nodes = nodes
		c, _ := New(cfg)
		for _, s := range specs {
			if _, err := c.AddJob(s); err != nil {
				b.Fatal(err)
			}
		}
		if err := c.AdvanceTo(2 * year); err != nil {
			b.Fatal(err)
		}
		for _, rec := range c.Records() {
			if rec.End < 0 {
				b.Fatal("a job did not finish")
			}
		}
	}
}
