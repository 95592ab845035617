package sim

import (
	"bufio"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"

	"github.com/harvest-hpc/harvest/internal/svgchart"
)

// WriteJobsCSV writes id,kind,nodes,submit_s,start_s,end_s,blocked_s for
// every job (start_s and end_s empty when the job did not start or end;
// blocked_s is the pilots' harm, Record.Blocked). Foreign jobs keep their
// workload id, so two runs compare job by job; pilots are
// "pilot-<batch id>".
func WriteJobsCSV(w io.Writer, res Result) error {
	bw := bufio.NewWriter(w)
	fmt.Fprintln(bw, "id,kind,nodes,submit_s,start_s,end_s,blocked_s")
	opt := func(v int64) string {
		if v < 0 {
			return ""
		}
		return strconv.FormatInt(v, 10)
	}
	for _, r := range res.Records {
		id, kind := r.Name, r.Label
		if r.Pilot {
			id, kind = r.ID, "pilot"
		}
		fmt.Fprintf(bw, "%s,%s,%d,%d,%s,%s,%d\n", id, kind, r.Nodes, r.Submit, opt(r.Start), opt(r.End), r.Blocked)
	}
	return bw.Flush()
}

// WritePlot writes an SVG of node use over time as stacked areas: foreign
// jobs, pilots running tasks, idle pilots, idle nodes. Time is averaged
// into bins so a year-long trace stays a small file.
func WritePlot(w io.Writer, res Result, title string) error {
	span := max(res.SpanS, 1)
	steps := make([]svgchart.Step, len(res.Usage))
	for k, s := range res.Usage {
		steps[k] = svgchart.Step{T: s.T, Values: []float64{float64(s.Foreign), float64(s.PilotBusy), float64(s.PilotIdle)}}
	}
	c := svgchart.Chart{
		Width: 1000, Height: 420, From: res.From, To: res.From + span, Max: float64(res.Nodes),
		Layers:     []svgchart.Layer{{Name: "foreign jobs", Color: "#4c72b0"}, {Name: "pilots running tasks", Color: "#55a868"}, {Name: "idle pilots", Color: "#f0b840"}},
		Background: svgchart.Layer{Name: "idle nodes", Color: "#eeeeee"},
		Steps:      steps,
		Bins:       600,
		Axes: &svgchart.Axes{Title: title, YLabel: fmt.Sprintf("nodes (of %d)", res.Nodes),
			Note: fmt.Sprintf("utilisation %.2f%%, useful %.2f%%", 100*res.Utilization, 100*res.UsefulUtilization)},
	}
	return c.WriteSVG(w)
}

// WriteSummary prints the result for a person.
func WriteSummary(w io.Writer, res Result) error {
	bw := bufio.NewWriter(w)
	span := float64(res.SpanS)
	held := "nodes"
	if res.CoresPerNode > 1 {
		fmt.Fprintf(bw, "mode %s, %d nodes x %d cores (shared), span %s (from %d s)\n", res.Mode, res.Nodes, res.CoresPerNode, human(res.SpanS), res.From)
		held = "cores"
	} else {
		fmt.Fprintf(bw, "mode %s, %d nodes, span %s (from %d s)\n", res.Mode, res.Nodes, human(res.SpanS), res.From)
	}
	fmt.Fprintf(bw, "utilisation         %6.2f%% (%s held by any job or pilot)\n", 100*res.Utilization, held)
	fmt.Fprintf(bw, "useful utilisation  %6.2f%% (foreign jobs + pilots running tasks)\n", 100*res.UsefulUtilization)
	if res.CoresPerNode > 1 {
		fmt.Fprintf(bw, "idle on shared      %6.2f%% (cores idle on nodes jobs share: at most what pilots on idle cores would add)\n", 100*res.SharedIdle)
	}
	fmt.Fprintf(bw, "foreign jobs        %d submitted, %d started, mean wait %.0f s (%.1f min), p99 %d s, max %d s\n",
		res.Foreign.Jobs, res.Foreign.Started, res.Foreign.MeanWaitS, res.Foreign.MeanWaitS/60, res.Foreign.P99WaitS, res.Foreign.MaxWaitS)
	if b := res.Foreign.Blocked; res.Mode != Baseline {
		fmt.Fprintf(bw, "blocked by pilots   %d jobs, %d s in all, p99 %d s, max %d s (pending while the scheduler would have started them without pilots)\n",
			b.Jobs, b.SumS, b.P99S, b.MaxS)
	}
	fmt.Fprintf(bw, "foreign users       %s\n", ScheduleLine(res.Foreign.BoundedSlowdown, res.Foreign.Users))
	if res.Harvest.BoundedSlowdown.Jobs > 0 {
		what := "each task a job"
		if res.Mode == Baseline {
			what = "calibration batch jobs"
		}
		fmt.Fprintf(bw, "harvest users       %s (%s)\n", ScheduleLine(res.Harvest.BoundedSlowdown, res.Harvest.Users), what)
	}
	h := res.Harvest
	if res.Mode != Baseline {
		fmt.Fprintf(bw, "harvest             %d pilots, %.2f nodes held on average, %.2f running tasks; %d node-s held, %d useful, %d task-s lost\n",
			h.Pilots, float64(h.NodeSeconds)/span, float64(h.UsefulNodeSeconds)/span, h.NodeSeconds, h.UsefulNodeSeconds, h.LostTaskSeconds)
	}
	for _, j := range h.Jobs {
		if j.FinishS == nil {
			fmt.Fprintf(bw, "  harvest job %-8s submitted %7d s, not finished\n", j.ID, j.SubmitS)
			continue
		}
		fmt.Fprintf(bw, "  harvest job %-8s submitted %7d s, finished %7d s, waited %.2f min\n", j.ID, j.SubmitS, *j.FinishS, float64(*j.FinishS-j.SubmitS)/60)
	}
	for _, k := range slices.Sorted(maps.Keys(res.Skipped)) {
		fmt.Fprintf(bw, "skipped: %d %s\n", res.Skipped[k], k)
	}
	for _, k := range slices.Sorted(maps.Keys(res.Adjusted)) {
		fmt.Fprintf(bw, "adjusted: %d %s\n", res.Adjusted[k], k)
	}
	return bw.Flush()
}

// ScheduleLine prints the literature's schedule figures (metrics.go) in
// one line: bounded slowdown, per-user NUWT and fairness F.
func ScheduleLine(s Slowdown, u Users) string {
	users := "users"
	if u.Count == 1 {
		users = "user"
	}
	return fmt.Sprintf("bounded slowdown mean %.2f (max %.1f) over %d jobs; %d %s, mean NUWT %.3g, fairness F %.3g",
		s.Mean, s.Max, s.Jobs, u.Count, users, u.MeanNUWT, u.Fairness)
}
