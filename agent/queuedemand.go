package agent

import (
	"context"

	"github.com/harvest-hpc/harvest/queue"
)

// QueueDemand is the DemandSource of an agent that hosts the queue: the
// backlog, the master's recommendation, which pilots are busy, which one
// hosts the master and the admin's runtime node settings.
type QueueDemand struct {
	Q *queue.Queue
}

// PullIn implements EndSink: the master hears of the new end at its
// next queue heartbeat.
func (d QueueDemand) PullIn(_ context.Context, pilot string, end int64) error {
	return d.Q.PullInPilot(pilot, end)
}

// Demand implements DemandSource.
func (d QueueDemand) Demand(ctx context.Context, _ Seen) (DemandInfo, error) {
	dem, err := d.Q.Demand(ctx)
	if err != nil {
		return DemandInfo{}, err
	}
	minN, maxN, err := d.Q.NodeLimits(ctx)
	if err != nil {
		return DemandInfo{}, err
	}
	master, err := d.Q.MasterPilot(ctx)
	if err != nil {
		return DemandInfo{}, err
	}
	busy := map[string]bool{}
	for id, st := range d.Q.PilotStatus() {
		busy[id] = st.Busy
	}
	return DemandInfo{Demand: &dem, Recommended: d.Q.Recommendation(), Busy: busy, MinNodes: &minN, MaxNodes: &maxN, Master: master}, nil
}
