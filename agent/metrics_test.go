package agent

import (
	"context"
	"errors"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/harvest-hpc/harvest/adapters"
	"github.com/harvest-hpc/harvest/adapters/adaptertest"
	"github.com/harvest-hpc/harvest/agent/policy"
	"github.com/harvest-hpc/harvest/cluster"
)

func metered(t *testing.T, m *adaptertest.Memory, src DemandSource) (*Reconciler, *Metrics) {
	t.Helper()
	mx := NewMetrics(nil)
	r := NewReconciler(mx.InstrumentAdapter(m), src, testConfig(), nil)
	r.OnRound = mx.ObserveRound
	return r, mx
}

func round(t *testing.T, r *Reconciler) RoundResult {
	t.Helper()
	res, err := r.Round(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return res
}

func TestRoundMetricsFollowTheScriptedRounds(t *testing.T) {
	m := adaptertest.NewMemory(6)
	m.AddJob(cluster.Job{ID: "f1", User: "u1", State: cluster.Running, Nodes: 2, TimeLimit: 3600, RunTime: 60})
	busy := map[string]bool{}
	src := demandFunc(func() DemandInfo { return DemandInfo{Busy: busy} })
	r, mx := metered(t, m, src)

	// Round 1: nobody waits, so the 4 idle nodes get pilots.
	res := round(t, r)
	if len(res.Submitted) != 4 {
		t.Fatalf("submitted %d, want 4 (%s)", len(res.Submitted), res.Decision.Reason)
	}
	// Round 2: two pilots report tasks; nothing else changes.
	busy[string(res.Submitted[0])] = true
	busy[string(res.Submitted[1])] = true
	round(t, r)

	checks := []struct {
		name string
		got  float64
		want float64
	}{
		{"two rounds ran", testutil.ToFloat64(mx.rounds), 2},
		{"four pilots were submitted", testutil.ToFloat64(mx.submitted), 4},
		{"every submit was timed", float64(testutil.CollectAndCount(mx.submitLatency)), 1},
		{"the first round decided no-pending-job", testutil.ToFloat64(mx.decisions.WithLabelValues(string(policy.CaseNoPendingJob))), 1},
		{"the second round decided no-idle-nodes", testutil.ToFloat64(mx.decisions.WithLabelValues(string(policy.CaseNoIdleNodes))), 1},
		{"no node is idle", testutil.ToFloat64(mx.nodes.WithLabelValues("idle")), 0},
		{"pilots hold 4 nodes", testutil.ToFloat64(mx.nodes.WithLabelValues("held")), 4},
		{"2 nodes do useful work", testutil.ToFloat64(mx.nodes.WithLabelValues("useful")), 2},
		{"the foreign job holds 2 nodes", testutil.ToFloat64(mx.nodes.WithLabelValues("foreign")), 2},
		{"2 pilots are busy", testutil.ToFloat64(mx.pilots.WithLabelValues("busy")), 2},
		{"2 pilots are idle", testutil.ToFloat64(mx.pilots.WithLabelValues("idle")), 2},
		{"no snapshot failed", testutil.ToFloat64(mx.snapshotFailures), 0},
	}
	for _, c := range checks {
		if c.got != c.want {
			t.Errorf("%s: got %v, want %v", c.name, c.got, c.want)
		}
	}
	if n := histCount(t, mx, "harvest_submit_duration_seconds"); n != 4 {
		t.Errorf("submit latency histogram counted %d submits, want 4", n)
	}

	// Round 3: the batch system is down: counted, the round does nothing.
	m.Down = true
	if _, err := r.Round(context.Background()); !errors.Is(err, ErrNoSnapshot) {
		t.Fatalf("round with the batch system down: %v", err)
	}
	if got := testutil.ToFloat64(mx.snapshotFailures); got != 1 {
		t.Errorf("snapshot failures = %v, want 1", got)
	}
	if got := testutil.ToFloat64(mx.rounds); got != 2 {
		t.Errorf("a failed round counted as a round: %v", got)
	}
}

// editing changes snapshots on their way to the agent.
type editing struct {
	adapters.Adapter
	edit func(*cluster.Snapshot)
}

func (e *editing) Snapshot(ctx context.Context) (cluster.Snapshot, error) {
	s, err := e.Adapter.Snapshot(ctx)
	if err == nil && e.edit != nil {
		e.edit(&s)
	}
	return s, err
}

type demandFunc func() DemandInfo

func (f demandFunc) Demand(context.Context, Seen) (DemandInfo, error) { return f(), nil }

func histCount(t *testing.T, mx *Metrics, name string) uint64 {
	t.Helper()
	mfs, err := mx.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			return mf.GetMetric()[0].GetHistogram().GetSampleCount()
		}
	}
	t.Fatalf("no metric %s", name)
	return 0
}

// gauge reads an unlabelled gauge.
func gauge(t *testing.T, mx *Metrics, name string) float64 {
	t.Helper()
	mfs, err := mx.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			return mf.GetMetric()[0].GetGauge().GetValue()
		}
	}
	t.Fatalf("no metric %s", name)
	return 0
}

func TestBackfillDelayIsTheTimeFromTheReleaseToTheJobsStart(t *testing.T) {
	tests := []struct {
		name string
		// startAfter is when (seconds after the release) the job starts;
		// reportStart says whether the batch system reports its start time.
		startAfter  int64
		seenAfter   int64
		reportStart bool
		wantDelay   float64
	}{
		{name: "a job whose start time is reported is measured to its start", startAfter: 30, seenAfter: 60, reportStart: true, wantDelay: 30},
		{name: "a job without a start time is measured to the first snapshot that shows it running", startAfter: 30, seenAfter: 60, wantDelay: 60},
		{name: "a job that starts in the release round's own second has no delay", startAfter: 0, seenAfter: 10, reportStart: true, wantDelay: 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			// 4 nodes, 4 pilots; then a job needing 2 nodes arrives: the
			// policy releases 2 pilots for it (min nodes 0).
			m := adaptertest.NewMemory(4)
			ed := &editing{Adapter: m}
			mx := NewMetrics(nil)
			r := NewReconciler(mx.InstrumentAdapter(ed), StaticDemand{}, testConfig(), nil)
			r.OnRound = mx.ObserveRound
			round(t, r)
			m.AddJob(cluster.Job{ID: "j9", User: "u", State: cluster.Pending, Nodes: 2, TimeLimit: 600})
			m.Advance(10)
			t0 := m.Now
			res := round(t, r)
			if res.Decision.Case != policy.CaseReleaseForTopJob || len(res.Cancelled) != 2 {
				t.Fatalf("want 2 pilots released for the top job, got %s %v: %s", res.Decision.Case, res.Cancelled, res.Decision.Reason)
			}
			if got := ReleaseTarget(res.Decision); got != "j9" {
				t.Fatalf("release target = %q, want j9 (reason %q)", got, res.Decision.Reason)
			}
			// Still pending a round later: nothing observed yet.
			m.Advance(5)
			round(t, r)
			if n := histCount(t, mx, "harvest_backfill_delay_seconds"); n != 0 {
				t.Fatalf("observed a delay before the job ran")
			}
			// Live, while it waits: the dashboard's harm figure.
			if h := mx.Harm(); len(h.Waiting) != 1 || h.Waiting[0] != (DelayedJob{ID: "j9", Since: t0}) || h.Now != t0+5 || h.Started != 0 {
				t.Fatalf("harm while j9 waits = %+v", h)
			}
			if got := testutil.ToFloat64(mx.delayedNow); got != 1 {
				t.Errorf("harvest_foreign_jobs_delayed = %v, want 1", got)
			}
			if got := testutil.ToFloat64(mx.delayedLongest); got != 5 {
				t.Errorf("harvest_foreign_delay_longest_seconds = %v, want 5", got)
			}
			// The batch system starts j9 (the memory cluster cannot).
			ed.edit = func(s *cluster.Snapshot) {
				for i := range s.Jobs {
					if s.Jobs[i].ID == "j9" {
						s.Jobs[i].State, s.Jobs[i].RunTime = cluster.Running, tc.seenAfter-tc.startAfter
						if tc.reportStart {
							s.Jobs[i].StartTime = t0 + tc.startAfter
						}
						s.IdleNodes -= 2
					}
				}
			}
			m.Advance(tc.seenAfter - 5)
			round(t, r)
			if n := histCount(t, mx, "harvest_backfill_delay_seconds"); n != 1 {
				t.Fatalf("observed %d delays, want 1", n)
			}
			if h := mx.Harm(); len(h.Waiting) != 0 || h.Started != 1 || h.TotalDelay != int64(tc.wantDelay) || h.MaxDelay != int64(tc.wantDelay) || h.MaxDelayJob != "j9" {
				t.Errorf("harm after j9 started = %+v, want 1 started with a %v s delay", h, tc.wantDelay)
			}
			if got := testutil.ToFloat64(mx.delayedNow); got != 0 {
				t.Errorf("harvest_foreign_jobs_delayed = %v after the start, want 0", got)
			}
			mfs, _ := mx.Registry.Gather()
			for _, mf := range mfs {
				if mf.GetName() == "harvest_backfill_delay_seconds" {
					if got := mf.GetMetric()[0].GetHistogram().GetSampleSum(); got != tc.wantDelay {
						t.Errorf("delay = %v s, want %v", got, tc.wantDelay)
					}
				}
			}
		})
	}
}

func TestAReleasedForJobThatLeavesTheQueueIsCountedAsUnobserved(t *testing.T) {
	m := adaptertest.NewMemory(2)
	r, mx := metered(t, m, StaticDemand{})
	round(t, r)
	m.AddJob(cluster.Job{ID: "j1", User: "u", State: cluster.Pending, Nodes: 1, TimeLimit: 600})
	m.Advance(10)
	if res := round(t, r); len(res.Cancelled) == 0 {
		t.Fatalf("nothing released: %s", res.Decision.Reason)
	}
	m.End("j1") // cancelled by its owner before it started
	m.Advance(10)
	round(t, r)
	if got := testutil.ToFloat64(mx.backfillUnseen); got != 1 {
		t.Errorf("unobserved = %v, want 1", got)
	}
	if h := mx.Harm(); h.Unobserved != 1 || len(h.Waiting) != 0 || h.Started != 0 {
		t.Errorf("harm = %+v, want 1 unobserved and nothing waiting", h)
	}
	if n := histCount(t, mx, "harvest_backfill_delay_seconds"); n != 0 {
		t.Errorf("a job that never ran was observed as started")
	}
}
