package sim

import (
	"testing"

	"github.com/harvest-hpc/harvest/adapters"
	"github.com/harvest-hpc/harvest/adapters/adaptertest"
)

func TestConformance(t *testing.T) {
	var c *Cluster
	adaptertest.Run(t, adaptertest.Harness{
		New: func(t *testing.T) adapters.Adapter {
			cfg := DefaultConfig()
			cfg.Nodes = 4
			c = newClusterCfg(t, cfg)
			return c
		},
		// The simulated batch system acts only when its clock moves.
		Settle: func(t *testing.T) {
			if err := c.AdvanceTo(c.Now() + 10); err != nil {
				t.Fatal(err)
			}
		},
	})
}

func newClusterCfg(t *testing.T, cfg Config) *Cluster {
	t.Helper()
	c, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c
}
