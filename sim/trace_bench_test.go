package sim

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"testing"
)

const month = 30 * 86400

// traceForBench reads HARVEST_TRACE or skips the benchmark.
func traceForBench(b *testing.B) Workload {
	path := os.Getenv("HARVEST_TRACE")
	if path == "" {
		b.Skip("HARVEST_TRACE is not set")
	}
	w, err := ReadFile(path, "")
	if err != nil {
		b.Fatal(err)
	}
	return w
}

// stack lays k consecutive months of w (from its third month on) over one
// another: a machine k times larger with k times the jobs, as a stand-in
// for the large traces (1,024 nodes and more) the repository does not ship.
func stack(w Workload, k int) Workload {
	from := w.Jobs[0].Submit + 60*86400
	out := Workload{Format: w.Format, MaxNodes: w.MaxNodes * k}
	for c := range k {
		lo, hi := from+int64(c)*month, from+int64(c+1)*month
		for _, j := range w.Jobs {
			if j.Submit < lo || j.Submit >= hi {
				continue
			}
			j.ID = strconv.Itoa(c) + "." + j.ID
			j.User = strconv.Itoa(c) + "." + j.User
			j.Submit -= int64(c) * month
			out.Jobs = append(out.Jobs, j)
		}
	}
	out.sortJobs()
	return out
}

// BenchmarkHarvestMonthOfTrace replays one month of a real trace in harvest
// mode, end to end (the reader excluded), on the trace's machine and on a
// machine 10 times larger (10 months stacked):
// HARVEST_TRACE=path/to/trace.swf.gz go test ./sim -run X -bench HarvestMonthOfTrace
func BenchmarkHarvestMonthOfTrace(b *testing.B) {
	w := traceForBench(b)
	for _, k := range []int{1, 10} {
		sw := stack(w, k)
		b.Run(fmt.Sprintf("nodes=%d", sw.MaxNodes), func(b *testing.B) {
			cfg := DefaultConfig()
			cfg.Nodes = sw.MaxNodes
			cfg.From = sw.Jobs[0].Submit
			cfg.To = cfg.From + month
			cfg.HarvestBacklog, cfg.TaskSeconds = 1_000_000_000, 300
			for range b.N {
				if _, err := Run(context.Background(), sw, cfg); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
