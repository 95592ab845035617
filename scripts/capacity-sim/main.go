// Command capacity-sim measures the master's degradation-aware capacity
// rule (package capacity) in the simulator: a backlog of harvest tasks on
// an otherwise idle cluster whose tasks share a resource that serves C of
// them at full speed (adapters/sim Config.Contention: past C running tasks
// every new task is slowed by running/C). It prints, for the pool left to
// grow (no rule), the rule, and every fixed pool size, the backlog's
// makespan, throughput and the pilots' node-hours.
//
//	go run ./scripts/capacity-sim [-nodes 32] [-contention 8] [-tasks 3000] [-task-seconds 60]
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"text/tabwriter"

	"github.com/harvest-hpc/harvest/capacity"
	"github.com/harvest-hpc/harvest/sim"
)

var (
	nodes      = flag.Int("nodes", 32, "cluster nodes (all idle: no foreign job)")
	contention = flag.Int("contention", 8, "tasks the shared resource serves at full speed (0 = none)")
	tasks      = flag.Int64("tasks", 3000, "harvest tasks in the backlog")
	taskSec    = flag.Int64("task-seconds", 60, "length of one task at full speed")
	hold       = flag.Int("hold", capacity.DefaultConfig().HoldRounds, "polls (10 s) the rule holds a size before probing a larger one")
	sizes      = flag.String("fixed", "", "fixed pool sizes to compare (default: every size up to -nodes)")
)

type row struct {
	name                string
	makespan, nodeHours float64 // hours
	done                int64
	finished            bool
}

func run(cfg sim.Config) (row, error) {
	res, err := sim.Run(context.Background(), sim.Workload{Format: "thesis"}, cfg)
	if err != nil {
		return row{}, err
	}
	r := row{nodeHours: float64(res.Harvest.NodeSeconds) / 3600}
	for _, j := range res.Harvest.Jobs {
		if j.ID == "backlog" && j.FinishS != nil {
			r.makespan, r.finished = float64(*j.FinishS)/3600, true
		}
	}
	r.done = res.Harvest.UsefulNodeSeconds
	return r, nil
}

func main() {
	flag.Parse()
	base := sim.DefaultConfig()
	base.Nodes = *nodes
	base.HarvestBacklog, base.TaskSeconds = *tasks, *taskSec
	base.From, base.To = 0, 7*24*3600
	base.Cluster.Contention = *contention
	var rows []row
	add := func(name string, cfg sim.Config) {
		r, err := run(cfg)
		if err != nil {
			fmt.Fprintln(os.Stderr, "capacity-sim:", err)
			os.Exit(1)
		}
		r.name = name
		rows = append(rows, r)
	}
	add("no rule (pool grows to every idle node)", base)
	cc := capacity.DefaultConfig()
	cc.HoldRounds = *hold
	withRule := base
	withRule.Capacity = &cc
	add(fmt.Sprintf("capacity rule (factor %.2f, hold %d polls)", cc.Factor, cc.HoldRounds), withRule)
	best := -1
	var fixed []row
	for k := 1; k <= *nodes; k++ {
		if *sizes != "" && !contains(*sizes, k) {
			continue
		}
		f := base
		f.Agent.Policy.MaxNodes = k
		r, err := run(f)
		if err != nil {
			fmt.Fprintln(os.Stderr, "capacity-sim:", err)
			os.Exit(1)
		}
		r.name = fmt.Sprintf("fixed %d", k)
		fixed = append(fixed, r)
		// The best fixed size: the shortest makespan, then the fewest node-hours.
		if r.finished && (best < 0 || r.makespan < fixed[best].makespan-1e-9 ||
			(r.makespan <= fixed[best].makespan+1e-9 && r.nodeHours < fixed[best].nodeHours)) {
			best = len(fixed) - 1
		}
	}
	w := tabwriter.NewWriter(os.Stdout, 0, 2, 2, ' ', 0)
	fmt.Fprintf(w, "%d nodes, contention %d, %d tasks of %d s (%.1f node-hours of work)\n\n", *nodes, *contention, *tasks, *taskSec,
		float64(*tasks**taskSec)/3600)
	fmt.Fprintln(w, "POOL\tMAKESPAN (h)\tTASKS/H\tPILOT NODE-HOURS\tWORK / NODE-HOURS")
	print := func(r row) {
		tph := float64(*tasks) / r.makespan
		if !r.finished {
			fmt.Fprintf(w, "%s\tnot finished\t-\t%.1f\t-\n", r.name, r.nodeHours)
			return
		}
		fmt.Fprintf(w, "%s\t%.2f\t%.0f\t%.1f\t%.0f%%\n", r.name, r.makespan, tph, r.nodeHours, 100*float64(*tasks**taskSec)/3600/r.nodeHours)
	}
	for _, r := range rows {
		print(r)
	}
	if best >= 0 {
		fixed[best].name = "best " + fixed[best].name
		print(fixed[best])
	}
	if *sizes != "" {
		for i, r := range fixed {
			if i != best {
				print(r)
			}
		}
	}
	w.Flush()
}

func contains(list string, k int) bool {
	var n int
	for _, f := range splitComma(list) {
		if _, err := fmt.Sscan(f, &n); err == nil && n == k {
			return true
		}
	}
	return false
}

func splitComma(s string) []string {
	var out []string
	start := 0
	for i := 0; i <= len(s); i++ {
		if i == len(s) || s[i] == ',' {
			out = append(out, s[start:i])
			start = i + 1
		}
	}
	return out
}
