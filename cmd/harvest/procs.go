package main

import (
	"os"
	"runtime"
)

// minQueueProcs is how many Go processors (GOMAXPROCS) a process that
// hosts the queue runs with at least.
const minQueueProcs = 4

// hostQueueProcs raises GOMAXPROCS to minQueueProcs in a process that
// hosts the queue, unless the GOMAXPROCS variable sets it, and returns the
// value in force. The queue's threads spend much of their time in SQLite,
// which is cgo: the Go runtime gives the processor of a thread in a cgo
// call to other goroutines after 20 us, and the thread, back from SQLite
// with the write lock held, sleeps until a processor comes free. With as
// many processors as cores that wait is the Go scheduler's latency, which
// on a busy head node is milliseconds (`harvest bench dispatch` on 2
// cores: p99 1.8-2.6 ms with 2 processors, 0.9-1.0 ms with 4). More cost
// CPU for nothing: with 8 the process spent 90-94 us per task against
// 63-93 with 4 (idle processors' threads spin looking for work).
func hostQueueProcs() int {
	if os.Getenv("GOMAXPROCS") == "" && runtime.GOMAXPROCS(0) < minQueueProcs {
		runtime.GOMAXPROCS(minQueueProcs)
	}
	return runtime.GOMAXPROCS(0)
}
