// Package capacity is the degradation-aware capacity rule of a harvest
// pool: more pilots are not always more throughput. When the tasks of a
// job contend for something shared (a file server, a network link, a
// licence server), each task takes longer as the pool grows, and past some
// size the pool only burns node-hours.
//
// The rule, after Vedalaveni's co-scheduler (2013): the master measures the
// run time of each job's tasks (tasks of one job are alike) against the pool
// size they ran at. A job's baseline is the lowest mean run time judged at
// any size. A size is degraded when the tasks that ran at it take more than
// Factor x their job's baseline (default 1.25). While nothing degrades the
// pool grows step by step (the cap doubles from InitialSize, so each size is
// seen before the next); on degradation the largest size that does not
// degrade is found by binary search between the largest good size and the
// smallest degraded one; that size is held for HoldRounds rounds, then the
// degraded size is probed again in case the contention went away.
//
// The Controller is pure: no clock, no I/O, no randomness. The master feeds
// it, once per round, the pool size and the run times of the tasks that
// finished since the last round; it answers with the cap on the pool size
// (0 = none) and why. A round is whatever period the caller steps it at.
package capacity

import (
	"errors"
	"fmt"
	"sort"
	"time"
)

// ErrInvalidConfig is wrapped by every Config.Validate error.
var ErrInvalidConfig = errors.New("invalid capacity config")

// Config tunes the rule.
type Config struct {
	// Factor: a size is degraded when its tasks take more than Factor x
	// their job's baseline run time. Default 1.25.
	Factor float64 `json:"factor"`
	// MinSamples is how many finished tasks of one job at one size are
	// needed to judge that size. Default 5.
	MinSamples int `json:"min_samples"`
	// HoldRounds is how long the size found is held before the degraded
	// size is probed again. Default 30.
	HoldRounds int `json:"hold_rounds"`
	// InitialSize is the cap before any size has been judged; while
	// nothing degrades the cap is twice the largest good size, and never
	// below InitialSize. Default 4.
	InitialSize int `json:"initial_size"`
	// MinSize is the smallest cap ever set. Default 1.
	MinSize int `json:"min_size"`
}

// DefaultConfig returns the defaults above.
func DefaultConfig() Config {
	return Config{Factor: 1.25, MinSamples: 5, HoldRounds: 30, InitialSize: 4, MinSize: 1}
}

// Validate reports the first setting that makes no sense.
func (c Config) Validate() error {
	bad := func(format string, a ...any) error {
		return fmt.Errorf("%w: %s", ErrInvalidConfig, fmt.Sprintf(format, a...))
	}
	switch {
	case !(c.Factor > 1) || c.Factor > 100:
		return bad("factor %v must be above 1 (a size is degraded when its tasks take factor x the baseline)", c.Factor)
	case c.MinSamples < 1:
		return bad("min samples %d must be at least 1", c.MinSamples)
	case c.HoldRounds < 0:
		return bad("hold rounds %d is negative", c.HoldRounds)
	case c.MinSize < 1:
		return bad("min size %d must be at least 1", c.MinSize)
	case c.InitialSize < c.MinSize:
		return bad("initial size %d is below the min size %d", c.InitialSize, c.MinSize)
	}
	return nil
}

// Sample is one finished task: its job, the pool size (nodes) when it was
// handed out, and how long it ran. Only tasks that succeeded are
// comparable; the caller leaves failed and interrupted ones out.
type Sample struct {
	Job      int64
	Size     int
	Duration time.Duration
}

// Phase is where the rule stands.
type Phase string

// Phases.
const (
	// Grow: nothing degraded; the cap doubles as sizes are judged good.
	Grow Phase = "grow"
	// Search: binary search between the largest good size and the
	// smallest degraded one.
	Search Phase = "search"
	// Hold: the largest size that does not degrade is held.
	Hold Phase = "hold"
	// Probe: the hold is over; the smallest degraded size is tried again.
	Probe Phase = "probe"
)

// State is the controller's memory. It is plain data (JSON-ready) so a
// master can checkpoint it and a new master can resume.
type State struct {
	Phase Phase `json:"phase"`
	// Good is the largest size judged not degraded (0 = none yet); in a
	// search it is the lower bound.
	Good int `json:"good"`
	// Bad is the smallest size judged degraded (0 = none).
	Bad int `json:"bad"`
	// HoldLeft counts the rounds left in Hold.
	HoldLeft int `json:"hold_left,omitempty"`
	// Baseline is each job's lowest judged mean run time, in seconds.
	Baseline map[int64]float64 `json:"baseline,omitempty"`
	// Acc holds the run times not judged yet, per job and size.
	Acc []Acc `json:"acc,omitempty"`
}

// Acc sums the run times of one job's tasks at one size.
type Acc struct {
	Job     int64   `json:"job"`
	Size    int     `json:"size"`
	N       int     `json:"n"`
	Seconds float64 `json:"seconds"`
}

// Judgement is the verdict on one size in one round.
type Judgement struct {
	Size int `json:"size"`
	// Ratio is the sample-weighted mean, over the jobs judged, of the mean
	// run time at Size divided by the job's baseline.
	Ratio    float64 `json:"ratio"`
	Samples  int     `json:"samples"`
	Degraded bool    `json:"degraded"`
}

// Decision is the controller's answer for one round.
type Decision struct {
	// Cap is the largest pool size allowed; 0 means no cap.
	Cap    int         `json:"cap"`
	Phase  Phase       `json:"phase"`
	Judged []Judgement `json:"judged,omitempty"`
	Reason string      `json:"reason"`
}

// Limit caps n (a recommendation or a pool size) by the decision's cap.
func (d Decision) Limit(n int) int {
	if d.Cap > 0 && n > d.Cap {
		return d.Cap
	}
	return n
}

// Controller runs the rule. It is not safe for concurrent use.
type Controller struct {
	cfg Config
	st  State
}

// New returns a controller in the Grow phase; cfg must be valid.
func New(cfg Config) *Controller {
	return &Controller{cfg: cfg, st: State{Phase: Grow, Baseline: map[int64]float64{}}}
}

// Restore returns a controller that resumes from st (a checkpointed State).
func Restore(cfg Config, st State) *Controller {
	c := New(cfg)
	if st.Phase != "" {
		c.st = st
	}
	if c.st.Baseline == nil {
		c.st.Baseline = map[int64]float64{}
	}
	return c
}

// State returns a copy of the controller's memory.
func (c *Controller) State() State {
	s := c.st
	s.Baseline = make(map[int64]float64, len(c.st.Baseline))
	for k, v := range c.st.Baseline {
		s.Baseline[k] = v
	}
	s.Acc = append([]Acc(nil), c.st.Acc...)
	return s
}

// Step feeds one round's finished tasks and returns the cap. Samples with
// no size or no duration are ignored.
func (c *Controller) Step(samples []Sample) Decision {
	c.add(samples)
	if c.st.Phase == Hold {
		c.st.HoldLeft--
	}
	judged := c.judge()
	for _, j := range judged {
		c.apply(j)
	}
	if c.st.Phase == Hold && c.st.HoldLeft <= 0 {
		c.st.Phase = Probe
	}
	return c.decision(judged)
}

// Forget drops what was learnt about a job (it finished or was
// cancelled), so the state stays small.
func (c *Controller) Forget(job int64) {
	delete(c.st.Baseline, job)
	acc := c.st.Acc[:0]
	for _, a := range c.st.Acc {
		if a.Job != job {
			acc = append(acc, a)
		}
	}
	c.st.Acc = acc
}

func (c *Controller) add(samples []Sample) {
	for _, s := range samples {
		if s.Size <= 0 || s.Duration <= 0 {
			continue
		}
		i := c.find(s.Job, s.Size)
		c.st.Acc[i].N++
		c.st.Acc[i].Seconds += s.Duration.Seconds()
	}
}

func (c *Controller) find(job int64, size int) int {
	for i, a := range c.st.Acc {
		if a.Job == job && a.Size == size {
			return i
		}
	}
	c.st.Acc = append(c.st.Acc, Acc{Job: job, Size: size})
	return len(c.st.Acc) - 1
}

// judge turns every (job, size) with enough samples into a verdict per
// size, smallest size first, and updates the baselines.
func (c *Controller) judge() []Judgement {
	type sum struct {
		weighted float64
		n        int
	}
	sizes := map[int]*sum{}
	keep := c.st.Acc[:0]
	var ready []Acc
	for _, a := range c.st.Acc {
		if a.N >= c.cfg.MinSamples {
			ready = append(ready, a)
		} else {
			keep = append(keep, a)
		}
	}
	c.st.Acc = keep
	// Smaller sizes first, so a baseline set at a small size judges a
	// larger size of the same round.
	sort.Slice(ready, func(i, j int) bool {
		if ready[i].Size != ready[j].Size {
			return ready[i].Size < ready[j].Size
		}
		return ready[i].Job < ready[j].Job
	})
	for _, a := range ready {
		mean := a.Seconds / float64(a.N)
		base, ok := c.st.Baseline[a.Job]
		if !ok || mean < base {
			base = mean
			c.st.Baseline[a.Job] = mean
		}
		ratio := 1.0
		if base > 0 {
			ratio = mean / base
		}
		s := sizes[a.Size]
		if s == nil {
			s = &sum{}
			sizes[a.Size] = s
		}
		s.weighted += ratio * float64(a.N)
		s.n += a.N
	}
	out := make([]Judgement, 0, len(sizes))
	for size, s := range sizes {
		r := s.weighted / float64(s.n)
		out = append(out, Judgement{Size: size, Ratio: r, Samples: s.n, Degraded: r > c.cfg.Factor})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Size < out[j].Size })
	return out
}

// apply moves the bounds after one verdict.
func (c *Controller) apply(j Judgement) {
	st := &c.st
	if !j.Degraded {
		if st.Bad > 0 && j.Size >= st.Bad {
			// A size we thought degraded is fine now: the contention
			// went away. Grow again from here.
			st.Bad = 0
			st.Good = j.Size
		} else {
			st.Good = max(st.Good, j.Size)
		}
	} else {
		if st.Bad == 0 || j.Size < st.Bad {
			st.Bad = j.Size
		}
		if st.Good >= j.Size {
			// A size once good degrades now: search below it from half
			// of it (assumed good until judged).
			st.Good = max(c.cfg.MinSize, j.Size/2)
			if st.Good >= j.Size {
				st.Good = j.Size - 1
			}
		}
	}
	c.settle(j)
}

// settle picks the phase from the bounds after verdict j.
func (c *Controller) settle(j Judgement) {
	st := &c.st
	switch {
	case st.Bad == 0:
		st.Phase = Grow
	case st.Bad-max(st.Good, c.cfg.MinSize) <= 1:
		// The largest size that does not degrade is found.
		switch st.Phase {
		case Hold:
			// Verdicts that leave the bounds alone do not restart the hold.
		case Probe:
			// Only the probed size ends a probe: degraded again, hold again.
			if j.Degraded && j.Size == st.Bad {
				st.Phase, st.HoldLeft = Hold, c.cfg.HoldRounds
			}
		default:
			st.Phase, st.HoldLeft = Hold, c.cfg.HoldRounds
		}
	default:
		st.Phase = Search
	}
}

func (c *Controller) decision(judged []Judgement) Decision {
	st := c.st
	d := Decision{Phase: st.Phase, Judged: judged}
	lo := max(st.Good, c.cfg.MinSize)
	switch st.Phase {
	case Grow:
		if st.Good == 0 {
			d.Cap = c.cfg.InitialSize
			d.Reason = fmt.Sprintf("no size judged yet: growing to %d nodes first", d.Cap)
		} else {
			d.Cap = max(2*st.Good, c.cfg.InitialSize)
			d.Reason = fmt.Sprintf("no degradation up to %d nodes: growing to %d", st.Good, d.Cap)
		}
	case Search:
		d.Cap = lo + (st.Bad-lo)/2
		d.Reason = fmt.Sprintf("tasks degrade at %d nodes, not at %d: trying %d", st.Bad, lo, d.Cap)
	case Hold:
		d.Cap = lo
		d.Reason = fmt.Sprintf("%d nodes is the largest size that does not degrade (%d does): holding it %d more rounds",
			lo, st.Bad, st.HoldLeft)
	case Probe:
		d.Cap = st.Bad
		d.Reason = fmt.Sprintf("hold over: probing %d nodes again (degraded before; %d did not)", st.Bad, lo)
	}
	for _, j := range judged {
		if j.Degraded {
			d.Reason = fmt.Sprintf("tasks at %d nodes take %.2fx their baseline (> %.2f); ", j.Size, j.Ratio, c.cfg.Factor) + d.Reason
			break
		}
	}
	return d
}
