package main

import (
	"runtime/debug"
	"testing"
)

func TestPaceCollectorUnlessGOGCSetsIt(t *testing.T) {
	defer debug.SetGCPercent(debug.SetGCPercent(100))
	t.Setenv("GOGC", "")
	paceCollector()
	if got := debug.SetGCPercent(100); got != dataPathGCPercent {
		t.Fatalf("GOGC unset: the collector's pace is %d, want %d", got, dataPathGCPercent)
	}
	t.Setenv("GOGC", "150")
	paceCollector()
	if got := debug.SetGCPercent(100); got != 100 {
		t.Fatalf("GOGC=150 in the environment: pace changed to %d, want the runtime's own (here 100) kept", got)
	}
}
