package bench

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
)

// cpuTimes is the machine's CPU time by kind, from /proc/stat's "cpu"
// line (all CPUs, in clock ticks).
type cpuTimes struct {
	busy, idle, steal uint64
}

// parseProcStat reads the aggregate "cpu" line of /proc/stat: user nice
// system idle iowait irq softirq steal (guest time is already counted in
// user). Steal is time the hypervisor ran something else while this VM's
// vCPU wanted to run: on a shared VM it shows up in every latency the
// bench measures, and no change to harvest can remove it.
func parseProcStat(r io.Reader) (cpuTimes, error) {
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) == 0 || f[0] != "cpu" {
			continue
		}
		if len(f) < 9 {
			return cpuTimes{}, fmt.Errorf("/proc/stat: cpu line with %d fields", len(f))
		}
		var v [8]uint64
		for i := range v {
			n, err := strconv.ParseUint(f[i+1], 10, 64)
			if err != nil {
				return cpuTimes{}, fmt.Errorf("/proc/stat: cpu field %d: %w", i+1, err)
			}
			v[i] = n
		}
		return cpuTimes{busy: v[0] + v[1] + v[2] + v[5] + v[6], idle: v[3] + v[4], steal: v[7]}, nil
	}
	if err := sc.Err(); err != nil {
		return cpuTimes{}, err
	}
	return cpuTimes{}, fmt.Errorf("/proc/stat: no cpu line")
}

// readCPUTimes reads /proc/stat; ok is false where there is none.
func readCPUTimes() (cpuTimes, bool) {
	f, err := os.Open("/proc/stat")
	if err != nil {
		return cpuTimes{}, false
	}
	defer f.Close()
	t, err := parseProcStat(f)
	return t, err == nil
}

// shares returns the busy and stolen percentages of the machine's CPU
// time between a and b.
func shares(a, b cpuTimes) (busy, steal float64) {
	db, di, ds := b.busy-a.busy, b.idle-a.idle, b.steal-a.steal
	total := db + di + ds
	if total == 0 {
		return 0, 0
	}
	return 100 * float64(db) / float64(total), 100 * float64(ds) / float64(total)
}
