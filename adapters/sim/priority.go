package sim

import (
	"fmt"
	"math"
	"slices"
)

// Multifactor orders the queue as SLURM's priority/multifactor plugin
// does, with the factors a trace can feed: priority = WeightAge x age +
// WeightSize x size + WeightFairshare x fair share, each factor in [0, 1]:
//   - age = min(1, time pending / MaxAge);
//   - size = nodes / cluster nodes (PriorityFavorSmall=NO: wide jobs first);
//   - fair share = 2^(-U/S) (the classic formula): U is the user's share
//     of all usage, usage being node-seconds decayed with half-life
//     HalfLife; S = 1 / the users seen so far (equal shares). Pilots run
//     as user "harvest" and earn usage like anybody.
//
// Priorities are recomputed at every scheduling pass (SLURM: every
// PriorityCalcPeriod, 5 min), ties broken by submit time then arrival. The
// preemptible tier still queues after everything else.
type Multifactor struct {
	WeightAge, WeightSize, WeightFairshare float64
	MaxAge, HalfLife                       int64 // seconds
}

// DefaultMultifactor returns SLURM's defaults for PriorityMaxAge and
// PriorityDecayHalfLife (7 days) and equal weights of 1000 (SLURM's are 0,
// which is FIFO: sites set their own).
func DefaultMultifactor() Multifactor {
	return Multifactor{WeightAge: 1000, WeightSize: 1000, WeightFairshare: 1000, MaxAge: 7 * 86400, HalfLife: 7 * 86400}
}

func (m Multifactor) validate() error {
	if m.WeightAge < 0 || m.WeightSize < 0 || m.WeightFairshare < 0 || m.MaxAge <= 0 || m.HalfLife <= 0 {
		return fmt.Errorf("%w: multifactor weights must not be negative and max age and half-life must be positive: %+v", ErrInvalidConfig, m)
	}
	return nil
}

// usage is one user's decayed node-seconds as of at, and the nodes they
// hold now.
type usage struct {
	used    float64
	at      int64
	holding int
}

// charge brings u up to now: past usage decays, and the nodes held since
// u.at add their decayed node-seconds (the integral of holding x
// 2^-(now-s)/h over [at, now]).
func (u *usage) charge(now, halfLife int64) {
	if dt := now - u.at; dt > 0 {
		d := math.Exp2(-float64(dt) / float64(halfLife))
		u.used = u.used*d + float64(u.holding)*float64(halfLife)/math.Ln2*(1-d)
		u.at = now
	}
}

func (c *Cluster) userUsage(user string) *usage {
	u := c.usage[user]
	if u == nil {
		u = &usage{at: c.now}
		c.usage[user] = u
		c.users = append(c.users, u)
	}
	return u
}

// hold records that user starts (n > 0) or stops (n < 0) holding n nodes.
func (c *Cluster) hold(user string, n int) {
	if c.cfg.Multifactor == nil {
		return
	}
	u := c.userUsage(user)
	u.charge(c.now, c.cfg.Multifactor.HalfLife)
	u.holding += n
}

// reprioritise recomputes the pending jobs' priorities and re-sorts the
// queue. It counts as a change when the order changes (Changes).
func (c *Cluster) reprioritise() {
	m := c.cfg.Multifactor
	if m == nil {
		return
	}
	// Summed in the order users appeared (deterministic), not the map's:
	// a float sum's last digits depend on its order, and the queue order
	// on them.
	var total float64
	for _, u := range c.users {
		u.charge(c.now, m.HalfLife)
		total += u.used
	}
	share := 1 / float64(max(len(c.usage), 1))
	for _, j := range c.pending {
		if j.state != stPending {
			continue
		}
		fs := 1.0
		if u := c.usage[j.rec.User]; u != nil && total > 0 {
			fs = math.Exp2(-u.used / total / share)
		}
		age := min(1, float64(c.now-j.rec.Submit)/float64(m.MaxAge))
		j.prio = m.WeightAge*max(age, 0) + m.WeightSize*float64(j.cores)/float64(c.totalCores()) + m.WeightFairshare*fs
	}
	before := slices.Clone(c.pending)
	slices.SortStableFunc(c.pending, func(a, b *job) int {
		switch {
		case a.preemptible != b.preemptible:
			if a.preemptible {
				return 1
			}
			return -1
		case a.prio != b.prio:
			if a.prio > b.prio {
				return -1
			}
			return 1
		case a.rec.Submit != b.rec.Submit:
			return int(min(max(a.rec.Submit-b.rec.Submit, -1), 1))
		}
		return int(min(max(a.seq-b.seq, -1), 1))
	})
	if !slices.Equal(before, c.pending) {
		c.changes++
	}
}
