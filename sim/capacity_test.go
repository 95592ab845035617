package sim

import (
	"context"
	"testing"

	"github.com/harvest-hpc/harvest/capacity"
)

// contended runs a backlog of 600 one-minute tasks on 16 idle nodes whose
// tasks share a resource that serves 4 of them at full speed, and returns
// the backlog's makespan and the pilots' node-seconds.
func contended(t *testing.T, mod func(*Config)) (makespan, nodeSeconds int64, res Result) {
	t.Helper()
	cfg := DefaultConfig()
	cfg.Nodes = 16
	cfg.HarvestBacklog, cfg.TaskSeconds = 600, 60
	cfg.From, cfg.To = 0, 24*3600
	cfg.Cluster.Contention = 4
	mod(&cfg)
	res, err := Run(context.Background(), Workload{Format: "thesis"}, cfg)
	if err != nil {
		t.Fatal(err)
	}
	for _, j := range res.Harvest.Jobs {
		if j.ID == "backlog" && j.FinishS != nil {
			return *j.FinishS, res.Harvest.NodeSeconds, res
		}
	}
	t.Fatal("the backlog did not finish")
	return 0, 0, res
}

// Past the contention more pilots bring no throughput, only node-hours:
// the pool left to grow takes all 16 nodes for the best fixed size's
// makespan; the capacity rule stops near 4 x 1.25 and comes within 10% of
// the best fixed pool's makespan with less than half the node-hours of the
// pool left to grow.
func TestTheCapacityRuleStopsGrowthWhereTasksSlowDown(t *testing.T) {
	freeMake, freeNS, _ := contended(t, func(*Config) {})
	fixedMake, fixedNS, _ := contended(t, func(c *Config) { c.Agent.Policy.MaxNodes = 4 })
	cc := capacity.DefaultConfig()
	ruleMake, ruleNS, res := contended(t, func(c *Config) { c.Capacity = &cc })
	t.Logf("makespan / node-seconds: free %d / %d, fixed 4 %d / %d, rule %d / %d", freeMake, freeNS, fixedMake, fixedNS, ruleMake, ruleNS)
	if freeMake > fixedMake*105/100 || freeNS < 3*fixedNS {
		t.Fatalf("the model: a free pool should be as fast as 4 pilots and cost far more (free %d s %d ns, fixed %d s %d ns)", freeMake, freeNS, fixedMake, fixedNS)
	}
	if ruleMake > fixedMake*110/100 {
		t.Errorf("the rule's makespan %d s exceeds the best fixed pool's %d s by more than 10%%", ruleMake, fixedMake)
	}
	if 2*ruleNS > freeNS {
		t.Errorf("the rule held %d node-seconds, not less than half of the free pool's %d", ruleNS, freeNS)
	}
	held := map[int]int{} // polls held at each size
	for _, p := range res.Capacity {
		if p.Phase == string(capacity.Hold) {
			held[p.Cap]++
		}
	}
	if held[5] == 0 {
		t.Errorf("the rule never held 5 pilots (4 x 1.25): %v", held)
	}
}

// Without contention the rule only delays growth: it doubles the pool
// each time a size is judged, so a long backlog loses little.
func TestTheCapacityRuleCostsLittleWithoutContention(t *testing.T) {
	freeMake, _, _ := contended(t, func(c *Config) { c.Cluster.Contention = 0 })
	cc := capacity.DefaultConfig()
	ruleMake, _, res := contended(t, func(c *Config) { c.Cluster.Contention = 0; c.Capacity = &cc })
	if ruleMake > freeMake*115/100 {
		t.Errorf("without contention the rule's makespan %d s exceeds the free pool's %d s by more than 15%%", ruleMake, freeMake)
	}
	for _, p := range res.Capacity {
		if p.Phase != string(capacity.Grow) {
			t.Fatalf("at %d s the rule left growth (%s, cap %d) without contention", p.T, p.Phase, p.Cap)
		}
	}
}
