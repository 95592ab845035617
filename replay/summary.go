package replay

import (
	"bufio"
	"fmt"
	"io"
	"maps"
	"slices"

	"github.com/harvest-hpc/harvest/sim"
)

// WriteSummary prints the runs side by side: what SLURM did, against the
// first baseline run, and how far the simulator was from it.
func WriteSummary(w io.Writer, rep Report) error {
	bw := bufio.NewWriter(w)
	p := rep.Plan
	fmt.Fprintf(bw, "window [%d, %d) of the trace: %d jobs on %d nodes (traced machine: %d processors, from %s), scale %g, offered load %.2f; measured over %d s\n",
		p.From, p.To, p.Jobs, p.Nodes, p.TraceNodes, p.TraceNodesFrom, p.Scale, p.OfferedLoad, p.SpanS)
	for _, k := range slices.Sorted(maps.Keys(p.Skipped)) {
		fmt.Fprintf(bw, "skipped: %d %s\n", p.Skipped[k], k)
	}
	for _, k := range slices.Sorted(maps.Keys(rep.Skipped)) {
		fmt.Fprintf(bw, "run %s skipped: %s\n", k, rep.Skipped[k])
	}
	fmt.Fprintln(bw)
	fmt.Fprintf(bw, "%-12s %7s %7s %13s %8s %9s %8s %6s %6s %7s %7s %7s %7s | %-18s | %s\n",
		"run", "util", "useful", "harvested s", "lost s", "mean wait", "p99 wait", "later", "earl.", "max", "late s", "vs ctl", "blocked",
		"sim: util / wait", "sim - real start: mean p50 p90 max (exact)")
	seen := map[Kind]int{}
	for _, r := range rep.Runs {
		seen[r.Kind]++
		res := r.Result
		later, earlier, maxLater, late, vsControl := "-", "-", "-", "-", "-"
		if r.Shift != nil {
			later, earlier, maxLater = fmt.Sprint(r.Shift.Later), fmt.Sprint(r.Shift.Earlier), fmt.Sprint(r.Shift.MaxLaterS)
			late = fmt.Sprint(r.Shift.LateS)
			if n := rep.NoiseFloor; n != nil && n.LateS > 0 && r.Kind.Harvested() {
				vsControl = fmt.Sprintf("%.2fx", float64(r.Shift.LateS)/float64(n.LateS))
			}
		}
		f := r.Fidelity
		fmt.Fprintf(bw, "%-12s %6.1f%% %6.1f%% %6d/%-6d %8d %9.0f %8d %6s %6s %7s %7s %7s %7d | %6.1f%% / %7.0f | %+.0f %d %d %d (%d of %d)\n",
			RunName(r.Kind, seen[r.Kind]), 100*res.Utilization, 100*res.UsefulUtilization,
			res.Harvest.NodeSeconds, res.Harvest.UsefulNodeSeconds, res.Harvest.LostTaskSeconds,
			res.Foreign.MeanWaitS, res.Foreign.P99WaitS, later, earlier, maxLater, late, vsControl, r.Sim.Foreign.Blocked.SumS,
			100*r.Sim.Utilization, r.Sim.Foreign.MeanWaitS, f.MeanS, f.P50S, f.P90S, f.MaxS, f.Exact, f.Jobs)
		if len(r.Unfinished) > 0 {
			fmt.Fprintf(bw, "  %d foreign jobs did not end by the deadline: %v\n", len(r.Unfinished), r.Unfinished)
		}
	}
	fmt.Fprintln(bw, "\nSLURM's reaction (from the job completion log: on each node, from its job's submit or the end that freed it to the job's start) and the simulator's latency:")
	clear(seen)
	for _, r := range rep.Runs {
		seen[r.Kind]++
		fmt.Fprintf(bw, "%-12s %s\n", RunName(r.Kind, seen[r.Kind]), r.Reaction)
	}
	fmt.Fprintln(bw, "\nschedule figures (Klusáček 2011; bounded slowdown threshold 10 s, NUWT = wait / work), real | simulated:")
	clear(seen)
	for _, r := range rep.Runs {
		seen[r.Kind]++
		name := RunName(r.Kind, seen[r.Kind])
		fmt.Fprintf(bw, "%-12s foreign  %s | %s\n", name, sim.ScheduleLine(r.Result.Foreign.BoundedSlowdown, r.Result.Foreign.Users),
			sim.ScheduleLine(r.Sim.Foreign.BoundedSlowdown, r.Sim.Foreign.Users))
		if r.Kind.Harvested() {
			fmt.Fprintf(bw, "%-12s harvest  %s | %s\n", name, sim.ScheduleLine(r.Result.Harvest.BoundedSlowdown, r.Result.Harvest.Users),
				sim.ScheduleLine(r.Sim.Harvest.BoundedSlowdown, r.Sim.Harvest.Users))
		}
	}
	fmt.Fprintf(bw, "\nlater/earl.: foreign jobs started more than %d s later / earlier than in the first baseline run",
		thresholdOf(rep))
	if rep.NoiseFloor != nil {
		fmt.Fprintf(bw, "; between two baseline runs (the noise floor): %d later, %d earlier", rep.NoiseFloor.Later, rep.NoiseFloor.Earlier)
	}
	fmt.Fprint(bw, ".\nlate s: the foreign jobs' late job-seconds against the first baseline run (every positive delay, summed)")
	if rep.NoiseFloor != nil {
		fmt.Fprintf(bw, "; vs ctl: over the second baseline run's %d (the control: what a rerun of the same schedule costs)", rep.NoiseFloor.LateS)
	}
	fmt.Fprintln(bw, ".\nblocked: the simulator's harm figure on the same window (seconds foreign jobs waited while pilots were in the way).")
	return bw.Flush()
}

func thresholdOf(rep Report) int64 {
	for _, r := range rep.Runs {
		if r.Shift != nil {
			return r.Shift.ThresholdS
		}
	}
	return 0
}
