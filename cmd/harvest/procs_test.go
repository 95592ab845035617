package main

import (
	"runtime"
	"testing"
)

func TestHostQueueProcsRaisesUnlessTheVariableSetsIt(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(0))
	t.Setenv("GOMAXPROCS", "")
	runtime.GOMAXPROCS(2)
	if got := hostQueueProcs(); got != minQueueProcs {
		t.Fatalf("GOMAXPROCS unset, 2 processors: %d, want %d", got, minQueueProcs)
	}
	runtime.GOMAXPROCS(minQueueProcs + 4)
	if got := hostQueueProcs(); got != minQueueProcs+4 {
		t.Fatalf("more processors than the minimum: %d, want them kept (%d)", got, minQueueProcs+4)
	}
	t.Setenv("GOMAXPROCS", "3")
	runtime.GOMAXPROCS(3)
	if got := hostQueueProcs(); got != 3 {
		t.Fatalf("GOMAXPROCS=3 in the environment: %d, want the site's 3", got)
	}
}
