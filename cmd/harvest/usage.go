package main

import (
	"syscall"
	"time"
)

// processUsage is this process's CPU time (user + system) and peak
// resident set in bytes (Linux reports ru_maxrss in KiB).
func processUsage() (time.Duration, int64, bool) {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0, 0, false
	}
	cpu := time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	return cpu, ru.Maxrss * 1024, true
}
