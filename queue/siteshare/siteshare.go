// Package siteshare holds the pure arithmetic of a queue shared by several
// clusters (sites): each site's pilots form a pool with its own master, and
// the queue decides how much of the work each pool may take.
//
// After Vedalaveni's co-scheduler (2013), which spread one workload over
// several HTCondor sites:
//
//   - Speed: the queue keeps, per site and job, the turnaround of recent
//     tasks (from the pull that handed a task to the site's master to its
//     result: queue wait at the site plus run time), divided by the share of
//     attempts that succeeded, so a site whose node fails every task is slow,
//     not fast. A site's relative turnaround is the mean over the jobs that
//     also ran elsewhere of its turnaround over the job's mean across sites.
//   - Weights: the fastest site's weight x4, the slowest's /2, those faster
//     than the average x2, the rest x1; sites within Tolerance of the average
//     count as average, so equal sites stay equal. A silent site weighs 0.
//   - Shares: the pending tasks are split among the sites by weight, each
//     capped by its room (what it could start now); what a site cannot take
//     goes to the others. Each site's agent sees its share as its backlog.
//   - Allowance: a pool's master may hold its slots plus an ahead margin
//     scaled by its weight, so a slow site's pilots do not sit on tasks a
//     fast site could run.
//   - A global cap on harvest pilots is split among the sites the same way.
//
// No I/O, no clock: every input is an argument.
package siteshare

import (
	"errors"
	"fmt"
	"math"
	"sort"
	"time"
)

// ErrInvalidConfig is wrapped by every Config.Validate error.
var ErrInvalidConfig = errors.New("invalid site share config")

// Config tunes the rules.
type Config struct {
	// Tolerance: a site within this fraction of the average relative
	// turnaround counts as average. Default 0.2.
	Tolerance float64 `json:"tolerance"`
	// Fastest, Faster and Slowest are the weight factors of the fastest
	// site, of the other sites faster than average, and of the slowest
	// site. Defaults 4, 2 and 0.5.
	Fastest float64 `json:"fastest"`
	Faster  float64 `json:"faster"`
	Slowest float64 `json:"slowest"`
	// Ahead is how many waves of its slots the heaviest pool's master may
	// hold beyond the tasks it runs; lighter pools get less. Default 1.
	Ahead float64 `json:"ahead"`
	// MinHold is the least a live pool may hold, so a new pool can start
	// before it has reported its slots. Default 4.
	MinHold int `json:"min_hold"`
	// Alpha is the weight of a new observation in the moving averages.
	// Default 0.1 (about the last 20 tasks of a job at a site).
	Alpha float64 `json:"alpha"`
	// SilentAfter: a site whose agent and master have not called for this
	// long is silent and weighs 0 until it calls again. Default 1 min.
	SilentAfter time.Duration `json:"silent_after"`
	// ReportTTL: a master's report older than this is ignored (its master
	// is gone; the next one reports afresh). Default 2 min.
	ReportTTL time.Duration `json:"report_ttl"`
	// PilotTTL: a pilot the master has not listed for this long is
	// forgotten. Default 5 min (the queue's zombie timeout).
	PilotTTL time.Duration `json:"pilot_ttl"`
	// DefaultSlotsPerNode is used until a master reports its own. Default 1.
	DefaultSlotsPerNode int `json:"default_slots_per_node"`
}

// DefaultConfig returns the defaults above.
func DefaultConfig() Config {
	return Config{Tolerance: 0.2, Fastest: 4, Faster: 2, Slowest: 0.5, Ahead: 1, MinHold: 4, Alpha: 0.1, SilentAfter: time.Minute,
		ReportTTL: 2 * time.Minute, PilotTTL: 5 * time.Minute, DefaultSlotsPerNode: 1}
}

// Validate reports the first setting that makes no sense.
func (c Config) Validate() error {
	bad := func(format string, a ...any) error {
		return fmt.Errorf("%w: %s", ErrInvalidConfig, fmt.Sprintf(format, a...))
	}
	pos := func(x float64) bool { return x > 0 && !math.IsInf(x, 0) }
	switch {
	case !(c.Tolerance >= 0 && c.Tolerance < 1):
		return bad("tolerance %v must be in [0, 1)", c.Tolerance)
	case !pos(c.Fastest) || !pos(c.Faster) || !pos(c.Slowest):
		return bad("weight factors must be positive, got fastest %v faster %v slowest %v", c.Fastest, c.Faster, c.Slowest)
	case !(c.Ahead >= 0) || math.IsInf(c.Ahead, 0):
		return bad("ahead %v must not be negative", c.Ahead)
	case c.MinHold < 1:
		return bad("min hold %d must be at least 1", c.MinHold)
	case !(c.Alpha > 0 && c.Alpha <= 1):
		return bad("alpha %v must be in (0, 1]", c.Alpha)
	case c.SilentAfter <= 0 || c.ReportTTL <= 0 || c.PilotTTL <= 0:
		return bad("silent after %v, report TTL %v and pilot TTL %v must be positive", c.SilentAfter, c.ReportTTL, c.PilotTTL)
	case c.DefaultSlotsPerNode < 1:
		return bad("default slots per node %d must be at least 1", c.DefaultSlotsPerNode)
	}
	return nil
}

// minSuccess floors the success rate, so a site that fails every task is
// a thousand times slower, not infinitely slow.
const minSuccess = 0.001

// Tracker keeps the moving averages of turnaround and success per site and
// job. It is plain data, not safe for concurrent use; the queue guards it.
type Tracker struct {
	alpha float64
	cells map[cellKey]*cell
}

type cellKey struct {
	site string
	job  int64
}

type cell struct {
	n          int
	turnaround float64 // seconds, moving average over every attempt
	success    float64 // moving average of 1 (done) and 0 (failed)
}

// NewTracker returns an empty tracker; alpha is Config.Alpha.
func NewTracker(alpha float64) *Tracker {
	return &Tracker{alpha: alpha, cells: map[cellKey]*cell{}}
}

// Observe records one finished attempt of a job's task at a site: seconds
// from its hand-out to its result, and whether it succeeded. Interrupted
// attempts (the pilot was released) say nothing about the site's speed;
// the caller leaves them out.
func (t *Tracker) Observe(site string, job int64, seconds float64, ok bool) {
	if seconds < 0 || math.IsNaN(seconds) || math.IsInf(seconds, 0) {
		return
	}
	s := 0.0
	if ok {
		s = 1
	}
	k := cellKey{site, job}
	c := t.cells[k]
	if c == nil {
		t.cells[k] = &cell{n: 1, turnaround: seconds, success: s}
		return
	}
	c.n++
	c.turnaround += t.alpha * (seconds - c.turnaround)
	c.success += t.alpha * (s - c.success)
}

// ForgetJob drops a job's figures (it ended).
func (t *Tracker) ForgetJob(job int64) {
	for k := range t.cells {
		if k.job == job {
			delete(t.cells, k)
		}
	}
}

// Effective is a site's turnaround for a job divided by its success rate:
// the time it takes the site to return one good result.
func (t *Tracker) Effective(site string, job int64) (float64, bool) {
	c := t.cells[cellKey{site, job}]
	if c == nil {
		return 0, false
	}
	return effective(c), true
}

func effective(c *cell) float64 {
	return c.turnaround / math.Max(c.success, minSuccess)
}

// Relative returns each site's relative turnaround: over the jobs that ran
// at this site and at least one other, the observation-weighted mean of
// the site's effective turnaround divided by the job's mean across sites.
// 1 is average, 2 twice as slow. Sites with no such job are absent.
func (t *Tracker) Relative() map[string]float64 {
	type agg struct {
		sum float64
		n   int
	}
	perJob := map[int64][]cellKey{}
	for k := range t.cells {
		perJob[k.job] = append(perJob[k.job], k)
	}
	sites := map[string]*agg{}
	for _, keys := range perJob {
		if len(keys) < 2 {
			continue
		}
		mean := 0.0
		for _, k := range keys {
			mean += effective(t.cells[k])
		}
		mean /= float64(len(keys))
		if mean <= 0 {
			continue
		}
		for _, k := range keys {
			c := t.cells[k]
			r := effective(c) / mean
			a := sites[k.site]
			if a == nil {
				a = &agg{}
				sites[k.site] = a
			}
			a.sum += r * float64(c.n)
			a.n += c.n
		}
	}
	out := make(map[string]float64, len(sites))
	for s, a := range sites {
		out[s] = a.sum / float64(a.n)
	}
	return out
}

// Site is one site as the rules see it.
type Site struct {
	Name string
	// Alive: the site's agent or master was heard from recently.
	Alive bool
	// Relative turnaround (1 = average); 0 means not known yet.
	Relative float64
}

// Weights applies the rule: a silent site weighs 0; among the live sites
// with a known relative turnaround, the fastest x Fastest, the slowest x
// Slowest, the others faster than average x Faster, all others (and sites
// not measured yet) 1. A site counts as faster or slower only beyond
// Tolerance of the average, so equal sites keep equal weights.
func Weights(sites []Site, cfg Config) []float64 {
	w := make([]float64, len(sites))
	mean, n := 0.0, 0
	fastest, slowest := -1, -1
	for i, s := range sites {
		if !s.Alive {
			continue
		}
		w[i] = 1
		if s.Relative <= 0 {
			continue
		}
		mean += s.Relative
		n++
		if fastest < 0 || s.Relative < sites[fastest].Relative {
			fastest = i
		}
		if slowest < 0 || s.Relative > sites[slowest].Relative {
			slowest = i
		}
	}
	if n < 2 {
		return w
	}
	mean /= float64(n)
	lo, hi := mean*(1-cfg.Tolerance), mean*(1+cfg.Tolerance)
	for i, s := range sites {
		if !s.Alive || s.Relative <= 0 {
			continue
		}
		switch {
		case i == fastest && s.Relative < lo:
			w[i] = cfg.Fastest
		case i == slowest && s.Relative > hi:
			w[i] = cfg.Slowest
		case s.Relative < lo:
			w[i] = cfg.Faster
		}
	}
	return w
}

// Claim is one site's part in a split: its weight and its room, the most it
// can use now (negative = no limit).
type Claim struct {
	Weight float64
	Room   int
}

// Split divides total among the claims in proportion to their weights,
// none above its room; what the sites with room cannot take is then split
// among all the sites with weight by weight, so nothing is lost while any
// site weighs something (the sites' room changes from round to round).
// Claims that weigh 0 get 0. Integer parts follow the largest remainder,
// ties to the earlier claim. The parts sum to total unless every weight
// is 0.
func Split(total int, claims []Claim) []int {
	out := make([]int, len(claims))
	if total <= 0 {
		return out
	}
	open := make([]bool, len(claims))
	some := false
	for i, c := range claims {
		open[i] = c.Weight > 0 && !math.IsNaN(c.Weight)
		some = some || open[i]
	}
	if !some {
		return out
	}
	left := total
	// Water-filling: give every open claim its weighted part of what is
	// left; claims that reach their room close; repeat.
	for left > 0 {
		var active []int
		sum := 0.0
		for i, c := range claims {
			if open[i] && (c.Room < 0 || out[i] < c.Room) {
				active = append(active, i)
				sum += c.Weight
			}
		}
		if len(active) == 0 {
			break
		}
		parts := apportion(left, active, claims, sum)
		capped := false
		for k, i := range active {
			p := parts[k]
			if r := claims[i].Room; r >= 0 && out[i]+p >= r {
				p = r - out[i]
				capped = true
			}
			out[i] += p
			left -= p
		}
		if !capped {
			break
		}
	}
	if left > 0 {
		// Every site is full: the rest still goes by weight.
		var active []int
		sum := 0.0
		for i, c := range claims {
			if open[i] {
				active = append(active, i)
				sum += c.Weight
			}
		}
		for k, p := range apportion(left, active, claims, sum) {
			out[active[k]] += p
		}
	}
	return out
}

// apportion splits n among idx by weight with the largest remainder.
func apportion(n int, idx []int, claims []Claim, sum float64) []int {
	parts := make([]int, len(idx))
	type rem struct {
		k int
		r float64
	}
	rems := make([]rem, len(idx))
	given := 0
	for k, i := range idx {
		exact := float64(n) * claims[i].Weight / sum
		parts[k] = int(math.Floor(exact))
		given += parts[k]
		rems[k] = rem{k, exact - float64(parts[k])}
	}
	sort.SliceStable(rems, func(a, b int) bool { return rems[a].r > rems[b].r })
	for j := 0; given < n; j++ {
		parts[rems[j%len(rems)].k]++
		given++
	}
	return parts
}

// Allowance is the most tasks a pool may hold at once (handed to its master
// and not finished): its slots plus Ahead waves of them scaled by its
// weight relative to the heaviest site, at least MinHold. A pool that
// weighs 0 (its site is silent) may hold nothing more.
func Allowance(slots int, weight, maxWeight float64, cfg Config) int {
	if !(weight > 0) || !(maxWeight > 0) {
		return 0
	}
	slots = max(slots, 0)
	ahead := int(math.Ceil(cfg.Ahead * float64(slots) * math.Min(1, weight/maxWeight)))
	return max(cfg.MinHold, slots+ahead)
}
