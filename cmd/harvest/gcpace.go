package main

import (
	"os"
	"runtime/debug"
)

// dataPathGCPercent is the garbage collector's pace (GOGC) in the
// processes a task's batch passes through: the pilot (its master and its
// worker), the agent or `harvest queue serve` hosting the queue, and the
// benchmark that stands for them. Their live heap is small (4 MB in the
// queue and master of `harvest bench dispatch`, less in a worker), and at
// Go's default of 100 the collector ran every 4 MB allocated: with real
// tasks, 19-20% of the queue and master's CPU and of the workers' went to
// it (perf). At 400 it runs a quarter as often, for a heap up to 5x what
// is live (20 MB there); an agent's soft memory limit (memlimit.go) still
// bounds the agent's heap when a large snapshot is live.
const dataPathGCPercent = 400

// paceCollector sets dataPathGCPercent unless GOGC sets the pace.
func paceCollector() {
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(dataPathGCPercent)
	}
}
