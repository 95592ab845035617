package siteshare

import (
	"errors"
	"math"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
)

func TestTrackerEffectiveTurnaround(t *testing.T) {
	tr := NewTracker(0.5)
	tr.Observe("a", 1, 10, true)
	tr.Observe("a", 1, 20, true) // 10 + 0.5 x (20 - 10) = 15
	if got, ok := tr.Effective("a", 1); !ok || got != 15 {
		t.Fatalf("effective %v %v, want 15", got, ok)
	}
	// A failure halves the success rate, doubling the time to a good result.
	tr.Observe("a", 1, 15, false)
	if got, _ := tr.Effective("a", 1); got != 30 {
		t.Fatalf("effective after a failure %v, want 30", got)
	}
	for _, bad := range []float64{-1, math.NaN(), math.Inf(1)} {
		tr.Observe("a", 1, bad, true)
	}
	if got, _ := tr.Effective("a", 1); got != 30 {
		t.Fatalf("bad durations changed the figure: %v", got)
	}
	if _, ok := tr.Effective("b", 1); ok {
		t.Fatal("a site never observed has a figure")
	}
	tr.ForgetJob(1)
	if _, ok := tr.Effective("a", 1); ok {
		t.Fatal("ForgetJob kept the job")
	}
}

func TestRelativeComparesSitesOnTheSameJobs(t *testing.T) {
	tr := NewTracker(0.1)
	for range 10 {
		tr.Observe("fast", 1, 10, true)
		tr.Observe("slow", 1, 30, true)
		// job 2 ran only at "fast": it says nothing about speed
		tr.Observe("fast", 2, 1000, true)
		// job 3 is ten times longer but the ratio is the same
		tr.Observe("fast", 3, 100, true)
		tr.Observe("slow", 3, 300, true)
	}
	got := tr.Relative()
	if len(got) != 2 || math.Abs(got["fast"]-0.5) > 1e-9 || math.Abs(got["slow"]-1.5) > 1e-9 {
		t.Fatalf("relative %v, want fast 0.5 slow 1.5", got)
	}
}

func TestASiteThatFailsEveryTaskIsSlowNotFast(t *testing.T) {
	tr := NewTracker(0.1)
	for range 20 {
		tr.Observe("good", 1, 30, true)
		tr.Observe("broken", 1, 0.1, false) // fails at once
	}
	rel := tr.Relative()
	if !(rel["broken"] > rel["good"]) {
		t.Fatalf("relative %v: the broken site looks faster", rel)
	}
	w := Weights([]Site{{"good", true, rel["good"]}, {"broken", true, rel["broken"]}}, DefaultConfig())
	if w[0] != 4 || w[1] != 0.5 {
		t.Fatalf("weights %v, want [4 0.5]", w)
	}
}

func TestWeights(t *testing.T) {
	cfg := DefaultConfig()
	tests := []struct {
		name  string
		sites []Site
		want  []float64
	}{
		{"equal sites stay equal", []Site{{"a", true, 1}, {"b", true, 1.1}}, []float64{1, 1}},
		{"one twice as slow: fastest x4, slowest /2", []Site{{"a", true, 0.67}, {"b", true, 1.33}}, []float64{4, 0.5}},
		{"three sites: the middle one is average", []Site{{"a", true, 0.5}, {"b", true, 1}, {"c", true, 1.5}}, []float64{4, 1, 0.5}},
		{"two faster than average: the fastest x4, the other x2",
			[]Site{{"a", true, 0.4}, {"b", true, 0.6}, {"c", true, 1}, {"d", true, 2}}, []float64{4, 2, 1, 0.5}},
		{"a silent site weighs 0 and is left out of the average",
			[]Site{{"a", true, 1}, {"b", false, 0.1}, {"c", true, 1}}, []float64{1, 0, 1}},
		{"sites not measured yet weigh 1", []Site{{"a", true, 0}, {"b", true, 0.5}, {"c", true, 1.5}}, []float64{1, 4, 0.5}},
		{"a single measured site weighs 1", []Site{{"a", true, 3}, {"b", true, 0}}, []float64{1, 1}},
		{"no site", nil, []float64{}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := Weights(tc.sites, cfg)
			if !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("Weights = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestSplit(t *testing.T) {
	tests := []struct {
		name   string
		total  int
		claims []Claim
		want   []int
	}{
		{"by weight", 100, []Claim{{4, -1}, {1, -1}}, []int{80, 20}},
		{"equal weights, odd total: the earlier claim gets the remainder", 5, []Claim{{1, -1}, {1, -1}}, []int{3, 2}},
		{"what a full site cannot take goes to the other", 100, []Claim{{4, 10}, {1, -1}}, []int{10, 90}},
		{"every site full: the rest still goes by weight", 100, []Claim{{1, 10}, {1, 20}}, []int{10 + 35, 20 + 35}},
		{"rooms fill in rounds", 30, []Claim{{1, 5}, {1, 8}, {1, -1}}, []int{5, 8, 17}},
		{"a claim of weight 0 gets nothing", 10, []Claim{{0, -1}, {2, -1}}, []int{0, 10}},
		{"nobody weighs anything: nothing is given", 10, []Claim{{0, -1}, {0, 5}}, []int{0, 0}},
		{"nothing to split", 0, []Claim{{1, -1}}, []int{0}},
		{"room 0 is full from the start", 7, []Claim{{1, 0}, {1, -1}}, []int{0, 7}},
		{"largest remainder", 10, []Claim{{1, -1}, {1, -1}, {1, -1}}, []int{4, 3, 3}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := Split(tc.total, tc.claims)
			if !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("Split(%d, %v) = %v, want %v", tc.total, tc.claims, got, tc.want)
			}
		})
	}
}

// TestSplitProperties: the parts sum to the total while anybody weighs
// something, no claim of weight 0 gets anything, and no claim exceeds its
// room unless every claim with weight is full.
func TestSplitProperties(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range 20000 {
		n := rng.IntN(5) + 1
		claims := make([]Claim, n)
		weighted, roomy := false, 0
		for k := range claims {
			claims[k] = Claim{Weight: []float64{0, 0.5, 1, 2, 4}[rng.IntN(5)], Room: rng.IntN(40) - 5}
			if claims[k].Room < 0 {
				claims[k].Room = -1
			}
			if claims[k].Weight > 0 {
				weighted = true
				if claims[k].Room < 0 {
					roomy = -1
				} else if roomy >= 0 {
					roomy += claims[k].Room
				}
			}
		}
		total := rng.IntN(200)
		got := Split(total, claims)
		sum := 0
		for k, p := range got {
			sum += p
			if p < 0 || (claims[k].Weight == 0 && p > 0) {
				t.Fatalf("case %d: Split(%d, %v) = %v", i, total, claims, got)
			}
			if r := claims[k].Room; r >= 0 && p > r && roomy >= 0 && total <= roomy {
				t.Fatalf("case %d: claim %d over its room while others had room: Split(%d, %v) = %v", i, k, total, claims, got)
			}
		}
		if weighted && sum != total || !weighted && sum != 0 {
			t.Fatalf("case %d: Split(%d, %v) = %v sums to %d", i, total, claims, got, sum)
		}
	}
}

func TestAllowance(t *testing.T) {
	cfg := DefaultConfig()
	tests := []struct {
		name              string
		slots             int
		weight, maxWeight float64
		want              int
	}{
		{"the heaviest pool holds two waves", 16, 4, 4, 32},
		{"a pool of weight 1 against 4 holds a quarter wave more", 16, 1, 4, 20},
		{"a slow pool (0.5 against 4) holds barely more than it runs", 16, 0.5, 4, 18},
		{"a new pool holds at least MinHold", 0, 1, 1, 4},
		{"a silent pool holds nothing more", 16, 0, 4, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := Allowance(tc.slots, tc.weight, tc.maxWeight, cfg); got != tc.want {
				t.Fatalf("Allowance(%d, %v, %v) = %d, want %d", tc.slots, tc.weight, tc.maxWeight, got, tc.want)
			}
		})
	}
}

func TestValidate(t *testing.T) {
	for _, tc := range []struct {
		name string
		mod  func(*Config)
		want string
	}{
		{"tolerance 1", func(c *Config) { c.Tolerance = 1 }, "tolerance"},
		{"negative factor", func(c *Config) { c.Slowest = -1 }, "weight factors"},
		{"NaN ahead", func(c *Config) { c.Ahead = math.NaN() }, "ahead"},
		{"min hold 0", func(c *Config) { c.MinHold = 0 }, "min hold"},
		{"alpha 0", func(c *Config) { c.Alpha = 0 }, "alpha"},
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
