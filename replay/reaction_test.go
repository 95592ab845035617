package replay

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// captured is one real run of TestReplayOnRealSLURM kept for tests: its
// lines of slurmctld's job completion log and its first second.
type captured struct {
	Kind Kind      `json:"kind"`
	T0   time.Time `json:"t0"`
	Log  string    `json:"log"` // file in testdata/reaction
}

// loadCaptured reads testdata/reaction/runs.json and each run's log into
// an Outcome, as Run builds it: foreign jobs by their replay-<id> names,
// pilots by the agent's tag.
func loadCaptured(t *testing.T) []Outcome {
	t.Helper()
	b, err := os.ReadFile("testdata/reaction/runs.json")
	if err != nil {
		t.Fatal(err)
	}
	var runs []captured
	if err := json.Unmarshal(b, &runs); err != nil {
		t.Fatal(err)
	}
	var out []Outcome
	for _, r := range runs {
		f, err := os.Open(filepath.Join("testdata/reaction", r.Log))
		if err != nil {
			t.Fatal(err)
		}
		comps, err := ParseJobComp(f, time.UTC) // captured on a machine in UTC
		f.Close()
		if err != nil {
			t.Fatal(err)
		}
		o := Outcome{Kind: r.Kind, T0: r.T0, Foreign: map[string]Completion{}}
		for _, c := range comps {
			if id, ok := strings.CutPrefix(c.Name, "replay-"); ok {
				o.Foreign[id] = c
			} else if c.Name == "harvest-pilot" {
				o.Pilots = append(o.Pilots, c)
			}
		}
		out = append(out, o)
	}
	return out
}

// The captured CI runs (TestReplayOnRealSLURM, 2026-11-27 09:36 and
// 09:39 UTC, load 8-14): what SLURM's job completion log says of each
// start, read as the measurement reads it.
func TestStartsReadSlurmsReactionFromTheCompletionLog(t *testing.T) {
	runs := loadCaptured(t)
	byJob := map[Kind]map[string]Start{}
	for _, o := range runs {
		starts, err := o.Starts()
		if err != nil {
			t.Fatal(err)
		}
		byJob[o.Kind] = map[string]Start{}
		foreign := 0
		for _, s := range starts {
			byJob[o.Kind][s.Job] = s
			if !s.Pilot {
				foreign++
			}
			if s.At < 0 || s.Ready < s.Submit || s.At < s.Ready || s.IdleNodeS > int64(s.Nodes)*(s.At-s.Submit) {
				t.Errorf("%s: %+v", o.Kind, s)
			}
		}
		// The window's 5 foreign jobs; the lead's pilots, started before
		// the window, are not among the starts.
		if foreign != 5 || len(o.Foreign) != 5 {
			t.Errorf("%s: %d foreign starts of %d jobs, want 5", o.Kind, foreign, len(o.Foreign))
		}
	}
	want := []struct {
		kind Kind
		job  string
		s    Start
	}{
		// Polling: the agent cancelled job 102's pilots at 95, a second
		// after its submit (the agent's time, not SLURM's); SLURM started
		// it at 96: 5 nodes idle a second.
		{Polling, "102", Start{Job: "102", Nodes: 5, Submit: 94, Ready: 95, At: 96, IdleNodeS: 5}},
		// Job 104 (8 nodes): SLURM ended the 8 cancelled pilots over 147-149
		// and started the job at 149: 8 node-seconds idle.
		{Polling, "104", Start{Job: "104", Nodes: 8, Submit: 147, Ready: 149, At: 149, IdleNodeS: 8}},
		// The refill after job 100 ended (46): the agent submitted at 47,
		// SLURM started the pilot in the same second.
		{Polling, "pilot-19", Start{Job: "pilot-19", Pilot: true, Nodes: 1, Submit: 47, Ready: 47, At: 47}},
		// Preemption: SLURM preempted job 101's pilots in its submit
		// second and started it a second later.
		{Preemption, "101", Start{Job: "101", Nodes: 5, Submit: 61, Ready: 61, At: 62, IdleNodeS: 5}},
		// Job 103 found its pilots preempted and started in one second.
		{Preemption, "103", Start{Job: "103", Nodes: 5, Submit: 127, Ready: 127, At: 127}},
	}
	for _, w := range want {
		if got := byJob[w.kind][w.job]; got != w.s {
			t.Errorf("%s job %s: %+v, want %+v", w.kind, w.job, got, w.s)
		}
	}
}

func TestMeasureReactionGivesEachEventItsLatency(t *testing.T) {
	runs := loadCaptured(t)
	starts, err := runs[0].Starts()
	if err != nil || runs[0].Kind != Polling {
		t.Fatal(runs[0].Kind, err)
	}
	r := MeasureReaction(starts)
	// 10 seconds with starts ready: 4 where SLURM took a second on the
	// average node (102, 103, 104, and the two pilots submitted at 135
	// it started at 136), 6 where it started them in the second.
	if len(r.Events) != 10 || len(r.Latencies) != 2 || r.Latencies[0] != 6 || r.Latencies[1] != 4 {
		t.Fatalf("events %+v, latencies %v", r.Events, r.Latencies)
	}
	// 19 idle node-seconds over 48 nodes started.
	if r.MeanS != 19.0/48 {
		t.Errorf("mean %v", r.MeanS)
	}
	// Job 103: 3 of its 5 nodes idle a second: 0.6, a second.
	for _, c := range []struct{ t, want int64 }{{95, 1}, {97, 1}, {47, 0}, {62, 0}, {128, 1}, {136, 0}, {150, 1}, {-20, 0}, {300, 0}} {
		if got := r.LatencyAt(c.t, 3); got != c.want {
			t.Errorf("latency at %d: %d, want %d", c.t, got, c.want)
		}
	}
	// Far from any event, the most common latency: the preemption run's
	// is 1 (5 of its 9 events).
	starts, _ = runs[1].Starts()
	if r := MeasureReaction(starts); r.LatencyAt(500, 3) != 1 || r.Latencies[1] != 5 {
		t.Errorf("preemption: %v, latency far from events %d", r.Latencies, r.LatencyAt(500, 3))
	}
	if r := MeasureReaction(nil); r.LatencyAt(10, 3) != 0 || r.MeanS != 0 {
		t.Errorf("no starts: %+v", r)
	}
	// What `harvest replay` prints of it.
	r.SimLatencyS = -1
	if got, want := r.String(), "48 nodes started in 10 seconds, mean 0.40 s after they could; simulated with each one's latency: 0 s at 6, 1 s at 4"; got != want {
		t.Errorf("printed %q, want %q", got, want)
	}
	r.SimLatencyS = 1
	if got := r.String(); !strings.HasSuffix(got, "; simulated with a fixed latency of 1 s") {
		t.Errorf("printed %q", got)
	}
}
