package simlive

import (
	"context"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/harvest-hpc/harvest/adapters"
	"github.com/harvest-hpc/harvest/adapters/adaptertest"
	"github.com/harvest-hpc/harvest/cluster"
)

// fakeClock is a wall clock that tests move.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) Add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

func newLive(t *testing.T, mod func(*Config)) (*Live, *fakeClock) {
	t.Helper()
	clk := &fakeClock{t: time.Unix(1_700_000_000, 0)}
	cfg := DefaultConfig()
	cfg.Nodes, cfg.Now = 4, clk.Now
	if mod != nil {
		mod(&cfg)
	}
	l, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return l, clk
}

func harness(wrap func(testing.TB, adapters.Adapter) adapters.Adapter) adaptertest.Harness {
	var clk *fakeClock
	return adaptertest.Harness{
		New: func(t *testing.T) adapters.Adapter {
			var l *Live
			l, clk = newLive(t, nil)
			// An hour of foreign workload, so the suite sees foreign jobs.
			clk.Add(time.Hour)
			if _, err := l.Snapshot(context.Background()); err != nil {
				t.Fatal(err)
			}
			return wrap(t, l)
		},
		Settle: func(t *testing.T) { clk.Add(10 * time.Second) },
		Tries:  400, // a pilot may queue behind foreign jobs for a while
	}
}

func TestLivePassesTheSuiteInProcess(t *testing.T) {
	adaptertest.Run(t, harness(func(_ testing.TB, a adapters.Adapter) adapters.Adapter { return a }))
}

func TestLivePassesTheSuiteOverPlugin(t *testing.T) {
	adaptertest.Run(t, harness(adaptertest.OverPlugin))
}

func TestVirtualTimeFollowsTheWallClockAtTheGivenSpeed(t *testing.T) {
	l, clk := newLive(t, func(c *Config) { c.Speed = 60; c.Load = 0 })
	clk.Add(90 * time.Second)
	s, err := l.Snapshot(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if got, want := s.Now-1_700_000_000, int64(90*60); got != want {
		t.Errorf("after 90 s of wall clock at x60, virtual time moved %d s, want %d", got, want)
	}
	// The clock stepping back never moves virtual time back.
	clk.Add(-time.Hour)
	s2, err := l.Snapshot(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if s2.Now != s.Now {
		t.Errorf("virtual time went from %d to %d when the wall clock stepped back", s.Now, s2.Now)
	}
}

func TestTheSameSeedGivesTheSameWorkloadAndTheLoadIsOffered(t *testing.T) {
	run := func(seed uint64) []cluster.Job {
		l, clk := newLive(t, func(c *Config) { c.Nodes, c.Seed, c.Load = 16, seed, 1.0 })
		clk.Add(6 * time.Hour)
		s, err := l.Snapshot(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Validate(); err != nil {
			t.Fatal(err)
		}
		return s.Jobs
	}
	a, b, c := run(7), run(7), run(8)
	if !reflect.DeepEqual(a, b) {
		t.Error("two clusters with seed 7 differ")
	}
	if reflect.DeepEqual(a, c) {
		t.Error("seeds 7 and 8 gave the same workload")
	}
	busy := 0
	for _, j := range a {
		if j.State == cluster.Running {
			busy += j.Nodes
		}
	}
	if busy < 8 {
		t.Errorf("at load 1.0 after 6 h only %d of 16 nodes are busy", busy)
	}
}

func TestOptionsAreParsedAndBadOnesRefused(t *testing.T) {
	tests := []struct {
		name string
		opts map[string]string
		ok   bool
	}{
		{name: "every option is accepted", opts: map[string]string{"nodes": "8", "seed": "3", "load": "0.5", "speed": "10", "max-job-nodes": "4", "mean-run": "5m", "tag": "hv"}, ok: true},
		{name: "no option gives the defaults", opts: map[string]string{}, ok: true},
		{name: "a typo in an option name is refused", opts: map[string]string{"node": "8"}},
		{name: "a non-number is refused", opts: map[string]string{"nodes": "many"}},
		{name: "a zero speed is refused", opts: map[string]string{"speed": "0"}},
		{name: "a job wider than the cluster is refused", opts: map[string]string{"nodes": "4", "max-job-nodes": "5"}},
		{name: "a mean run under a minute is refused", opts: map[string]string{"mean-run": "10s"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := NewFromOptions(tc.opts)
			if tc.ok && err != nil {
				t.Fatal(err)
			}
			if !tc.ok && err == nil {
				t.Fatal("accepted")
			}
		})
	}
}
