package sim

import (
	"context"
	"fmt"
	"slices"

	"github.com/harvest-hpc/harvest/adapters"
)

// free is how many cores a job of the normal tier may use now: the idle
// cores and those of preemptible pilots that are not already going (kept
// as they start, are preempted and end).
func (c *Cluster) free() int {
	return c.idleCores() + c.preemptibleFree
}

// pilotFits reports whether a pilot of the normal tier can take a whole
// node now: an idle one, or one a preemptible pilot holds (preemptFor
// preempts it).
func (c *Cluster) pilotFits() bool {
	return c.nodes.idle() > 0 || c.preemptibleFree > 0
}

// preemptFor preempts, newest first, as many preemptible pilots as job j
// needs beyond the idle cores and those already being preempted, and
// reports whether j can start now. As in SLURM (22.05 select_nodes:
// _preempt_jobs answers ESLURM_NODES_BUSY once it signalled a preemptee),
// a job that preempts does not start in that pass but in a later one, once
// the preempted pilots are gone: with no grace time they end now and j
// starts at the next pass, one reaction latency later; their nodes are
// held for j until then.
func (c *Cluster) preemptFor(j *job) bool {
	idle := c.idleCores() - c.reclaimed
	if j.pilot {
		// A pilot takes a whole idle node: one pilot's node is enough.
		idle = c.idleNodesForPilots() * c.cfg.cores()
	}
	if j.cores <= idle {
		return true
	}
	need := j.cores - idle - c.goingCores
	// c.running is in id order: newest last. A pilot preempted with no
	// grace leaves it at once, which moves none below it.
	for i := len(c.running) - 1; i >= 0 && need > 0; i-- {
		if v := c.running[i]; v.preemptible && !v.preempting {
			c.preempt(v)
			need -= v.cores
		}
	}
	if c.cfg.GraceTime == 0 {
		c.reclaimed += j.cores
	}
	return false
}

// preempt stops pilot v for a foreign job: its task goes back to the
// backlog at once (the harvest pilot reports it interrupted on SIGTERM)
// and the node is free after the grace time.
func (c *Cluster) preempt(v *job) {
	c.changes++
	v.rec.Preempted = true
	if v.task != nil {
		c.lostTaskSec += c.now - v.taskFrom
		c.requeue(v)
		c.busyPilots--
		c.idlePilots++
		c.sample()
	}
	if c.cfg.GraceTime == 0 {
		c.finish(v, false, false)
		return
	}
	v.preempting = true
	c.byEnd[c.endIndex(v)].lower = false // in the plan until it ends
	c.preemptibleFree -= v.cores
	c.goingCores += v.cores
	c.endAt(v, c.now+c.cfg.GraceTime)
}

// endAt moves running job j's end to t (not later than its current end).
func (c *Cluster) endAt(j *job, t int64) {
	if t >= j.endByLimit() {
		return
	}
	k := c.endIndex(j)
	c.byEnd = slices.Delete(c.byEnd, k, k+1)
	j.limit = t - j.rec.Start
	c.viewChanged(j)
	c.byEnd = slices.Insert(c.byEnd, c.endIndex(j), j.release())
	j.endGen++
	c.push(event{t: t, kind: evEnd, j: j, gen: j.endGen})
	if j.task != nil && j.taskFrom+j.taskLen > t {
		// The task in progress cannot finish before the new end: the
		// master stops it when the pilot leaves, so it is lost then.
		j.taskGen++
	}
}

// sizePilot sets pilot j's limit, when it has a minimum limit and
// Config.TimeMinSizing, to the longest between its minimum and the limit
// it asked for that ends before the plan p (nil: built here) needs its
// node. It reports whether even the minimum fits.
func (c *Cluster) sizePilot(j *job, p *profile) bool {
	if j.minLimit == 0 || !c.cfg.TimeMinSizing {
		return true
	}
	if p == nil {
		p = c.buildProfile()
	}
	fit := p.fits(j.cores, j.limit)
	g := c.cfg.Granularity
	if fit != never {
		fit = fit / g * g // whole minutes, rounded down
	}
	if fit < j.minLimit {
		if j.preemptible {
			j.limit = j.minLimit // it starts anyway: nobody waits for it
		}
		return false
	}
	j.limit = min(j.limit, fit)
	return true
}

// Shrink implements adapters.Adapter: a running pilot's end moves in to
// end. The pilot takes no task that cannot finish by then, and loses the
// one in progress if it cannot.
func (c *Cluster) Shrink(ctx context.Context, id adapters.PilotID, end int64) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if end <= c.now {
		return fmt.Errorf("shrink %s: end %d is not after now %d: %w", id, end, c.now, adapters.ErrInvalidSpec)
	}
	j := c.lookup(string(id))
	if j == nil {
		return nil
	}
	if !j.pilot {
		return fmt.Errorf("shrink %s: %w", id, adapters.ErrNotPilot)
	}
	if j.state != stRunning || end >= j.endByLimit() {
		return nil
	}
	c.changes++
	j.rec.Shrunk = true
	c.endAt(j, end)
	c.dirty() // the plan sees the node free earlier
	return nil
}

// idleNodesForPilots is the number of wholly idle nodes a pilot may take in
// this pass: those not held for jobs that preempted pilots and start at the
// next pass (reclaimed counts cores; a held core keeps its whole node).
func (c *Cluster) idleNodesForPilots() int {
	per := c.cfg.cores()
	return max(c.nodes.idle()-(c.reclaimed+per-1)/per, 0)
}
