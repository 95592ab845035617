package policy

import (
	"reflect"
	"strconv"
	"strings"
	"testing"

	"github.com/harvest-hpc/harvest/cluster"
)

const hour = 60 * minute

func preemptible(j *cluster.Job) { j.Preemptible = true }

// pilots returns n one-node running pilots id0..id(n-1) with limit tl and
// run time rt.
func pilots(prefix string, n int, tl, rt int64, opts ...func(*cluster.Job)) []cluster.Job {
	out := make([]cluster.Job, n)
	for i := range out {
		out[i] = pilot(prefix+strconv.Itoa(i), tl, rt, opts...)
	}
	return out
}

func jobs(groups ...[]cluster.Job) []cluster.Job {
	var out []cluster.Job
	for _, g := range groups {
		out = append(out, g...)
	}
	return out
}

// TestDecideGiveBackModes covers the rounds that differ between the
// give-back modes: counting pilots above the floor as releasable when
// computing when the top job starts (both modes), preemption mode (the
// batch system frees preemptible pilots by itself), shrinking ends and
// minimum limits.
func TestDecideGiveBackModes(t *testing.T) {
	const now = 1_700_000_000
	tests := []struct {
		name        string
		snap        cluster.Snapshot
		upcoming    []Upcoming
		config      func(*Config)
		wantCase    Case
		wantSubmit  *Submit
		wantRelease []string
		wantShrink  []Shrink
		wantMaxTime int64
		wantReason  string
	}{
		{
			// The trace case: a 2-node 18 h job waited 5,188 s behind 91
			// pilots. Counting pilots until their own (long) limits, the top
			// job starts at R's end with no node to spare, so the long job
			// fits nowhere; with the pilots gone, as SLURM would judge it,
			// 46 nodes are to spare when the top job starts.
			name: "A long job that EASY would backfill beside the top job gets a pilot released although pilots hold nodes past the top job's start",
			snap: snap(100, 1, jobs(
				[]cluster.Job{running("R", 53, 2*hour, 0)},
				pilots("p", 46, 20*hour, 0),
				[]cluster.Job{pending("top", 54, hour), pending("long", 2, 18*hour)})...),
			// The batch system plans with the other pilots held to their
			// limits: at the top job's start 1 node would be left beside it
			// after one release, 2 after two.
			wantCase:    CaseReleaseForBackfill,
			wantRelease: []string{"p45", "p44"},
			wantMaxTime: 2 * hour,
		},
		{
			name: "Only the pilots above the floor count as released: with all 46 kept the long job fits nowhere",
			snap: func() cluster.Snapshot {
				s := snap(100, 1, jobs(
					[]cluster.Job{running("R", 53, 2*hour, 0)},
					pilots("p", 46, 20*hour, 0),
					[]cluster.Job{pending("top", 54, hour), pending("long", 2, 18*hour)})...)
				s.MinNodes = 46
				return s
			}(),
			wantCase:    CaseFillHole,
			wantSubmit:  submit(1, 2*hour-2*minute),
			wantMaxTime: 2 * hour,
		},

		// Preemption mode.
		{
			name: "Preemption: the top job needs nodes held by preemptible pilots; the batch system preempts them, nothing is released",
			snap: snap(10, 1, jobs(
				[]cluster.Job{running("R", 5, hour, 0)},
				pilots("p", 4, unlimited, 0, preemptible),
				[]cluster.Job{pending("top", 3, hour)})...),
			config:     func(c *Config) { c.Preemption = true },
			wantCase:   CaseSchedulerPreempts,
			wantReason: "the batch system starts it by preempting up to that many of the 4 preemptible pilots",
		},
		{
			name: "Polling: the same round releases two pilots",
			snap: snap(10, 1, jobs(
				[]cluster.Job{running("R", 5, hour, 0)},
				pilots("p", 4, unlimited, 0),
				[]cluster.Job{pending("top", 3, hour)})...),
			wantCase:    CaseReleaseForTopJob,
			wantRelease: []string{"p3", "p2"},
		},
		{
			name: "Preemption: pilots above the floor outside the preemptible tier are still released by the agent, only as many as the tier lacks",
			snap: func() cluster.Snapshot {
				s := snap(10, 0, jobs(
					[]cluster.Job{running("R", 4, hour, 0)},
					pilots("own", 4, unlimited, 0),
					pilots("pre", 2, unlimited, 0, preemptible),
					[]cluster.Job{pending("top", 4, hour)})...)
				s.MinNodes = 2
				return s
			}(),
			config:      func(c *Config) { c.Preemption = true },
			wantCase:    CaseReleaseForTopJob,
			wantRelease: []string{"own3", "own2"},
			wantReason:  "the batch system preempts up to 2 preemptible ones",
		},
		{
			name: "Preemption: a job that would backfill into preemptible pilots' nodes is left to the batch system",
			snap: snap(10, 0, jobs(
				[]cluster.Job{running("R", 8, hour, 0)},
				pilots("p", 2, unlimited, 0, preemptible),
				[]cluster.Job{pending("top", 10, hour), pending("short", 2, 30*minute)})...),
			config:     func(c *Config) { c.Preemption = true },
			wantCase:   CaseSchedulerPreempts,
			wantReason: "backfills it by preempting",
		},
		{
			name: "Preemption: new pilots first bring the floor up to the minimum, the rest go to the preemptible tier",
			snap: func() cluster.Snapshot {
				s := snap(10, 6, running("R", 4, hour, 0))
				s.MinNodes = 2
				return s
			}(),
			config:     func(c *Config) { c.Preemption = true },
			wantCase:   CaseNoPendingJob,
			wantSubmit: &Submit{Count: 6, TimeLimit: cluster.Unlimited, Preemptible: 4},
		},
		{
			name: "Preemption: floor pilots on the ledger count toward the floor",
			snap: func() cluster.Snapshot {
				s := snap(10, 6, running("R", 4, hour, 0))
				s.MinNodes = 2
				return s
			}(),
			upcoming:   []Upcoming{{Count: 1, TimeLimit: cluster.Unlimited, SubmittedAt: now - 5}, {Count: 1, TimeLimit: cluster.Unlimited, SubmittedAt: now - 5, Preemptible: true}},
			config:     func(c *Config) { c.Preemption = true },
			wantCase:   CaseNoPendingJob,
			wantSubmit: &Submit{Count: 4, TimeLimit: cluster.Unlimited, Preemptible: 3},
		},
		{
			name: "Preemption: the cap releases preemptible pilots like any other",
			snap: func() cluster.Snapshot {
				s := snap(10, 0, jobs([]cluster.Job{running("R", 6, hour, 0)}, pilots("p", 4, unlimited, 0, preemptible))...)
				s.MaxNodes = 3
				return s
			}(),
			config:      func(c *Config) { c.Preemption = true },
			wantCase:    CaseAboveMaxNodes,
			wantRelease: []string{"p3"},
		},
		{
			name: "Preemption: pilots filling a hole are still sized to end before the top job starts",
			snap: snap(10, 2, jobs(
				[]cluster.Job{running("R", 6, hour, 0)},
				pilots("p", 2, unlimited, 0, preemptible),
				[]cluster.Job{pending("top", 10, hour)})...),
			config:      func(c *Config) { c.Preemption = true },
			wantCase:    CaseFillHole,
			wantSubmit:  &Submit{Count: 2, TimeLimit: hour - 2*minute, Preemptible: 2},
			wantMaxTime: hour,
		},

		// Shrinking.
		{
			name: "Shrink: floor pilots are never shrunk, even when the top job then never starts",
			snap: snap(10, 0, jobs(
				[]cluster.Job{running("R", 7, hour, 0)},
				pilots("p", 3, unlimited, 0, busy),
				[]cluster.Job{pending("top", 9, hour)})...),
			config:      func(c *Config) { c.Shrink = true; c.MinNodes = 3 },
			wantCase:    CaseNoIdleNodes,
			wantMaxTime: unlimited,
		},
		{
			name: "Shrink: pilots above the floor that would outlive the top job's start end 30 s before it instead",
			snap: func() cluster.Snapshot {
				s := snap(10, 0, jobs(
					[]cluster.Job{running("R", 6, hour, 0)},
					pilots("p", 4, unlimited, 0, busy),
					[]cluster.Job{pending("top", 8, hour)})...)
				s.MinNodes = 2
				return s
			}(),
			config:      func(c *Config) { c.Shrink = true },
			wantCase:    CaseNoIdleNodes,
			wantShrink:  []Shrink{{ID: "p3", End: now + hour - 30}, {ID: "p2", End: now + hour - 30}},
			wantMaxTime: hour,
			wantReason:  "pulling in the end of 2 pilots to 59m30s from now, when job top can start",
		},
		{
			name: "Shrink: a pilot already ending before the top job starts counts as free, so the other is not needed",
			snap: snap(10, 0, jobs(
				[]cluster.Job{running("R", 8, hour, 0)},
				[]cluster.Job{pilot("soon", 30*minute, 0, busy), pilot("late", 3*hour, 0, busy)},
				[]cluster.Job{pending("top", 9, 4*hour)})...),
			config:      func(c *Config) { c.Shrink = true },
			wantCase:    CaseNoIdleNodes,
			wantMaxTime: hour,
		},
		{
			name: "Shrink: nothing is shrunk in a round that releases",
			snap: snap(10, 1, jobs(
				[]cluster.Job{running("R", 5, hour, 0)},
				pilots("p", 4, unlimited, 0),
				[]cluster.Job{pending("top", 3, hour)})...),
			config:      func(c *Config) { c.Shrink = true },
			wantCase:    CaseReleaseForTopJob,
			wantRelease: []string{"p3", "p2"},
		},
		{
			name: "Shrink in preemption mode: preemptible pilots in the way end before the top job starts, so their work is not lost to the preemption",
			snap: snap(10, 0, jobs(
				[]cluster.Job{running("R", 8, hour, 0)},
				pilots("p", 2, unlimited, 0, preemptible, busy),
				[]cluster.Job{pending("top", 10, hour)})...),
			config:      func(c *Config) { c.Preemption = true; c.Shrink = true },
			wantCase:    CaseNoIdleNodes,
			wantShrink:  []Shrink{{ID: "p1", End: now + hour - 30}, {ID: "p0", End: now + hour - 30}},
			wantMaxTime: hour,
		},

		// Minimum limits.
		{
			name:        "A minimum limit is submitted with pilots whose limit is longer",
			snap:        snap(10, 2, running("R", 8, hour, 0), pending("top", 10, hour)),
			config:      func(c *Config) { c.MinPilotLimit = 10 * minute },
			wantCase:    CaseFillHole,
			wantSubmit:  &Submit{Count: 2, TimeLimit: hour - 2*minute, MinTimeLimit: 10 * minute},
			wantMaxTime: hour,
		},
		{
			name:        "No minimum limit when the pilot's limit is not longer than it",
			snap:        snap(10, 2, running("R", 8, 12*minute, 0), pending("top", 10, hour)),
			config:      func(c *Config) { c.MinPilotLimit = 10 * minute },
			wantCase:    CaseFillHole,
			wantSubmit:  submit(2, 10*minute),
			wantMaxTime: 12 * minute,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg := thesisConfig()
			cfg.MiniTime = minute
			if tc.config != nil {
				tc.config(&cfg)
			}
			tc.snap.Now = now
			d := Decide(Input{Snapshot: tc.snap, Upcoming: tc.upcoming}, cfg)
			if d.Case != tc.wantCase {
				t.Errorf("case = %q, want %q (reason: %s)", d.Case, tc.wantCase, d.Reason)
			}
			if !reflect.DeepEqual(d.Submit, tc.wantSubmit) {
				t.Errorf("submit = %+v, want %+v (reason: %s)", d.Submit, tc.wantSubmit, d.Reason)
			}
			want := tc.wantRelease
			if want == nil {
				want = []string{}
			}
			if !reflect.DeepEqual(d.Release, want) {
				t.Errorf("release = %q, want %q (reason: %s)", d.Release, want, d.Reason)
			}
			if !reflect.DeepEqual(d.Shrink, tc.wantShrink) {
				t.Errorf("shrink = %+v, want %+v (reason: %s)", d.Shrink, tc.wantShrink, d.Reason)
			}
			if tc.wantMaxTime != 0 && d.MaxTime != cluster.Limit(tc.wantMaxTime) {
				t.Errorf("max time = %v, want %v", d.MaxTime, cluster.Limit(tc.wantMaxTime))
			}
			if !strings.Contains(d.Reason, tc.wantReason) {
				t.Errorf("reason = %q, want it to contain %q", d.Reason, tc.wantReason)
			}
		})
	}
}
