package sim

import (
	"bufio"
	"fmt"
	"io"
	"maps"
	"math"
	"slices"
	"strconv"
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
	const (
		width, height          = 1000.0, 420.0
		left, right, top, bott = 70.0, 20.0, 40.0, 90.0
		bins                   = 600
	)
	pw, ph := width-left-right, height-top-bott
	from, span := res.From, res.SpanS
	if span <= 0 {
		span = 1
	}
	// Average node use per bin, by kind.
	var f, b, i [bins]float64
	u := res.Usage
	for k, s := range u {
		a := max(s.T, from)
		e := from + span
		if k+1 < len(u) {
			e = min(u[k+1].T, from+span)
		}
		for a < e {
			bin := int((a - from) * bins / span)
			binEnd := from + (int64(bin)+1)*span/bins
			if binEnd <= a {
				binEnd = a + 1
			}
			seg := min(e, binEnd) - a
			f[bin] += float64(seg) * float64(s.Foreign)
			b[bin] += float64(seg) * float64(s.PilotBusy)
			i[bin] += float64(seg) * float64(s.PilotIdle)
			a += seg
		}
	}
	binLen := float64(span) / bins
	n := float64(res.Nodes)
	x := func(k int) float64 { return left + pw*float64(k)/bins }
	y := func(v float64) float64 { return top + ph - ph*v/n }

	bw := bufio.NewWriter(w)
	fmt.Fprintf(bw, `<svg xmlns="http://www.w3.org/2000/svg" width="%.0f" height="%.0f" viewBox="0 0 %.0f %.0f" font-family="sans-serif" font-size="12">`+"\n", width, height, width, height)
	fmt.Fprintf(bw, `<rect width="100%%" height="100%%" fill="white"/>`+"\n")
	fmt.Fprintf(bw, `<text x="%.0f" y="22" font-size="15" font-weight="bold">%s</text>`+"\n", left, esc(title))
	// Idle nodes are the background of the plot area.
	fmt.Fprintf(bw, `<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="#eeeeee"/>`+"\n", left, top, pw, ph)
	layers := []struct {
		name, color string
		v           *[bins]float64
	}{{"foreign jobs", "#4c72b0", &f}, {"pilots running tasks", "#55a868", &b}, {"idle pilots", "#f0b840", &i}}
	var base [bins]float64
	for _, l := range layers {
		fmt.Fprintf(bw, `<path fill="%s" d="`, l.color)
		for k := 0; k < bins; k++ {
			v := (base[k] + l.v[k]/binLen)
			cmd := "L"
			if k == 0 {
				cmd = "M"
			}
			fmt.Fprintf(bw, "%s%.1f,%.1f L%.1f,%.1f ", cmd, x(k), y(v), x(k+1), y(v))
		}
		for k := bins - 1; k >= 0; k-- {
			fmt.Fprintf(bw, "L%.1f,%.1f L%.1f,%.1f ", x(k+1), y(base[k]), x(k), y(base[k]))
		}
		fmt.Fprintln(bw, `Z"/>`)
		for k := range base {
			base[k] += l.v[k] / binLen
		}
	}
	// Axes, ticks and labels.
	fmt.Fprintf(bw, `<g stroke="black" fill="none"><path d="M%.1f,%.1f V%.1f H%.1f"/></g>`+"\n", left, top, top+ph, left+pw)
	step := niceStep(n, 6)
	for v := 0.0; v <= n+1e-9; v += step {
		fmt.Fprintf(bw, `<line x1="%.1f" x2="%.1f" y1="%.1f" y2="%.1f" stroke="black"/><text x="%.1f" y="%.1f" text-anchor="end">%g</text>`+"\n", left-5, left, y(v), y(v), left-8, y(v)+4, v)
	}
	unit, uname := 3600.0, "hours"
	if span > 4*86400 {
		unit, uname = 86400, "days"
	}
	tstep := niceStep(float64(span)/unit, 10)
	for t := 0.0; t <= float64(span)/unit+1e-9; t += tstep {
		px := left + pw*t*unit/float64(span)
		fmt.Fprintf(bw, `<line x1="%.1f" x2="%.1f" y1="%.1f" y2="%.1f" stroke="black"/><text x="%.1f" y="%.1f" text-anchor="middle">%g</text>`+"\n", px, px, top+ph, top+ph+5, px, top+ph+18, t)
	}
	fmt.Fprintf(bw, `<text x="%.1f" y="%.1f" text-anchor="middle">time since start (%s)</text>`+"\n", left+pw/2, top+ph+36, uname)
	fmt.Fprintf(bw, `<text transform="translate(18,%.1f) rotate(-90)" text-anchor="middle">nodes (of %d)</text>`+"\n", top+ph/2, res.Nodes)
	legend := append(layers, struct {
		name, color string
		v           *[bins]float64
	}{"idle nodes", "#eeeeee", nil})
	lx := left
	for _, l := range legend {
		fmt.Fprintf(bw, `<rect x="%.1f" y="%.1f" width="14" height="14" fill="%s" stroke="#888"/><text x="%.1f" y="%.1f">%s</text>`+"\n", lx, height-26, l.color, lx+20, height-14, l.name)
		lx += 40 + 7*float64(len(l.name))
	}
	fmt.Fprintf(bw, `<text x="%.1f" y="%.1f" text-anchor="end">utilisation %.2f%%, useful %.2f%%</text>`+"\n", width-right, 22.0, 100*res.Utilization, 100*res.UsefulUtilization)
	fmt.Fprintln(bw, `</svg>`)
	return bw.Flush()
}

// niceStep returns a 1, 2 or 5 times a power of ten step giving about n ticks.
func niceStep(span float64, n int) float64 {
	if span <= 0 {
		return 1
	}
	raw := span / float64(n)
	p := math.Pow(10, math.Floor(math.Log10(raw)))
	for _, m := range []float64{1, 2, 5, 10} {
		if m*p >= raw {
			return m * p
		}
	}
	return 10 * p
}

func esc(s string) string {
	out := make([]byte, 0, len(s))
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '<':
			out = append(out, "&lt;"...)
		case '>':
			out = append(out, "&gt;"...)
		case '&':
			out = append(out, "&amp;"...)
		default:
			out = append(out, s[i])
		}
	}
	return string(out)
}

// WriteSummary prints the result for a person.
func WriteSummary(w io.Writer, res Result) error {
	bw := bufio.NewWriter(w)
	span := float64(res.SpanS)
	fmt.Fprintf(bw, "mode %s, %d nodes, span %s (from %d s)\n", res.Mode, res.Nodes, human(res.SpanS), res.From)
	fmt.Fprintf(bw, "utilisation         %6.2f%% (nodes held by any job or pilot)\n", 100*res.Utilization)
	fmt.Fprintf(bw, "useful utilisation  %6.2f%% (foreign jobs + pilots running tasks)\n", 100*res.UsefulUtilization)
	fmt.Fprintf(bw, "foreign jobs        %d submitted, %d started, mean wait %.0f s (%.1f min), p99 %d s, max %d s\n",
		res.Foreign.Jobs, res.Foreign.Started, res.Foreign.MeanWaitS, res.Foreign.MeanWaitS/60, res.Foreign.P99WaitS, res.Foreign.MaxWaitS)
	if b := res.Foreign.Blocked; res.Mode != Baseline {
		fmt.Fprintf(bw, "blocked by pilots   %d jobs, %d s in all, p99 %d s, max %d s (pending while the scheduler would have started them without pilots)\n",
			b.Jobs, b.SumS, b.P99S, b.MaxS)
	}
	fmt.Fprintf(bw, "foreign users       %s\n", scheduleLine(res.Foreign.BoundedSlowdown, res.Foreign.Users))
	if res.Harvest.BoundedSlowdown.Jobs > 0 {
		what := "each task a job"
		if res.Mode == Baseline {
			what = "calibration batch jobs"
		}
		fmt.Fprintf(bw, "harvest users       %s (%s)\n", scheduleLine(res.Harvest.BoundedSlowdown, res.Harvest.Users), what)
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

func scheduleLine(s Slowdown, u Users) string {
	users := "users"
	if u.Count == 1 {
		users = "user"
	}
	return fmt.Sprintf("bounded slowdown mean %.2f (max %.1f) over %d jobs; %d %s, mean NUWT %.3g, fairness F %.3g",
		s.Mean, s.Max, s.Jobs, u.Count, users, u.MeanNUWT, u.Fairness)
}
