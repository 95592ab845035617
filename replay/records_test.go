package replay

import (
	"math"
	"strings"
	"testing"
	"time"
)

func TestOutcomeResultCountsJobsPilotsAndTasks(t *testing.T) {
	t0 := time.Unix(1_800_000_000, 0)
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	p := Plan{SpanS: 100, Jobs: []Job{
		{ID: "a", User: "alice", Nodes: 2, SubmitS: 0, RunS: 50, LimitMin: 1},
		{ID: "b", User: "bob", Nodes: 4, SubmitS: 10, RunS: 20, LimitMin: 1},
	}}
	o := Outcome{Kind: Polling, T0: t0,
		Foreign: map[string]Completion{
			"a": {JobID: "11", State: "COMPLETED", Nodes: 2, Submit: at(0), Start: at(0), End: at(50), nodeList: "n[1-2]", hasStart: true, hasEnd: true},
			"b": {JobID: "12", State: "COMPLETED", Nodes: 4, Submit: at(10), Start: at(30), End: at(50), nodeList: "n[1-4]", hasStart: true, hasEnd: true},
		},
		// Pilot 20 held a node from 0 to 30 and was cancelled for b.
		Pilots: []Completion{{JobID: "20", Name: "harvest-pilot", State: "CANCELLED", Nodes: 1, Submit: at(-2), Start: at(0), End: at(30), nodeList: "n3", hasStart: true, hasEnd: true}},
		// It ran a task 0-10 and one from 20 that its cancel cut short.
		Tasks: []TaskRun{{Task: "1", Pilot: "20", Start: float64(t0.Unix()), End: float64(t0.Unix() + 10)},
			{Task: "2", Pilot: "20", Start: float64(t0.Unix() + 20), End: math.NaN()}},
	}
	r := o.Result(p, 4, 100, "carol")
	// Held: foreign 2x50 + 4x20 = 180, pilot 30; useful: 180 + 10 + 10 (the
	// lost task ran 20..30) over 4 x 100 node-s.
	if r.Utilization != 210.0/400 || r.UsefulUtilization != 200.0/400 {
		t.Errorf("utilisation %v useful %v", r.Utilization, r.UsefulUtilization)
	}
	if r.Harvest.LostTaskSeconds != 10 || r.Harvest.Pilots != 1 || r.Harvest.UsefulNodeSeconds != 20 || r.Harvest.NodeSeconds != 30 {
		t.Errorf("harvest %+v", r.Harvest)
	}
	if r.Foreign.Started != 2 || r.Foreign.MaxWaitS != 20 || r.Foreign.MeanWaitS != 10 {
		t.Errorf("foreign %+v", r.Foreign)
	}
	if r.Harvest.BoundedSlowdown.Jobs != 1 {
		t.Errorf("one task completed: %+v", r.Harvest.BoundedSlowdown)
	}
	// Schedule figures (issue 18 item 6) of the real run: a waited 0 s for
	// 2x50 node-s of work, b 20 s for 4x20: bounded slowdowns 1 and
	// (20+20)/20 = 2; NUWT alice 0, bob 20/80, F = 2 x 0.125^2.
	if sd, u := r.Foreign.BoundedSlowdown, r.Foreign.Users; sd.Mean != 1.5 || sd.Max != 2 || u.Count != 2 ||
		u.NUWT["bob"] != 0.25 || u.MeanNUWT != 0.125 || u.Fairness != 0.03125 {
		t.Errorf("foreign schedule figures %+v %+v", sd, u)
	}
	// Against a baseline in which b started at once: 20 s later.
	base := o
	base.Kind = Baseline
	bb := base.Foreign["b"]
	bb.Start = at(10)
	base.Foreign = map[string]Completion{"a": o.Foreign["a"], "b": bb}
	base.Pilots, base.Tasks = nil, nil
	br := base.Result(p, 4, 100, "carol")
	s := CompareShift(br, r, 10)
	if s.Jobs != 2 || s.Later != 1 || s.Earlier != 0 || s.MaxLaterS != 20 || s.LateS != 20 {
		t.Errorf("shift %+v", s)
	}
	// A control 5 s late in all: the harvest run's 20 late job-seconds
	// read as 4x the control's.
	noise := Shift{ThresholdS: 10, Jobs: 2, LateS: 5}
	if f := CompareFidelity(br, r); f.Jobs != 2 || f.Exact != 1 || f.MeanS != -10 || f.MaxS != 20 || f.P50S != 0 {
		t.Errorf("fidelity %+v", f)
	}
	// The summary prints them for the real run and the simulated one
	// (here the baseline stands in for it), foreign and harvest users.
	var out strings.Builder
	rep := Report{Runs: []RunReport{{Kind: Polling, Result: r, Sim: br, Shift: &s}}, NoiseFloor: &noise}
	if err := WriteSummary(&out, rep); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"polling      foreign  bounded slowdown mean 1.50 (max 2.0) over 2 jobs; 2 users, mean NUWT 0.125, fairness F 0.0312 | bounded slowdown mean 1.00 (max 1.0) over 2 jobs; 2 users, mean NUWT 0, fairness F 0\n",
		"polling      harvest  bounded slowdown mean 1.00 (max 1.0) over 1 jobs; 1 user, mean NUWT 0, fairness F 0 |",
		"      1      0      20      20   4.00x",
		"vs ctl: over the second baseline run's 5 (the control",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("summary lacks %q:\n%s", want, out.String())
		}
	}
}

// A run with a lead (the pool running before the window opens): pilots
// submitted, started or ended before T0 count from 0, their records say 0
// for those times, and a pilot that ended in the lead holds nothing of
// the window.
func TestOutcomeResultCountsTheLeadsPilotsFromTheWindowsStart(t *testing.T) {
	t0 := time.Unix(1_800_000_000, 0)
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	o := Outcome{Kind: Polling, T0: t0, LeadS: 30, Foreign: map[string]Completion{},
		Pilots: []Completion{
			{JobID: "20", Name: "harvest-pilot", State: "CANCELLED", Nodes: 1, Submit: at(-29), Start: at(-29), End: at(40), nodeList: "n1", hasStart: true, hasEnd: true},
			{JobID: "21", Name: "harvest-pilot", State: "CANCELLED", Nodes: 1, Submit: at(-29), Start: at(-28), End: at(-20), nodeList: "n2", hasStart: true, hasEnd: true},
		},
		Tasks: []TaskRun{{Task: "1", Pilot: "20", Start: float64(t0.Unix() - 10), End: float64(t0.Unix() + 10)}},
	}
	r := o.Result(Plan{SpanS: 100}, 2, 100, "carol")
	// Pilot 20 holds n1 0-40 of the window, busy 0-10 of it.
	if r.Utilization != 40.0/200 || r.UsefulUtilization != 10.0/200 || r.Harvest.NodeSeconds != 40 {
		t.Errorf("utilisation %v useful %v harvest %+v", r.Utilization, r.UsefulUtilization, r.Harvest)
	}
	for _, rec := range r.Records {
		want := [3]int64{0, 0, 40}
		if rec.ID == "pilot-21" {
			want[2] = 0
		}
		if got := [3]int64{rec.Submit, rec.Start, rec.End}; got != want {
			t.Errorf("%s: submit, start, end %v, want %v", rec.ID, got, want)
		}
	}
	if r.Harvest.Pilots != 2 {
		t.Errorf("%d pilots started, want 2 (the lead's count, as in the simulation)", r.Harvest.Pilots)
	}
}
