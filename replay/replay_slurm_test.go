package replay

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/harvest-hpc/harvest/cluster"
	"github.com/harvest-hpc/harvest/internal/slurmtest"
	"github.com/harvest-hpc/harvest/sim"
)

// lightTrace is a seeded trace for an 8-node machine whose jobs are wider
// than half of it and mostly arrive after the previous one ended, so that
// a delay harvesting imposes on one job is not compounded by queueing.
func lightTrace(seed uint64, n int) sim.Workload {
	r := rand.New(rand.NewPCG(seed, 3))
	w := sim.Workload{Format: "swf", MaxNodes: 8}
	t := int64(0)
	for i := range n {
		t += 20 + r.Int64N(15)
		run := 5 + r.Int64N(20)
		w.Jobs = append(w.Jobs, sim.Job{ID: fmt.Sprint(100 + i), User: fmt.Sprint(i % 3), Nodes: 5 + r.IntN(4),
			TimeLimit: cluster.Seconds(60), RunTime: run, Wait: -1, Submit: t})
	}
	return w
}

// TestReplayOnRealSLURM replays a short trace on the real mini-cluster,
// without and with harvest (polling and preemption give-back), and checks
// what issue 12 asks of the CI replay: every foreign job ran in every run,
// and none started later than in the baseline by more than one poll, the
// policy's mini time and the scheduler's and the log's few seconds; and
// what issue 34 asks: the simulator's utilisation is within 2 points of
// the real one in every run.
func TestReplayOnRealSLURM(t *testing.T) {
	c := slurmtest.RequireWith(t, 8, slurmtest.Options{JobComp: true, Preempt: true})
	c.Script(t, "users", "alice", "bob", "carol")
	// The agent, pilots and the harvest user run the binary: it lives in
	// the cluster's shared directory, readable by all.
	work, err := os.MkdirTemp(filepath.Join(c.Lab, "shared"), "replay-test-")
	if err != nil {
		t.Fatal(err)
	}
	// HARVEST_REPLAY_KEEP=1 keeps the runs' directories (agent and pilot
	// logs, dumped rounds, the tasks' ledger) and the report, to study a
	// run: they are in the cluster's shared directory.
	keep := os.Getenv("HARVEST_REPLAY_KEEP") != ""
	t.Cleanup(func() {
		if keep {
			t.Logf("kept %s", work)
			return
		}
		os.RemoveAll(work)
	})
	if err := os.Chmod(work, 0o755); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(work, "harvest")
	build := exec.Command("go", "build", "-o", bin, "./cmd/harvest")
	build.Dir = c.Root
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build harvest: %v\n%s", err, out)
	}
	w := lightTrace(1, 5)
	cfg := Config{
		Map:            MapConfig{From: 0, To: w.Jobs[len(w.Jobs)-1].Submit + 1, Nodes: 8, Scale: 1, Users: []string{"alice", "bob"}},
		Runs:           []Kind{Baseline, Polling, Preemption},
		ShiftThreshold: 10, SimLatency: -1, SimReservations: 1000,
		Run: RunConfig{Harvest: bin, WorkDir: work, JobCompLog: c.JobCompLog(), Location: time.Local,
			Poll: 2 * time.Second, Margin: 30 * time.Second, MiniTime: 10 * time.Second, TaskSeconds: 3,
			HarvestUser: "carol", Drain: 3 * time.Minute, Tag: "harvest-pilot", Log: testWriter{t},
			// A site's agent runs all the time: the window finds the pool
			// at its size, as the simulation does (in the 30 s the pool
			// took 11-19 s to reach 8 pilots on a loaded machine).
			Lead: 30 * time.Second},
	}
	rep, err := Replay(context.Background(), w, cfg, func(Kind) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	if keep {
		if b, err := json.MarshalIndent(rep, "", " "); err == nil {
			os.WriteFile(filepath.Join(work, "report.json"), b, 0o644)
		}
	}
	if len(rep.Runs) != 3 {
		t.Fatalf("%d runs, want 3", len(rep.Runs))
	}
	base, harv := rep.Runs[0], rep.Runs[1]
	for _, r := range rep.Runs {
		if len(r.Unfinished) > 0 || r.Result.Foreign.Started != len(w.Jobs) {
			t.Errorf("%s: %d of %d foreign jobs started, unfinished %v", r.Kind, r.Result.Foreign.Started, len(w.Jobs), r.Unfinished)
		}
		f := r.Fidelity
		t.Logf("%s: utilisation sim %.1f%% / real %.1f%%; sim - real start per job: mean %.1f s, p50 %d, p90 %d, max %d, %d of %d in the same second; pilots at the window's start: sim %d, real %d",
			r.Kind, 100*r.Sim.Utilization, 100*r.Result.Utilization, f.MeanS, f.P50S, f.P90S, f.MaxS, f.Exact, f.Jobs, pilotsAt(r.Sim, 0), pilotsAt(r.Result, 0))
		t.Logf("%s: SLURM's reaction: %d events, node-weighted mean delay %.2f s; the simulation's latency per event (count by seconds from 0): %v",
			r.Kind, len(r.Reaction.Events), r.Reaction.MeanS, r.Reaction.Latencies)
		// Issue 34: 2 points in every mode. The harvest runs open the
		// window on a running pool (Lead: without it the pool's growth
		// under the machine's load moved one mode's real utilisation by
		// up to 8.6 points between runs), and each run's simulation takes
		// SLURM's reaction measured in that run, event by event
		// (SimLatency -1: 0 s on a quiet machine, 1 s at some arrivals
		// and refills on a loaded one, 5-8 nodes each). With the fixed
		// 1 s the simulator was 3.4 points low to 0.5 high, within 2
		// points in 5 of 12 harvest runs; with the measured reaction
		// 0.8 low to 1.7 high in 14 (docs/sim.md, "SLURM's reaction,
		// measured per run and fed to its simulation").
		const bound = 0.02
		if math.Abs(f.Utilization) > bound {
			t.Errorf("%s: the simulator's utilisation %.1f%% is %.1f points from the real %.1f%% (bound %.0f)",
				r.Kind, 100*r.Sim.Utilization, 100*f.Utilization, 100*r.Result.Utilization, 100*bound)
		}
	}
	if harv.Result.Harvest.UsefulNodeSeconds == 0 || harv.Result.Harvest.Pilots == 0 {
		t.Fatalf("the harvest did no work: %+v (agent log %s)", harv.Result.Harvest, harv.AgentLog)
	}
	// One poll to see the job, the mini time (case 4), and a few seconds
	// for the scheduler (bf_interval=1), the pilot's exit and the log's
	// whole seconds.
	bound := int64(2 + 10 + 5)
	starts := foreignStarts(base.Result)
	for name, s := range foreignStarts(harv.Result) {
		if d := s - starts[name]; d > bound {
			t.Errorf("job %s started %d s later than in the baseline run (bound %d s)", name, d, bound)
		}
	}
	t.Logf("baseline: util %.1f%%, mean wait %.0f s; harvest: util %.1f%%, useful %.1f%%, %d pilots, shift %+v; sim fidelity %+v",
		100*base.Result.Utilization, base.Result.Foreign.MeanWaitS, 100*harv.Result.Utilization, 100*harv.Result.UsefulUtilization,
		harv.Result.Harvest.Pilots, *harv.Shift, harv.Fidelity)
}

// pilotsAt is the nodes pilots held at t.
func pilotsAt(r sim.Result, t int64) int {
	n := 0
	for _, s := range r.Usage {
		if s.T > t {
			break
		}
		n = s.PilotBusy + s.PilotIdle
	}
	return n
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(b []byte) (int, error) {
	w.t.Log(string(b))
	return len(b), nil
}
