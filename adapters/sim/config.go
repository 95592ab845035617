// Package sim is a deterministic discrete-event cluster: N whole nodes, a
// priority queue, a backfill scheduler in the manner of SLURM's
// sched/backfill, jobs killed at their time limit, and a virtual clock that
// only moves when the caller says so (AdvanceTo). It implements
// adapters.Adapter so the agent drives it exactly as it drives SLURM, and it
// models the harvest pool (pilots pulling tasks from a backlog) so the work
// that pilots do, and lose, can be measured.
package sim

import (
	"errors"
	"fmt"

	"github.com/harvest-hpc/harvest/cluster"
)

// ErrInvalidConfig is wrapped by every Validate error.
var ErrInvalidConfig = errors.New("invalid sim config")

// Config describes the simulated cluster.
type Config struct {
	// Nodes is the number of nodes, of CoresPerNode cores each (0 or 1:
	// whole nodes, every job taking whole nodes). Jobs share nodes as
	// SLURM's select/cons_tres shares them (see nodes.go); pilots take
	// whole idle nodes.
	Nodes        int
	CoresPerNode int
	// Granularity is the time-limit granularity in seconds that pilot
	// limits are rounded down to (SLURM: 60).
	Granularity int64
	// Latency is the batch system's reaction latency in seconds: a
	// scheduling pass runs this long after the first change (submit, end,
	// cancel) since the previous pass. 0 = at once.
	Latency int64
	// LatencyAt, if set, gives the latency of the scheduling pass due to
	// a change at t instead of Latency: a real scheduler's reaction,
	// measured event by event, replayed (package replay). The backfill
	// pass of a BackfillInterval keeps Latency.
	LatencyAt func(t int64) int64
	// BackfillInterval, if positive, splits the scheduler in two as SLURM
	// does: a main pass at every change (after Latency) starts pending
	// jobs in priority order and stops at the first that cannot start
	// (22.05 job_scheduler.c _schedule: ESLURM_NODES_BUSY fails the
	// partition), and the backfill pass (reservations, lower jobs around
	// them) runs at most once per BackfillInterval seconds, and only after
	// a change (backfill.c backfill_agent: bf_interval, _more_work). 0:
	// every pass backfills, a scheduler that backfills the second a job
	// ends.
	BackfillInterval int64
	// BackfillBusy runs the backfill pass every BackfillInterval whether
	// or not anything changed: a site whose job traffic never lets
	// _more_work answer false, so a job only backfill may start waits up
	// to the interval, with or without pilots (a quiet cluster's backfill
	// thread instead wakes at the first change past the interval, and a
	// harvest's own pilot traffic keeps it on the interval).
	BackfillBusy bool
	// Reservations is how many pending jobs, in priority order, get a
	// reservation that lower jobs must not delay (1 = EASY backfill, the
	// scheduler of the KTH and SDSC SP2 machines; SLURM reserves for every
	// job it tests, bf_max_job_test).
	Reservations int
	// Tag is the job name by which pilots are recognised.
	Tag string
	// MaxTime is the partition's MaxTime: a pilot asking for an unlimited
	// limit gets it, as SLURM does. Unlimited = no MaxTime.
	MaxTime cluster.Limit
	// TimeAware makes pilots take a task only if it can finish before the
	// pilot's time limit, as the harvest master does. Without it a pilot
	// killed at its limit loses the task in progress.
	TimeAware bool

	// Preemption adds a preemptible tier (SLURM's lower-PriorityTier
	// partition with PreemptType=preempt/partition_prio): pilots submitted
	// as preemptible queue after every other job, take any idle node, and
	// are invisible to the others' plan; a job that needs their nodes
	// preempts them in the pass that would start it, and starts at a later
	// pass once they are gone (SLURM's select_nodes answers
	// ESLURM_NODES_BUSY to a preemptor): with no grace, the next pass. A
	// preempted pilot hands its task back at once (the task time so far is
	// lost) and its node is free GraceTime seconds later (the worst case: a
	// pilot that uses its whole grace; harvest's exits within about a
	// second of its SIGTERM).
	Preemption bool
	GraceTime  int64
	// TimeMinSizing sizes a pilot submitted with a minimum limit to the
	// plan, as SLURM's backfill does with --time-min from 25.11 on: the
	// longest limit, between the minimum and the one asked for, that ends
	// before the earliest reservation of its node.
	TimeMinSizing bool
	// Multifactor, if set, orders the queue by SLURM's multifactor
	// priority (see Multifactor); nil = FIFO by submit time.
	Multifactor *Multifactor
	// Contention is how many harvest tasks a shared resource (a file
	// server, a link) serves at full speed: a task that starts while n
	// tasks run (itself included) takes its length x max(1, n /
	// Contention), fixed at its start. 0 = no contention.
	Contention int
}

// DefaultConfig returns a 24-node cluster with SLURM's minute granularity.
func DefaultConfig() Config {
	return Config{Nodes: 24, Granularity: 60, Latency: 0, Reservations: 1, Tag: "harvest-pilot", MaxTime: cluster.Unlimited, TimeAware: true}
}

// Validate rejects configurations the simulator cannot run.
func (c Config) Validate() error {
	switch {
	case c.Nodes <= 0:
		return fmt.Errorf("%w: nodes must be positive, got %d", ErrInvalidConfig, c.Nodes)
	case c.CoresPerNode < 0:
		return fmt.Errorf("%w: cores per node must not be negative, got %d", ErrInvalidConfig, c.CoresPerNode)
	case c.Granularity < 1:
		return fmt.Errorf("%w: granularity must be at least 1 s, got %d", ErrInvalidConfig, c.Granularity)
	case c.Latency < 0:
		return fmt.Errorf("%w: latency must not be negative, got %d", ErrInvalidConfig, c.Latency)
	case c.BackfillInterval < 0:
		return fmt.Errorf("%w: backfill interval must not be negative (0 = every pass), got %d", ErrInvalidConfig, c.BackfillInterval)
	case c.BackfillBusy && c.BackfillInterval == 0:
		return fmt.Errorf("%w: a busy backfill thread needs a backfill interval", ErrInvalidConfig)
	case c.Contention < 0:
		return fmt.Errorf("%w: contention must not be negative (0 = none), got %d", ErrInvalidConfig, c.Contention)
	case c.Reservations < 1:
		return fmt.Errorf("%w: reservations must be at least 1, got %d", ErrInvalidConfig, c.Reservations)
	case !c.MaxTime.IsUnlimited() && int64(c.MaxTime) < c.Granularity:
		return fmt.Errorf("%w: max time must be unlimited or at least the granularity (%d s), got %d", ErrInvalidConfig, c.Granularity, int64(c.MaxTime))
	case c.Tag == "":
		return fmt.Errorf("%w: tag is empty", ErrInvalidConfig)
	case c.GraceTime < 0 || c.GraceTime > 0 && !c.Preemption:
		return fmt.Errorf("%w: grace time must not be negative, and needs preemption, got %d", ErrInvalidConfig, c.GraceTime)
	case c.Multifactor != nil:
		return c.Multifactor.validate()
	}
	return nil
}

// latency is the reaction latency to a change at t.
func (c Config) latency(t int64) int64 {
	if c.LatencyAt != nil {
		return max(c.LatencyAt(t), 0)
	}
	return c.Latency
}

// cores is the cores of a node (1 for whole nodes).
func (c Config) cores() int { return max(c.CoresPerNode, 1) }
