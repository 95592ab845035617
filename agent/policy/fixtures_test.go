package policy

import (
	"github.com/harvest-hpc/harvest/cluster"
)

// Compact fixtures: times are seconds, minute is one minute (min would shadow the builtin).
const (
	minute    = 60
	unlimited = int64(cluster.Unlimited)
)

// running is a foreign job that has run rt of its limit tl.
func running(id string, nodes int, tl, rt int64) cluster.Job {
	return cluster.Job{ID: id, User: "u" + id, State: cluster.Running, Nodes: nodes, TimeLimit: cluster.Limit(tl), RunTime: rt}
}

// pending is a foreign job waiting in the queue (array order = priority).
func pending(id string, nodes int, tl int64, opts ...func(*cluster.Job)) cluster.Job {
	j := cluster.Job{ID: id, User: "u" + id, State: cluster.Pending, Nodes: nodes, TimeLimit: cluster.Limit(tl)}
	for _, o := range opts {
		o(&j)
	}
	return j
}

// pilot is one of our running one-node pilots, idle unless busy().
func pilot(id string, tl, rt int64, opts ...func(*cluster.Job)) cluster.Job {
	j := cluster.Job{ID: id, User: "harvest", State: cluster.Running, Nodes: 1, TimeLimit: cluster.Limit(tl), RunTime: rt, Pilot: true}
	for _, o := range opts {
		o(&j)
	}
	return j
}

// queuedPilot is one of our pilots still pending in the batch system.
func queuedPilot(id string, tl int64) cluster.Job {
	return cluster.Job{ID: id, User: "harvest", State: cluster.Pending, Nodes: 1, TimeLimit: cluster.Limit(tl), Pilot: true}
}

func busy(j *cluster.Job) { j.Busy = true }

// master marks the pilot that hosts the master.
func master(j *cluster.Job) { j.Master = true }

func expectedAt(t int64) func(*cluster.Job) { return func(j *cluster.Job) { j.ExpectedStart = t } }

func snap(total, idle int, jobs ...cluster.Job) cluster.Snapshot {
	return cluster.Snapshot{Now: 1_700_000_000, TotalNodes: total, IdleNodes: idle, Jobs: jobs}
}

func limitPtr(l int64) *cluster.Limit { v := cluster.Limit(l); return &v }

// thesis is the worked example of DESIGN.md: T = 21, MiniNode 10, J1
// running (5 nodes, 20 min, 1 min run), 5 idle nodes, pending J3 (10 nodes,
// 25 min) then J4 (6 nodes, j4 limit), and 11 unlimited pilots p10..p20.
func thesis(j4 int64) cluster.Snapshot {
	jobs := []cluster.Job{
		running("1", 5, 20*minute, 1*minute),
		pending("3", 10, 25*minute),
		pending("4", 6, j4),
	}
	for _, id := range []string{"p10", "p11", "p12", "p13", "p14", "p15", "p16", "p17", "p18", "p19", "p20"} {
		jobs = append(jobs, pilot(id, unlimited, 5*minute))
	}
	s := snap(21, 5, jobs...)
	s.MinNodes = 10
	return s
}

// thesisConfig is the worked example's config: miniTime and margin 2 min.
func thesisConfig() Config {
	c := DefaultConfig()
	c.MiniTime = 2 * minute
	c.Margin = 2 * minute
	return c
}

func submit(n int, tl int64) *Submit { return &Submit{Count: n, TimeLimit: cluster.Limit(tl)} }
