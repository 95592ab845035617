package sim

import (
	"context"
	"testing"
)

// BenchmarkHarvestRounds measures harvest mode: one agent round per poll
// of virtual time on a light 16-node workload (about 9 virtual days).
func BenchmarkHarvestRounds(b *testing.B) {
	w := lightWorkload(3, 200)
	cfg := DefaultConfig()
	cfg.Nodes, cfg.HarvestBacklog, cfg.TaskSeconds = 16, 1_000_000, 300
	for range b.N {
		if _, err := Run(context.Background(), w, cfg); err != nil {
			b.Fatal(err)
		}
	}
}
