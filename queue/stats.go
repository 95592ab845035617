package queue

import (
	"context"

	"github.com/harvest-hpc/harvest/cluster"
	"github.com/harvest-hpc/harvest/pilotproto"
	"github.com/harvest-hpc/harvest/queue/api"
)

// Demand returns the whole backlog: pending = WAITING tasks (requeued ones
// included) of live jobs, running = ASSIGNED, RUNNING or ZOMBIE tasks.
// SlotsPerNode comes from the local master's latest fresh recommendation,
// else the configured default. (Each site's agent sees its own share:
// AgentRound.)
func (q *Queue) Demand(ctx context.Context) (cluster.Demand, error) {
	pending, running, err := q.st.Demand(ctx)
	if err != nil {
		return cluster.Demand{}, err
	}
	d := cluster.Demand{PendingTasks: pending, RunningTasks: running, SlotsPerNode: q.cfg.DefaultSlotsPerNode}
	q.mu.Lock()
	if rep, _, ok := q.sites.Report(q.cfg.LocalSite, q.now()); ok && rep.SlotsPerNode > 0 {
		d.SlotsPerNode = rep.SlotsPerNode
	}
	q.mu.Unlock()
	return d, nil
}

// Recommendation returns the local master's latest MiniNode
// recommendation, or 0 when there is none or it is stale (older than
// RecommendationTTL).
func (q *Queue) Recommendation() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	rep, _, _ := q.sites.Report(q.cfg.LocalSite, q.now())
	return rep.MinNodes
}

// PilotStatus returns the local pool's pilots its master reported in its
// heartbeats within the last zombie timeout (busy ones run tasks and are
// released last).
func (q *Queue) PilotStatus() map[string]pilotproto.PilotStatus {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.sites.PilotStatus(q.cfg.LocalSite, q.now())
}

// NodeLimits returns the admin's floor and cap of the local site's pilot
// nodes (0 = no cap).
func (q *Queue) NodeLimits(ctx context.Context) (minNodes, maxNodes int, err error) {
	minNodes, maxNodes, _, err = q.st.NodeSettings(ctx)
	return minNodes, maxNodes, err
}

// Nodes returns the local site's node settings, the global cap, the local
// master's recommendation and the demand.
func (q *Queue) Nodes(ctx context.Context) (api.Nodes, error) {
	var n api.Nodes
	var err error
	if n.MinNodes, n.MaxNodes, n.GlobalMaxNodes, err = q.st.NodeSettings(ctx); err != nil {
		return n, err
	}
	q.mu.Lock()
	if rep, at, ok := q.sites.Report(q.cfg.LocalSite, q.now()); ok {
		n.Recommendation = rep.MinNodes
		n.RecommendedAt = at.Unix()
	}
	q.mu.Unlock()
	d, err := q.Demand(ctx)
	if err != nil {
		return n, err
	}
	n.PendingTasks, n.RunningTasks = d.PendingTasks, d.RunningTasks
	return n, nil
}

// SetNodes sets the admin's floor and cap of pilot nodes.
func (q *Queue) SetNodes(ctx context.Context, s api.NodesSettings) (api.Nodes, error) {
	cur, err := q.Nodes(ctx)
	if err != nil {
		return cur, err
	}
	if s.MinNodes != nil {
		cur.MinNodes = *s.MinNodes
	}
	if s.MaxNodes != nil {
		cur.MaxNodes = *s.MaxNodes
	}
	if s.GlobalMaxNodes != nil {
		cur.GlobalMaxNodes = *s.GlobalMaxNodes
	}
	switch {
	case cur.GlobalMaxNodes < 0 || cur.GlobalMaxNodes > api.MaxNodes:
		return cur, invalid("global_max_nodes must not be negative nor exceed %d", api.MaxNodes)
	case cur.MinNodes < 0 || cur.MaxNodes < 0 || cur.MinNodes > api.MaxNodes || cur.MaxNodes > api.MaxNodes:
		return cur, invalid("min_nodes and max_nodes must not be negative nor exceed %d", api.MaxNodes)
	case cur.MaxNodes > 0 && cur.MinNodes > cur.MaxNodes:
		return cur, invalid("min_nodes %d exceeds max_nodes %d", cur.MinNodes, cur.MaxNodes)
	}
	if err := q.st.PutNodeSettings(ctx, cur.MinNodes, cur.MaxNodes, cur.GlobalMaxNodes); err != nil {
		return cur, err
	}
	return q.Nodes(ctx)
}

// TaskStats counts tasks of the jobs still stored (final jobs are purged
// after the retention period), per owner.
type TaskStats = api.TaskCounts

// Stats is a read-only summary for metrics.
type Stats struct {
	// ByUser counts tasks per job owner.
	ByUser map[string]TaskStats
	// Requeued counts hand-outs beyond a task's first (retries after a
	// failure, and requeues after an interruption or an expiry).
	Requeued int
	// Epoch is the local pool's master lease epoch (0 = no master ever);
	// MasterAlive reports whether the lease is held and not expired.
	Epoch       int64
	MasterAlive bool
	// LostTaskSeconds is the run time of the attempts interrupted since
	// the queue started: task time lost to pilots that ended under their
	// tasks (cancelled, preempted, or at their time limit), each requeued
	// without counting an attempt. Masters report the ones they requeue
	// themselves in their heartbeats (HeartbeatRequest.LostMS); the others
	// come as interrupted results.
	LostTaskSeconds float64
	// The SQLite write lock since the queue opened: transactions, the
	// time they held it (and their distribution in buckets of
	// txstats.HistBucket), those over txstats.SlowTx (5 ms) and those by
	// store method (txstats.Stats.SlowBy).
	WriteTransactions int64
	WriteLockSeconds  float64
	WriteHist         []int64
	SlowWrites        int64
	SlowWritesBy      map[string]int64
	// The WAL file's size now.
	WALBytes int64
}

// Stats reads the figures the agent's metrics export. Three short reads.
func (q *Queue) Stats(ctx context.Context) (Stats, error) {
	byOwner, requeued, err := q.st.TaskStats(ctx)
	if err != nil {
		return Stats{}, err
	}
	st := Stats{ByUser: byOwner, Requeued: requeued}
	l, err := q.st.Lease(ctx, q.cfg.LocalSite)
	if err != nil {
		return st, err
	}
	st.Epoch, st.MasterAlive = l.Epoch, l.Alive(q.now())
	q.mu.Lock()
	st.LostTaskSeconds = float64(q.lostMS) / 1000
	q.mu.Unlock()
	ws := q.st.WriteStats(false)
	st.WriteTransactions, st.WriteLockSeconds, st.SlowWrites, st.SlowWritesBy = ws.Transactions, ws.Total.Seconds(), ws.Slow, ws.SlowBy
	st.WriteHist = ws.Hist[:]
	st.WALBytes = q.st.WALBytes()
	return st, nil
}

// PullInPilot is the local site's Pool.PullIn.
func (q *Queue) PullInPilot(id string, end int64) error {
	return q.Pool(q.cfg.LocalSite).PullIn(id, end)
}

// PullIn records that the site's agent pulled pilot id's end in to end
// (Unix seconds): the pool's master hears of it in its next heartbeat
// answer, plans no batch past it and tells the pilot's worker, which stops
// by then. A later end than one already recorded changes nothing.
func (p Pool) PullIn(id string, end int64) error {
	q := p.q
	if id == "" || len(id) > 256 || end <= 0 || end > api.MaxUnixTime {
		return invalid("pilot id (at most 256 bytes) and an end in 1..%d (Unix seconds) are required", int64(api.MaxUnixTime))
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	k := pilotKey{p.site, id}
	if cur, ok := q.ends[k]; !ok || end < cur {
		q.ends[k] = end
	}
	// Forget the ends of pilots long over (their master never reported
	// them): a zombie timeout after the end, the pilot is surely gone.
	over := q.now().Add(-q.cfg.ZombieTimeout).Unix()
	for pk, e := range q.ends {
		if e < over && pk != k {
			delete(q.ends, pk)
		}
	}
	return nil
}
