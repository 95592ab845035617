package policy

import (
	"errors"
	"fmt"

	"github.com/harvest-hpc/harvest/cluster"
)

// ErrInvalidConfig is wrapped by every Config.Validate error.
var ErrInvalidConfig = errors.New("invalid policy config")

// Config holds the admin's settings for the scaling policy. Durations are
// whole seconds because snapshots and batch-system limits are.
//
// The snapshot may carry some of the same settings (min_nodes, max_nodes,
// max_time_s, demand); see Decide for which wins.
type Config struct {
	// MinNodes is the admin's floor: the harvest keeps at least this many
	// pilots (unless the backlog cannot use them). A snapshot's min_nodes,
	// when non-zero, overrides it.
	MinNodes int `json:"min_nodes"`
	// MaxNodes caps the pilots held in total (visible and on their way);
	// 0 means no cap. A snapshot's max_nodes, when non-zero, overrides it.
	MaxNodes int `json:"max_nodes"`
	// MiniTime is the short horizon of case 4: if a running job ends
	// within it, the round waits for the nodes it frees. Seconds.
	MiniTime int64 `json:"mini_time_s"`
	// Margin is subtracted from maxTime to get a pilot's limit, so the
	// pilot ends before the top pending job could start. Seconds.
	Margin int64 `json:"margin_s"`
	// Granularity is the batch system's time-limit unit in seconds (SLURM:
	// 60, and it rounds limits up); pilot limits are rounded down to it.
	Granularity int64 `json:"granularity_s"`
	// MaxPilotLimit caps every pilot's limit (the configured cap);
	// cluster.Unlimited means no cap beyond the partition's MaxTime.
	MaxPilotLimit cluster.Limit `json:"max_pilot_limit_s"`
	// HarvestWhileIdle keeps pilots on idle nodes whatever the backlog
	// (the original system's behaviour): the snapshot's demand is ignored.
	HarvestWhileIdle bool `json:"harvest_while_idle"`
	// UseExpectedStart lets maxTime be the earlier of the policy's own
	// estimate and the batch system's expected start of the top job.
	UseExpectedStart bool `json:"use_expected_start"`
	// KeepRecommended lets the master's MiniNode recommendation protect
	// pilots from release, as the admin's floor does (the original
	// system's behaviour). By default the recommendation only makes the
	// harvest take idle nodes sooner (case 2); pilots are released for a
	// waiting job down to the admin's floor, so nobody waits on a
	// recommendation the admin never made.
	KeepRecommended bool `json:"keep_recommended,omitempty"`
	// Recommendation maps the backlog to the master's MiniNode
	// recommendation (see Recommend).
	Recommendation RecommendConfig `json:"recommendation"`

	// Preemption is the give-back mode where pilots above Keep run in a
	// preemptible tier (snapshot jobs marked preemptible) that the batch
	// system preempts the moment a foreign job needs their nodes: the
	// policy never releases those for a waiting job, it only sizes, caps
	// and drains. Pilots outside the tier (the floor) are handled as when
	// polling.
	Preemption bool `json:"preemption,omitempty"`
	// Shrink pulls in the end of running pilots above the floor that
	// would still hold nodes when the top pending job can start
	// (Decision.Shrink), rather than cancelling them then.
	Shrink bool `json:"shrink,omitempty"`
	// ShrinkMargin is how long before the top job can start a shrunk
	// pilot ends. Seconds.
	ShrinkMargin int64 `json:"shrink_margin_s,omitempty"`
	// MinPilotLimit, when positive, is submitted as each pilot's minimum
	// limit (Submit.MinTimeLimit): the batch system may shorten the pilot
	// down to it to fit its own plan (SLURM's --time-min, where backfill
	// honours it). 0: off.
	MinPilotLimit cluster.Limit `json:"min_pilot_limit_s,omitempty"`
	// Reservations is how many pending jobs that cannot start now get a
	// reservation in the batch system's backfill plan, in priority order:
	// 0 = every one (SLURM's sched/backfill, up to bf_max_job_test), 1 =
	// EASY backfill (the top job only). The queue walk plans as the batch
	// system does.
	Reservations int `json:"reservations,omitempty"`
	// IdleMargin is how many idle nodes the harvest leaves free while a
	// foreign job waits, when polling: a job that arrives, or one a
	// backfill pass may start, takes them at once instead of waiting for
	// the agent's round and then the next backfill pass (which the
	// round, a second after the arrival at best, misses when both fall
	// in the same second). Pilots are released to restore it. 0: off
	// (the policy's default; the agent's is 1, see agent.DefaultConfig).
	IdleMargin int `json:"idle_margin,omitempty"`
}

// DefaultConfig returns the settings of DESIGN.md: no floor, no cap,
// miniTime 1 min, margin 2 min, SLURM's one-minute granularity.
func DefaultConfig() Config {
	return Config{
		MiniTime:         60,
		Margin:           120,
		Granularity:      60,
		MaxPilotLimit:    cluster.Unlimited,
		UseExpectedStart: true,
		Recommendation:   DefaultRecommendConfig(),
		ShrinkMargin:     30,
	}
}

// Validate reports the first setting that makes no sense.
func (c Config) Validate() error {
	bad := func(format string, a ...any) error {
		return fmt.Errorf("%w: %s", ErrInvalidConfig, fmt.Sprintf(format, a...))
	}
	switch {
	case c.MinNodes < 0:
		return bad("min nodes %d is negative", c.MinNodes)
	case c.MaxNodes < 0:
		return bad("max nodes %d is negative (0 means no cap)", c.MaxNodes)
	case c.MaxNodes > 0 && c.MinNodes > c.MaxNodes:
		return bad("min nodes %d exceeds max nodes %d", c.MinNodes, c.MaxNodes)
	case c.MiniTime < 0:
		return bad("mini time %ds is negative", c.MiniTime)
	case c.Margin < 0:
		return bad("margin %ds is negative", c.Margin)
	case c.Granularity < 1:
		return bad("granularity %ds must be at least 1s", c.Granularity)
	case c.MaxPilotLimit == 0 || c.MaxPilotLimit < cluster.Unlimited:
		return bad("max pilot limit must be positive or unlimited, got %d", int64(c.MaxPilotLimit))
	case c.ShrinkMargin < 0:
		return bad("shrink margin %ds is negative", c.ShrinkMargin)
	case c.Reservations < 0:
		return bad("reservations %d is negative (0 means every pending job)", c.Reservations)
	case c.IdleMargin < 0:
		return bad("idle margin %d is negative (0 means off)", c.IdleMargin)
	case c.MinPilotLimit < 0:
		return bad("min pilot limit %ds is negative (0 means off)", int64(c.MinPilotLimit))
	}
	if err := c.Recommendation.Validate(); err != nil {
		return err
	}
	return nil
}

// RecommendConfig is the mapping from leftTasks (pending + running tasks)
// to the MiniNode recommendation:
//
//	FewNodes                         if leftTasks < FewTasks
//	SomeNodes                        if leftTasks < SomeTasks
//	leftTasks/TasksPerNode + Base    if leftTasks < ManyTasks
//	ManyNodes                        otherwise
type RecommendConfig struct {
	FewTasks     int `json:"few_tasks"`
	FewNodes     int `json:"few_nodes"`
	SomeTasks    int `json:"some_tasks"`
	SomeNodes    int `json:"some_nodes"`
	ManyTasks    int `json:"many_tasks"`
	TasksPerNode int `json:"tasks_per_node"`
	Base         int `json:"base"`
	ManyNodes    int `json:"many_nodes"`
}

// DefaultRecommendConfig is the thesis's mapping with its boundary gaps
// closed: 2 if < 5; 4 if < 20; leftTasks/20 + 3 if < 100; 10 otherwise.
func DefaultRecommendConfig() RecommendConfig {
	return RecommendConfig{
		FewTasks: 5, FewNodes: 2,
		SomeTasks: 20, SomeNodes: 4,
		ManyTasks: 100, TasksPerNode: 20, Base: 3,
		ManyNodes: 10,
	}
}

// Validate rejects mappings whose thresholds are not increasing or whose
// node counts are negative.
func (m RecommendConfig) Validate() error {
	bad := func(format string, a ...any) error {
		return fmt.Errorf("%w: recommendation: %s", ErrInvalidConfig, fmt.Sprintf(format, a...))
	}
	switch {
	case m.FewTasks < 0 || m.SomeTasks < m.FewTasks || m.ManyTasks < m.SomeTasks:
		return bad("task thresholds must be non-negative and increasing, got %d, %d, %d",
			m.FewTasks, m.SomeTasks, m.ManyTasks)
	case m.TasksPerNode < 1:
		return bad("tasks per node %d must be at least 1", m.TasksPerNode)
	case m.FewNodes < 0 || m.SomeNodes < 0 || m.Base < 0 || m.ManyNodes < 0:
		return bad("node counts must not be negative")
	}
	return nil
}
