package bench

import (
	"os"
	"syscall"
	"testing"
	"time"
)

func TestParsePIDStat(t *testing.T) {
	// A command name with spaces and parentheses; utime 7, stime 3,
	// cutime 120, cstime 30 ticks.
	line := "4242 (a (b) c) S 1 4242 4242 0 -1 4194560 100 0 0 0 7 3 120 30 20 0 1 0 99 1000 10 18446744073709551615\n"
	p, err := parsePIDStat(line)
	if err != nil {
		t.Fatal(err)
	}
	if p.self != 10*clockTick || p.children != 150*clockTick {
		t.Fatalf("self %v children %v; want %v and %v", p.self, p.children, 10*clockTick, 150*clockTick)
	}
	for _, bad := range []string{"", "1 (x) S 1 2", "1 (x) S 1 1 1 0 -1 0 0 0 0 0 x 3 1 1 20 0 1 0"} {
		if _, err := parsePIDStat(bad); err == nil {
			t.Errorf("%q parsed", bad)
		}
	}
}

func TestSampleSplitReadsThisProcess(t *testing.T) {
	// Burn 150 ms of CPU here (by the process's own clock, however loaded
	// the machine): it must show up as the "worker's" own time.
	a := sampleSplit([]int{os.Getpid()})
	for c0 := cpu(syscall.RUSAGE_SELF); cpu(syscall.RUSAGE_SELF)-c0 < 150*time.Millisecond; {
	}
	b := sampleSplit([]int{os.Getpid()})
	s := b.perTask(a, 1)
	if s == nil || s.WorkerUS < 100_000 {
		t.Fatalf("split %+v: want at least 100 ms of this process's own CPU", s)
	}
	if sampleSplit([]int{-1}).ok {
		t.Fatal("a process that does not exist sampled")
	}
}
