package sim

import (
	"bufio"
	"fmt"
	"io"
)

// Delays compares the starts of the foreign jobs of a run with a baseline
// run of the same workload (no harvesting): the delay harvesting imposed
// on each, as scheduled (a job's delay also shifts the jobs queued behind
// it). Jobs that did not start in the baseline are not compared.
type Delays struct {
	// Jobs counts the foreign jobs that started in the baseline.
	Jobs int `json:"jobs"`
	// Later counts those that started later, or not at all
	// (NotStarted); LaterThan2S and LaterThan70S those more than 2 s and
	// 70 s later.
	Later        int `json:"later"`
	LaterThan2S  int `json:"later_than_2s"`
	LaterThan70S int `json:"later_than_70s"`
	NotStarted   int `json:"not_started"`
	// Earlier counts the jobs that started earlier than in the baseline
	// (a backfill schedule shifted by a delay can also help some jobs).
	Earlier int `json:"earlier"`
	// MaxS is the longest delay, TotalS the sum of all delays, seconds.
	MaxS   int64 `json:"max_s"`
	TotalS int64 `json:"total_s"`
}

// CompareStarts measures run's foreign jobs against base's.
func CompareStarts(base, run Result) Delays {
	starts := map[string]int64{}
	for _, r := range run.Records {
		if !r.Pilot && r.Label == "foreign" && r.Start >= 0 {
			starts[r.Name] = r.Start
		}
	}
	var d Delays
	end := run.From + run.SpanS
	for _, r := range base.Records {
		if r.Pilot || r.Label != "foreign" || r.Start < 0 {
			continue
		}
		d.Jobs++
		s, ok := starts[r.Name]
		if !ok {
			// Not started by the end of the run: late by at least that much.
			d.NotStarted++
			s = max(end, r.Start+1)
		}
		delay := s - r.Start
		switch {
		case delay > 0:
			d.Later++
			d.TotalS += delay
			d.MaxS = max(d.MaxS, delay)
			if delay > 2 {
				d.LaterThan2S++
			}
			if delay > 70 {
				d.LaterThan70S++
			}
		case delay < 0:
			d.Earlier++
		}
	}
	return d
}

// ModeResult is one give-back mode of a side-by-side comparison.
type ModeResult struct {
	GiveBack GiveBack `json:"give_back"`
	Result   Result   `json:"result"`
	Delays   Delays   `json:"delays"`
}

// WriteModes writes the give-back modes side by side, measured against the
// baseline: the harvest's figures and the delays of the foreign jobs. The
// control (the baseline with a slower scheduler) comes first: its late
// job-hours are what any small perturbation costs, and "vs control" is
// each mode's late job-hours over the control's.
func WriteModes(w io.Writer, base Result, control ModeResult, modes []ModeResult) error {
	bw := bufio.NewWriter(w)
	fmt.Fprintf(bw, "%d nodes, span %s; baseline: %d foreign jobs started, mean wait %.0f s\n",
		base.Nodes, human(base.SpanS), base.Foreign.Started, base.Foreign.MeanWaitS)
	// later...total late: starts against the baseline, job by job;
	// blocked: the simulator's own harm measure (time a job waited while
	// it could have run had the pilots been absent).
	fmt.Fprintf(bw, "%-18s %7s %9s %9s %9s %9s %7s %7s %7s %9s %9s %8s %8s %8s %8s\n",
		"give-back", "pilots", "held", "useful", "lost", "wait", "later", ">2s", ">70s", "max late", "tot late", "vs", "blocked", "blocked", "blocked")
	fmt.Fprintf(bw, "%-18s %7s %9s %9s %9s %9s %7s %7s %7s %9s %9s %8s %8s %8s %8s\n",
		"", "", "(node-h)", "(node-h)", "(task-h)", "(mean s)", "(jobs)", "(jobs)", "(jobs)", "(s)", "(job-h)", "control", "(jobs)", "(job-h)", "(max s)")
	for _, m := range append([]ModeResult{control}, modes...) {
		h, d, b := m.Result.Harvest, m.Delays, m.Result.Foreign.Blocked
		fmt.Fprintf(bw, "%-18s %7d %9.0f %9.0f %9.1f %9.0f %7d %7d %7d %9d %9.1f %8s %8d %8.1f %8d\n",
			m.GiveBack, h.Pilots, float64(h.NodeSeconds)/3600, float64(h.UsefulNodeSeconds)/3600, float64(h.LostTaskSeconds)/3600,
			m.Result.Foreign.MeanWaitS, d.Later, d.LaterThan2S, d.LaterThan70S, d.MaxS, float64(d.TotalS)/3600,
			VsControl(d, control.Delays), b.Jobs, float64(b.SumS)/3600, b.MaxS)
	}
	return bw.Flush()
}

// VsControl writes late job-hours as a multiple of the control's: "1.19x"
// ("-" when the control has none).
func VsControl(d, control Delays) string {
	if control.TotalS == 0 {
		return "-"
	}
	return fmt.Sprintf("%.2fx", float64(d.TotalS)/float64(control.TotalS))
}
