package agent

import (
	"context"

	"github.com/harvest-hpc/harvest/cluster"
	"github.com/harvest-hpc/harvest/queue/api"
)

// SiteDemand is the DemandSource of an agent whose site shares the queue
// with other clusters' agents: each round it tells the queue what it saw
// and applies the site's plan (its share of the backlog, its pool's busy
// pilots, its caps). Round is the queue's agent round: in process for the
// agent that hosts the queue, over HTTP with an agent token for the others.
type SiteDemand struct {
	Round func(ctx context.Context, r api.AgentRound) (api.AgentPlan, error)
	// End tells the queue a pilot's end was pulled in (EndSink).
	End func(ctx context.Context, e api.PilotEnd) error
}

// PullIn implements EndSink: the pool's master hears of the new end at
// its next queue heartbeat.
func (d SiteDemand) PullIn(ctx context.Context, pilot string, end int64) error {
	return d.End(ctx, api.PilotEnd{Pilot: pilot, End: end})
}

// Demand implements DemandSource.
func (d SiteDemand) Demand(ctx context.Context, seen Seen) (DemandInfo, error) {
	p, err := d.Round(ctx, api.AgentRound{Held: seen.Held, Idle: seen.Idle})
	if err != nil {
		return DemandInfo{}, err
	}
	return PlanDemand(p), nil
}

// PlanDemand is a site's plan as the policy's inputs.
func PlanDemand(p api.AgentPlan) DemandInfo {
	minN, maxN := p.MinNodes, p.MaxNodes
	return DemandInfo{
		Demand:      &cluster.Demand{PendingTasks: p.PendingTasks, RunningTasks: p.RunningTasks, SlotsPerNode: p.SlotsPerNode},
		Recommended: p.Recommended,
		Busy:        p.Busy,
		Master:      p.Master,
		MinNodes:    &minN,
		MaxNodes:    &maxN,
		Paused:      p.Paused,
	}
}
