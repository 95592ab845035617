package main

import (
	"os"
	"runtime/debug"
)

// daemonMemoryLimit is the soft memory limit of the agent and of its
// adapter plugin. Their live memory is small but for a snapshot, and
// between two rounds both the last snapshot (the status page's) and the
// next one are live: the largest snapshot the SLURM adapter's defaults
// accept (300,000 jobs on 100,000 nodes) is about 60 MB decoded, so the
// live heap reaches about 145 MB, and Go's default garbage collector,
// which lets the heap grow to twice what was live, took the agent to
// 280-300 MB. Under this limit the collector runs earlier instead (it is
// soft: a larger live heap is never refused, only collected more often,
// at most half the CPU). GOMEMLIMIT, when set, wins.
const daemonMemoryLimit = 200 << 20

// limitDaemonMemory sets the soft memory limit unless GOMEMLIMIT does.
func limitDaemonMemory() {
	if os.Getenv("GOMEMLIMIT") == "" {
		debug.SetMemoryLimit(daemonMemoryLimit)
	}
}
