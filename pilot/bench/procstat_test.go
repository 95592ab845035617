package bench

import (
	"math"
	"strings"
	"testing"
)

// In the layout of this machine's /proc/stat (a 2-vCPU VM, kernel 6.x);
// the second reading's deltas are round numbers, to check by hand.
const (
	procStatBefore = `cpu  5342118 10394 2512903 96127715 41270 0 99710 316005 0 0
cpu0 2672349 5102 1263480 48044137 20611 0 85514 157910 0 0
cpu1 2669769 5292 1249423 48083578 20659 0 14196 158095 0 0
intr 123
`
	procStatAfter = `cpu  5342918 10394 2513203 96128715 41370 0 99810 316105 0 0
cpu0 2672749 5102 1263630 48044637 20661 0 85564 157960 0 0
`
)

func TestMachineSharesFromProcStat(t *testing.T) {
	a, err := parseProcStat(strings.NewReader(procStatBefore))
	if err != nil {
		t.Fatal(err)
	}
	b, err := parseProcStat(strings.NewReader(procStatAfter))
	if err != nil {
		t.Fatal(err)
	}
	// busy: user 800 + system 300 + softirq 100 = 1200; idle 1000 + iowait 100; steal 100
	busy, steal := shares(a, b)
	if math.Abs(busy-100*1200.0/2400) > 1e-9 || math.Abs(steal-100*100.0/2400) > 1e-9 {
		t.Fatalf("busy %.3f%%, steal %.3f%%; want 50%% and 4.167%%", busy, steal)
	}
	for _, bad := range []string{"", "cpu 1 2 3\n", "cpu 1 2 3 x 5 6 7 8\n", "intr 5\n"} {
		if _, err := parseProcStat(strings.NewReader(bad)); err == nil {
			t.Errorf("%q parsed", bad)
		}
	}
}
