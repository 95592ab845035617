package policy

import (
	"errors"
	"reflect"
	"testing"

	"github.com/harvest-hpc/harvest/cluster"
)

func TestMaxTime(t *testing.T) {
	const now = 1_700_000_000
	tests := []struct {
		name        string
		snap        cluster.Snapshot
		useExpected bool
		want        int64
	}{
		{
			name: "The worked example's top job can start when job 1 ends, 19 min from now",
			snap: thesis(10 * minute),
			want: 19 * minute,
		},
		{
			name: "No pending foreign job means no limit",
			snap: snap(10, 2, running("1", 8, 10*minute, 0)),
			want: unlimited,
		},
		{
			name: "A top job that fits the idle nodes can start now",
			snap: snap(10, 4, running("1", 6, 10*minute, 0), pending("2", 4, 10*minute)),
			want: 0,
		},
		{
			name: "Jobs are walked by remaining limit, not by limit or input order",
			snap: snap(10, 0,
				running("long", 4, 100*minute, 95*minute), // 5 min left
				running("short", 3, 10*minute, 0),         // 10 min left
				running("mid", 3, 30*minute, 10*minute),   // 20 min left
				pending("top", 6, 10*minute)),
			want: 10 * minute,
		},
		{
			name: "Pilots above the floor count as idle: they are released the moment the top job could use their nodes",
			snap: snap(10, 2, running("1", 4, 60*minute, 0), pilot("p1", 15*minute, 5*minute), pilot("p2", 15*minute, 5*minute), pilot("p3", 15*minute, 0), pilot("p4", unlimited, 0), pending("2", 4, 10*minute)),
			want: 0,
		},
		{
			name: "Floor pilots free their nodes in the walk like foreign jobs; the pilot released first is above the floor",
			snap: func() cluster.Snapshot {
				// Release order p2, p1, p3, p4: the floor of 3 is p1, p3, p4.
				s := snap(10, 2, running("1", 4, 60*minute, 0), pilot("p1", 15*minute, 5*minute), pilot("p2", 15*minute, 5*minute), pilot("p3", 15*minute, 0), pilot("p4", unlimited, 0), pending("2", 4, 10*minute))
				s.MinNodes = 3
				return s
			}(),
			want: 10 * minute,
		},
		{
			name: "An unlimited job in the way makes the wait unlimited",
			snap: snap(10, 2, running("1", 4, unlimited, 0), running("2", 4, 10*minute, 0), pending("3", 8, 10*minute)),
			want: unlimited,
		},
		{
			name: "Unlimited jobs do not matter if limited ones free enough nodes",
			snap: snap(10, 2, running("1", 4, unlimited, 0), running("2", 4, 10*minute, 0), pending("3", 6, 10*minute)),
			want: 10 * minute,
		},
		{
			name: "A job that needs more nodes than exist never starts",
			snap: snap(10, 2, running("1", 8, 10*minute, 0), pending("3", 11, 10*minute)),
			want: unlimited,
		},
		{
			name: "A queued floor pilot takes an idle node, which frees after its whole limit",
			snap: func() cluster.Snapshot {
				s := snap(10, 3, running("1", 7, 60*minute, 0), queuedPilot("q1", 20*minute), pending("2", 3, 10*minute))
				s.MinNodes = 1
				return s
			}(),
			want: 20 * minute,
		},
		{
			name: "A queued pilot above the floor takes no idle node: it would be cancelled for the top job",
			snap: snap(10, 3, running("1", 7, 60*minute, 0), queuedPilot("q1", 20*minute), pending("2", 3, 10*minute)),
			want: 0,
		},
		{
			name:        "The batch system's earlier expected start wins",
			snap:        snap(10, 2, running("1", 8, 60*minute, 0), pending("2", 4, 10*minute, expectedAt(now+5*minute))),
			useExpected: true,
			want:        5 * minute,
		},
		{
			name:        "An expected start now means the job starts now",
			snap:        snap(10, 2, running("1", 8, 60*minute, 0), pending("2", 4, 10*minute, expectedAt(now))),
			useExpected: true,
			want:        0,
		},
		{
			name: "The expected start is ignored unless asked for",
			snap: snap(10, 2, running("1", 8, 60*minute, 0), pending("2", 4, 10*minute, expectedAt(now+5*minute))),
			want: 60 * minute,
		},
		{
			name:        "An expected start of 0 means unknown",
			snap:        snap(10, 2, running("1", 8, 60*minute, 0), pending("2", 4, 10*minute, expectedAt(0))),
			useExpected: true,
			want:        60 * minute,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tc.snap.Now = now
			cfg := DefaultConfig()
			cfg.UseExpectedStart = tc.useExpected
			if got := MaxTime(Input{Snapshot: tc.snap}, cfg); got != cluster.Limit(tc.want) {
				t.Errorf("MaxTime = %v, want %v", got, cluster.Limit(tc.want))
			}
		})
	}
}

func TestReleaseOrder(t *testing.T) {
	ids := func(js []cluster.Job) []string {
		out := []string{}
		for _, j := range js {
			out = append(out, j.ID)
		}
		return out
	}
	tests := []struct {
		name   string
		pilots []cluster.Job
		want   []string
	}{
		{
			name:   "The pilot ending soonest is cancelled first",
			pilots: []cluster.Job{pilot("1", 60*minute, 0), pilot("2", 60*minute, 30*minute), pilot("3", unlimited, 0)},
			want:   []string{"2", "1", "3"},
		},
		{
			name:   "Among equal remaining time the newest (largest id) goes first",
			pilots: []cluster.Job{pilot("98", unlimited, 0), pilot("100", unlimited, 0), pilot("99", unlimited, 0)},
			want:   []string{"100", "99", "98"},
		},
		{
			name:   "Ids compare numerically digit run by digit run",
			pilots: []cluster.Job{pilot("12.9", unlimited, 0), pilot("12.10", unlimited, 0), pilot("9_3", unlimited, 0), pilot("10_1", unlimited, 0)},
			want:   []string{"12.10", "12.9", "10_1", "9_3"},
		},
		{
			name:   "Queued pilots go before idle ones, idle ones before busy ones, whatever their limits",
			pilots: []cluster.Job{pilot("1", 5*minute, 0, busy), pilot("2", unlimited, 0), queuedPilot("3", unlimited), pilot("4", 10*minute, 0)},
			want:   []string{"3", "4", "2", "1"},
		},
		{
			name:   "Among equal pilots the master's goes last, whatever its id",
			pilots: []cluster.Job{pilot("150", unlimited, 0, master), pilot("151", unlimited, 0), pilot("153", unlimited, 0)},
			want:   []string{"153", "151", "150"},
		},
		{
			name:   "The master's pilot goes last even when it is the newest",
			pilots: []cluster.Job{pilot("150", unlimited, 0), pilot("153", unlimited, 0, master), pilot("151", unlimited, 0)},
			want:   []string{"151", "150", "153"},
		},
		{
			name:   "The master's pilot ending sooner still goes first: only equals are reordered",
			pilots: []cluster.Job{pilot("1", 10*minute, 0, master), pilot("2", 60*minute, 0)},
			want:   []string{"1", "2"},
		},
		{
			name:   "An idle master's pilot goes before busy pilots: the tier comes first",
			pilots: []cluster.Job{pilot("1", unlimited, 0, master), pilot("2", unlimited, 0, busy), queuedPilot("3", unlimited)},
			want:   []string{"3", "1", "2"},
		},
		{
			name:   "The order does not depend on the input order",
			pilots: []cluster.Job{pilot("b", unlimited, 0), pilot("a", unlimited, 0), pilot("c", unlimited, 0)},
			want:   []string{"c", "b", "a"},
		},
		{
			name:   "Numerically equal ids fall back to byte order",
			pilots: []cluster.Job{pilot("01", unlimited, 0), pilot("1", unlimited, 0)},
			want:   []string{"1", "01"},
		},
		{
			name:   "No pilots give an empty order",
			pilots: nil,
			want:   []string{},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			in := append([]cluster.Job(nil), tc.pilots...)
			got := ids(ReleaseOrder(tc.pilots))
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("ReleaseOrder = %q, want %q", got, tc.want)
			}
			if !reflect.DeepEqual(in, tc.pilots) {
				t.Error("ReleaseOrder changed its input")
			}
		})
	}
}

func TestCompareIDs(t *testing.T) {
	tests := []struct {
		a, b string
		want int
	}{
		{"9", "10", -1},
		{"10", "9", 1},
		{"1234", "1234", 0},
		{"p9", "p10", -1},
		{"1234_9", "1234_10", -1},
		{"12.0", "12.1", -1},
		{"abc", "abd", -1},
		{"12", "12a", -1},
		{"007", "7", -1}, // numerically equal: byte order decides
		{"99999999999999999999999", "100000000000000000000000", -1},
	}
	for _, tc := range tests {
		if got := compareIDs(tc.a, tc.b); got != tc.want {
			t.Errorf("compareIDs(%q, %q) = %d, want %d", tc.a, tc.b, got, tc.want)
		}
	}
}

func TestRecommend(t *testing.T) {
	m := DefaultRecommendConfig()
	tests := []struct {
		left, want int
	}{
		{-3, 2}, {0, 2}, {4, 2}, {5, 4}, {19, 4}, {20, 4}, {39, 4}, {40, 5}, {99, 7}, {100, 10}, {1_000_000, 10},
	}
	for _, tc := range tests {
		if got := Recommend(tc.left, m); got != tc.want {
			t.Errorf("Recommend(%d) = %d, want %d", tc.left, got, tc.want)
		}
	}
	custom := RecommendConfig{FewTasks: 1, FewNodes: 0, SomeTasks: 10, SomeNodes: 1, ManyTasks: 1000, TasksPerNode: 100, Base: 1, ManyNodes: 50}
	if got := Recommend(0, custom); got != 0 {
		t.Errorf("custom Recommend(0) = %d, want 0", got)
	}
	if got := Recommend(550, custom); got != 6 {
		t.Errorf("custom Recommend(550) = %d, want 6", got)
	}
	if got := Recommend(50, RecommendConfig{ManyTasks: 100}); got != 50 {
		t.Errorf("Recommend with TasksPerNode 0 = %d, want 50 (read as 1, no panic)", got)
	}
}

func TestConfigValidate(t *testing.T) {
	tests := []struct {
		name   string
		modify func(*Config)
		ok     bool
	}{
		{"The default config is valid", func(*Config) {}, true},
		{"A floor equal to the cap is valid", func(c *Config) { c.MinNodes, c.MaxNodes = 4, 4 }, true},
		{"A floor above the cap is rejected", func(c *Config) { c.MinNodes, c.MaxNodes = 5, 4 }, false},
		{"A floor with no cap is valid", func(c *Config) { c.MinNodes = 5 }, true},
		{"Negative min nodes are rejected", func(c *Config) { c.MinNodes = -1 }, false},
		{"Negative max nodes are rejected", func(c *Config) { c.MaxNodes = -1 }, false},
		{"A negative mini time is rejected", func(c *Config) { c.MiniTime = -1 }, false},
		{"A zero margin is valid", func(c *Config) { c.Margin = 0 }, true},
		{"A negative margin is rejected", func(c *Config) { c.Margin = -60 }, false},
		{"A zero granularity is rejected", func(c *Config) { c.Granularity = 0 }, false},
		{"A one-second granularity is valid", func(c *Config) { c.Granularity = 1 }, true},
		{"A zero pilot limit cap is rejected", func(c *Config) { c.MaxPilotLimit = 0 }, false},
		{"A positive pilot limit cap is valid", func(c *Config) { c.MaxPilotLimit = 3600 }, true},
		{"A pilot limit cap below unlimited is rejected", func(c *Config) { c.MaxPilotLimit = -2 }, false},
		{"Decreasing recommendation thresholds are rejected", func(c *Config) { c.Recommendation.SomeTasks = 2 }, false},
		{"A zero tasks-per-node recommendation is rejected", func(c *Config) { c.Recommendation.TasksPerNode = 0 }, false},
		{"A negative recommendation node count is rejected", func(c *Config) { c.Recommendation.ManyNodes = -1 }, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := DefaultConfig()
			tc.modify(&c)
			err := c.Validate()
			if (err == nil) != tc.ok {
				t.Fatalf("Validate() = %v, want ok %v", err, tc.ok)
			}
			if err != nil && !errors.Is(err, ErrInvalidConfig) {
				t.Errorf("error %v does not wrap ErrInvalidConfig", err)
			}
		})
	}
}
