package sim

import (
	"bytes"
	"encoding/json"
	"testing"
)

// Jobs of whole nodes' cores on shared nodes run exactly as whole-node
// jobs: best fit puts a one-node job on an idle node and a wider one on
// whole idle nodes, so no node is ever shared, and the figures are those
// of the node model (ProcsPerNode) in every mode. The same workload with
// sub-node jobs does share nodes (and differs).
func TestWholeNodeJobsOnCoresGiveTheNodeModelsFigures(t *testing.T) {
	const k = 8
	w := busyWorkload(3, 300)
	for i := range w.Jobs {
		w.Jobs[i].Nodes *= k // processors, whole nodes' worth
	}
	for _, mode := range []Mode{Baseline, Harvest, Fixed} {
		for _, gb := range []GiveBack{Polling, Preemption} {
			if mode != Harvest && gb != Polling {
				continue
			}
			nodes := runMode(t, w, mode, func(c *Config) { c.ProcsPerNode, c.GiveBack = k, gb })
			cores := runMode(t, w, mode, func(c *Config) { c.CoresPerNode, c.GiveBack = k, gb })
			if cores.CoresPerNode != k {
				t.Fatalf("cores_per_node %d, want %d", cores.CoresPerNode, k)
			}
			cores.CoresPerNode = 0
			a, b := summary(t, nodes), summary(t, cores)
			if !bytes.Equal(a, b) {
				t.Errorf("%s %s: whole nodes and whole nodes' cores differ:\n%s\n%s", mode, gb, a, b)
			}
			for i := range nodes.Records {
				r, s := nodes.Records[i], cores.Records[i]
				if r.Start != s.Start || r.End != s.End || r.Nodes != s.Nodes {
					t.Fatalf("%s %s: job %s: %d-%d on %d nodes as nodes, %d-%d on %d as cores", mode, gb, r.ID, r.Start, r.End, r.Nodes, s.Start, s.End, s.Nodes)
				}
			}
		}
	}
	// Sub-node jobs: the same cores, now shareable, start no later in all.
	for i := range w.Jobs {
		w.Jobs[i].Nodes = max(1, w.Jobs[i].Nodes/k*3/2)
	}
	nodes := runMode(t, w, Baseline, func(c *Config) { c.ProcsPerNode = k })
	cores := runMode(t, w, Baseline, func(c *Config) { c.CoresPerNode = k })
	if cores.Foreign.MeanWaitS >= nodes.Foreign.MeanWaitS {
		t.Errorf("sub-node jobs wait %.0f s on shared nodes, %.0f s rounded up to whole nodes: want less", cores.Foreign.MeanWaitS, nodes.Foreign.MeanWaitS)
	}
}

func summary(t *testing.T, r Result) []byte {
	t.Helper()
	b, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
