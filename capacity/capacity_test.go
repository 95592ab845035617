package capacity

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"
)

// at is n finished tasks of job at size, each running secs seconds.
func at(job int64, size, n int, secs float64) []Sample {
	out := make([]Sample, n)
	for i := range out {
		out[i] = Sample{Job: job, Size: size, Duration: time.Duration(secs * float64(time.Second))}
	}
	return out
}

// contended is the run time of a task of base seconds when size tasks
// share a resource that serves c of them at full speed.
func contended(base float64, size, c int) float64 {
	return base * math.Max(1, float64(size)/float64(c))
}

func cfg(hold int) Config {
	c := DefaultConfig()
	c.HoldRounds = hold
	return c
}

type round struct {
	samples []Sample
	cap     int
	phase   Phase
}

func TestScenarios(t *testing.T) {
	tests := []struct {
		name   string
		cfg    Config
		rounds []round
	}{
		{
			name: "without contention the cap doubles with every size judged good",
			cfg:  cfg(3),
			rounds: []round{
				{nil, 4, Grow},
				{at(1, 4, 5, 10), 8, Grow},
				{at(1, 8, 5, 10.5), 16, Grow},
				{at(1, 16, 16, 11), 32, Grow},
			},
		},
		{
			name: "too few samples judge nothing and keep the cap",
			cfg:  cfg(3),
			rounds: []round{
				{at(1, 4, 4, 10), 4, Grow},
				{at(1, 4, 1, 10), 8, Grow}, // the fifth sample completes the size
			},
		},
		{
			name: "contention past 6 concurrent tasks: binary search finds 7 (1.17x) and holds it, then probes 8 again",
			cfg:  cfg(2),
			rounds: []round{
				{at(1, 4, 5, contended(10, 4, 6)), 8, Grow},
				{at(1, 8, 8, contended(10, 8, 6)), 6, Search}, // 1.33x: degraded; search 4..8
				{at(1, 6, 6, contended(10, 6, 6)), 7, Search}, // 6 fine; search 6..8
				{at(1, 7, 7, contended(10, 7, 6)), 7, Hold},   // 7 fine (1.17x): 7 is the answer
				{at(1, 7, 7, contended(10, 7, 6)), 7, Hold},   // first round of the hold
				{at(1, 7, 7, contended(10, 7, 6)), 8, Probe},  // second: the hold is over
				{at(1, 7, 7, contended(10, 7, 6)), 8, Probe},  // still probing until 8 is judged
				{at(1, 8, 8, contended(10, 8, 6)), 7, Hold},   // 8 degrades again: hold again
				{nil, 7, Hold},
				{nil, 8, Probe},
				{at(1, 8, 8, 10), 16, Grow}, // the contention went away: grow again
			},
		},
		{
			name: "a held size that degrades later is searched below",
			cfg:  cfg(10),
			rounds: []round{
				{at(1, 4, 5, 10), 8, Grow},
				{at(1, 8, 8, 20), 6, Search},
				{at(1, 6, 6, 10), 7, Search},
				{at(1, 7, 7, 10), 7, Hold},
				{at(1, 7, 7, 20), 5, Search}, // 7 now degrades: search 3..7
				{at(1, 5, 5, 20), 4, Search}, // and so does 5: search 3..5
			},
		},
		{
			name: "degradation is judged per job against the job's own baseline",
			cfg:  cfg(3),
			rounds: []round{
				{append(at(1, 4, 5, 10), at(2, 4, 5, 100)...), 8, Grow},
				// job 2 is ten times longer but no slower than its own baseline
				{append(at(1, 8, 5, 10), at(2, 8, 5, 110)...), 16, Grow},
				// job 1 slows to 1.5x, job 2 to 1.2x: weighted mean 1.35x
				{append(at(1, 16, 5, 15), at(2, 16, 5, 120)...), 12, Search},
			},
		},
		{
			name: "a baseline first seen at a contended size hides the contention (why growth starts small)",
			cfg:  cfg(3),
			rounds: []round{
				{at(1, 4, 5, contended(10, 4, 2)), 8, Grow},
				{at(1, 8, 8, contended(10, 8, 2)), 6, Search}, // 2x of a 2x baseline: caught only here
			},
		},
		{
			name: "a lower baseline found later judges larger sizes of the same round",
			cfg:  cfg(3),
			rounds: []round{
				{append(at(1, 8, 5, 13), at(1, 4, 5, 10)...), 6, Search},
			},
		},
		{
			name: "a small good size does not pull the cap below the initial size",
			cfg:  cfg(3),
			rounds: []round{
				{at(1, 1, 5, 10), 4, Grow},
				{at(1, 2, 5, 10), 4, Grow},
				{at(1, 4, 5, 10), 8, Grow},
			},
		},
		{
			name: "degraded at the smallest sizes: hold the min size",
			cfg:  cfg(3),
			rounds: []round{
				{at(1, 1, 5, 10), 4, Grow},
				{at(1, 2, 5, 20), 1, Hold},
			},
		},
		{
			name: "with no hold the found size is probed at once",
			cfg:  cfg(0),
			rounds: []round{
				{at(1, 4, 5, 10), 8, Grow},
				{at(1, 8, 8, 20), 6, Search},
				{at(1, 6, 6, 10), 7, Search},
				{at(1, 7, 7, 10), 8, Probe},
			},
		},
		{
			name: "samples without a size or a run time are ignored",
			cfg:  cfg(3),
			rounds: []round{
				{append(at(1, 0, 5, 10), at(1, 4, 5, 0)...), 4, Grow},
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.cfg.Validate(); err != nil {
				t.Fatal(err)
			}
			c := New(tc.cfg)
			for i, r := range tc.rounds {
				d := c.Step(r.samples)
				if d.Cap != r.cap || d.Phase != r.phase {
					t.Fatalf("round %d: cap %d phase %s, want cap %d phase %s (%s; state %+v)",
						i, d.Cap, d.Phase, r.cap, r.phase, d.Reason, c.State())
				}
				if d.Reason == "" {
					t.Fatalf("round %d: no reason", i)
				}
			}
		})
	}
}

// TestConvergesOnTheLargestSizeThatDoesNotDegrade lets a pool follow the
// cap at once, with tasks that slow down linearly past c concurrent tasks,
// and checks that the hold settles on floor(Factor x c): the largest size
// whose tasks take at most Factor x the uncontended time. Growth starts at
// InitialSize, so for c >= InitialSize the first judged size is uncontended.
func TestConvergesOnTheLargestSizeThatDoesNotDegrade(t *testing.T) {
	conf := cfg(5)
	for c := conf.InitialSize; c <= 200; c++ {
		ctl := New(conf)
		d := ctl.Step(nil)
		rounds := 1
		for ; d.Phase != Hold && rounds < 100; rounds++ {
			size := d.Cap
			d = ctl.Step(at(7, size, max(size, conf.MinSamples), contended(30, size, c)))
		}
		want := int(math.Floor(conf.Factor * float64(c)))
		if d.Phase != Hold || d.Cap != want {
			t.Fatalf("c=%d: after %d rounds cap %d phase %s, want hold at %d (%s)", c, rounds, d.Cap, d.Phase, want, d.Reason)
		}
		// Doubling then bisecting: O(log c) rounds.
		if limit := 2*int(math.Ceil(math.Log2(float64(c)))) + 3; rounds > limit {
			t.Fatalf("c=%d: %d rounds to converge, want at most %d", c, rounds, limit)
		}
	}
}

func TestRestoreResumesFromACheckpointedState(t *testing.T) {
	conf := cfg(4)
	a := New(conf)
	a.Step(at(1, 4, 5, 10))
	a.Step(at(1, 8, 8, 20))
	a.Step(at(1, 6, 3, 10)) // not judged yet: kept in Acc
	b, err := json.Marshal(a.State())
	if err != nil {
		t.Fatal(err)
	}
	var st State
	if err := json.Unmarshal(b, &st); err != nil {
		t.Fatal(err)
	}
	r := Restore(conf, st)
	da, dr := a.Step(at(1, 6, 2, 10)), r.Step(at(1, 6, 2, 10))
	if da.Cap != 7 || dr.Cap != da.Cap || dr.Phase != da.Phase {
		t.Fatalf("restored %+v, original %+v (want cap 7)", dr, da)
	}
	if fresh := Restore(conf, State{}); fresh.Step(nil).Cap != conf.InitialSize {
		t.Fatal("an empty state must start growing from the initial size")
	}
}

func TestStateIsACopy(t *testing.T) {
	c := New(cfg(3))
	c.Step(at(1, 4, 5, 10))
	st := c.State()
	st.Baseline[1] = 1000
	if c.State().Baseline[1] != 10 {
		t.Fatal("changing a returned State changed the controller")
	}
}

func TestForgetDropsAJob(t *testing.T) {
	c := New(cfg(3))
	c.Step(append(at(1, 4, 5, 10), at(2, 4, 3, 10)...))
	c.Forget(1)
	c.Forget(2)
	st := c.State()
	if len(st.Baseline) != 0 || len(st.Acc) != 0 {
		t.Fatalf("state after forgetting every job: %+v", st)
	}
	// A new job with a longer run time sets its own baseline: no
	// degradation is read from job 1's old one.
	if d := c.Step(at(3, 8, 5, 30)); d.Phase != Grow {
		t.Fatalf("after Forget: %+v", d)
	}
}

func TestLimit(t *testing.T) {
	for _, tc := range []struct{ cap, n, want int }{{0, 10, 10}, {4, 10, 4}, {4, 3, 3}} {
		if got := (Decision{Cap: tc.cap}).Limit(tc.n); got != tc.want {
			t.Errorf("cap %d limit %d = %d, want %d", tc.cap, tc.n, got, tc.want)
		}
	}
}

func TestReasonNamesTheDegradation(t *testing.T) {
	c := New(cfg(3))
	c.Step(at(1, 4, 5, 10))
	d := c.Step(at(1, 8, 8, 15))
	for _, want := range []string{"8 nodes take 1.50x", "trying 6"} {
		if !strings.Contains(d.Reason, want) {
			t.Errorf("reason %q lacks %q", d.Reason, want)
		}
	}
	if len(d.Judged) != 1 || !d.Judged[0].Degraded || d.Judged[0].Samples != 8 {
		t.Errorf("judged %+v", d.Judged)
	}
}

func TestValidate(t *testing.T) {
	for _, tc := range []struct {
		name string
		mod  func(*Config)
		want string
	}{
		{"factor 1", func(c *Config) { c.Factor = 1 }, "factor"},
		{"factor NaN", func(c *Config) { c.Factor = math.NaN() }, "factor"},
		{"no samples", func(c *Config) { c.MinSamples = 0 }, "min samples"},
		{"negative hold", func(c *Config) { c.HoldRounds = -1 }, "hold rounds"},
		{"min size 0", func(c *Config) { c.MinSize = 0 }, "min size"},
		{"initial below min", func(c *Config) { c.MinSize = 8 }, "initial size"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := DefaultConfig()
			tc.mod(&c)
			err := c.Validate()
			if !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Validate() = %v, want an ErrInvalidConfig about %q", err, tc.want)
			}
		})
	}
	if err := DefaultConfig().Validate(); err != nil {
		t.Fatal(err)
	}
}

func ExampleController() {
	c := New(DefaultConfig())
	for _, size := range []int{4, 8, 6, 7} {
		// Tasks of 10 s slow down past 6 concurrent tasks.
		d := c.Step(at(1, size, size+1, contended(10, size, 6)))
		fmt.Println(d.Cap, d.Phase)
	}
	// Output:
	// 8 grow
	// 6 search
	// 7 search
	// 7 hold
}
