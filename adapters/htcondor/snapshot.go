package htcondor

import (
	"fmt"
	"sort"
	"strings"

	"github.com/harvest-hpc/harvest/cluster"
)

// View holds what BuildSnapshot needs besides the parsed ads.
type View struct {
	// Tag recognises pilots (their HarvestPilot attribute).
	Tag string
	// Now is the agent's clock (Unix seconds), used only when no job ad
	// carries the schedd's ServerTime (an empty queue).
	Now int64
	// MaxLifetime is the longest lifetime a pilot is given (0 = none); it
	// is reported as the snapshot's MaxTime, HTCondor's closest analogue
	// of a partition's MaxTime.
	MaxLifetime cluster.Limit
	// Owner is the account pilots are submitted as. Any user can give a
	// job the HarvestPilot attribute: a job with the tag that another
	// account owns is foreign (never counted, released or removed as a
	// pilot). Empty: any owner (captured pools in tests).
	Owner string
}

// isPilot reports whether j is one of this agent's pilots.
func (v View) isPilot(j JobAd) bool {
	return v.Tag != "" && j.PilotTag == v.Tag && (v.Owner == "" || j.Owner == v.Owner)
}

// machine is one execute host, summed over its slots.
type machine struct {
	name      string
	cpus      int64
	memoryMB  int64
	claimed   bool // some slot claimed, or a partitionable slot partly carved
	unclaimed bool // some usable slot unclaimed
	drained   bool
	owner     bool // some slot in the Owner state (not available to HTCondor)
}

// BuildSnapshot maps slots and jobs onto the batch-system-neutral
// snapshot. It is pure: same input, same snapshot.
//
// Nodes are machines. A machine is idle when every slot on it is
// unclaimed and every partitionable slot has all its resources; drained
// when a slot is Drained or the machine is wholly in the Owner state;
// allocated otherwise. A slot is counted once by its Name. Foreign jobs:
// idle ones are pending (ordered by JobPrio, then submission), running,
// transferring-output and suspended ones are running (they hold their
// slot); held, removed and completed jobs, and scheduler, local (DAGMan)
// and grid universe jobs, which never run on the pool's machines, are
// left out. now is the schedd's ServerTime, or v.Now when no job ad
// carries one. An idle job that fits on no usable machine (by its literal
// RequestCpus and RequestMemory) is left out too: it could never take a
// pilot's place, and counting it would make the agent release pilots for
// nothing.
func BuildSnapshot(slots []SlotAd, jobs []JobAd, v View) (cluster.Snapshot, error) {
	byName := map[string]*machine{}
	var names []string
	// A slot is counted once, however many ads the collector sent for it
	// (a second collector, an ad re-sent while the first is still held).
	seenSlot := make(map[string]bool, len(slots))
	for _, s := range slots {
		if s.Name != "" {
			if seenSlot[s.Name] {
				continue
			}
			seenSlot[s.Name] = true
		}
		m := byName[s.Machine]
		if m == nil {
			m = &machine{name: s.Machine}
			byName[s.Machine] = m
			names = append(names, s.Machine)
		}
		switch {
		case s.Dynamic:
			// Carved out of a partitionable slot already counted: it only
			// says the machine is (partly) in use.
			m.claimed = true
			continue
		case s.Partitionable:
			m.cpus += s.TotalSlotCPUs
			m.memoryMB += s.TotalSlotMemMB
			if s.CPUs < s.TotalSlotCPUs || s.MemoryMB < s.TotalSlotMemMB {
				m.claimed = true
			}
		default:
			m.cpus += s.CPUs
			m.memoryMB += s.MemoryMB
		}
		switch strings.ToLower(s.State) {
		case "unclaimed", "backfill":
			m.unclaimed = true
		case "drained":
			m.drained = true
		case "owner":
			m.owner = true
		default: // Claimed, Matched, Preempting
			m.claimed = true
		}
	}
	sort.Strings(names)
	// The collector's slot ads lag the schedd by up to UPDATE_INTERVAL: a
	// job the schedd already lists as running may sit on a slot still
	// advertised as Unclaimed, and for a moment a running job's ad may
	// not name its RemoteHost yet (both seen on a real 25.14 pool). The
	// schedd's word wins: a machine a running job is on is not idle, and
	// a running job on no named machine takes one idle machine.
	unplaced := 0
	for _, j := range jobs {
		switch j.Universe {
		case universeScheduler, universeLocal, universeGrid:
			continue // runs elsewhere than on the pool's machines
		}
		switch j.Status {
		case statusRunning, statusTransfer, statusSuspended:
			if m := byName[hostOf(j.RemoteHost)]; m != nil {
				m.claimed = true
			} else if j.RemoteHost == "" {
				unplaced++
			}
		}
	}
	for _, n := range names {
		if m := byName[n]; unplaced > 0 && !m.claimed && m.unclaimed && !m.drained && !m.owner {
			m.claimed = true
			unplaced--
		}
	}

	// now is the schedd's clock, the one JobCurrentStartDate is on; the
	// agent's only when no ad says (every ad of one answer carries the
	// same ServerTime).
	snap := cluster.Snapshot{Jobs: []cluster.Job{}}
	for _, j := range jobs {
		snap.Now = max(snap.Now, j.ServerTime)
	}
	if snap.Now == 0 {
		snap.Now = v.Now
	}
	if v.MaxLifetime > 0 {
		lim := v.MaxLifetime
		snap.MaxTime = &lim
	}

	var usable []*machine
	for _, n := range names {
		m := byName[n]
		node := cluster.Node{Name: m.name, CPUs: int(m.cpus)}
		switch {
		case m.drained || (m.owner && !m.claimed && !m.unclaimed):
			node.State = cluster.NodeDrained
			snap.DrainedNodes++
		case m.claimed || !m.unclaimed:
			node.State = cluster.NodeAllocated
		default:
			node.State = cluster.NodeIdle
			snap.IdleNodes++
		}
		if node.State != cluster.NodeDrained {
			usable = append(usable, m)
		}
		snap.Nodes = append(snap.Nodes, node)
	}
	snap.TotalNodes = len(names)

	// Queues hold many jobs of few shapes: remember each shape's answer.
	type shape struct{ cpus, mem int64 }
	fitCache := map[shape]bool{}
	fits := func(j JobAd) bool {
		k := shape{j.RequestCPUs, j.RequestMemoryMB}
		if ok, seen := fitCache[k]; seen {
			return ok
		}
		ok := false
		for _, m := range usable {
			if k.cpus <= m.cpus && k.mem <= m.memoryMB {
				ok = true
				break
			}
		}
		fitCache[k] = ok
		return ok
	}

	var running, pending []JobAd
	for _, j := range jobs {
		switch j.Universe {
		case universeScheduler, universeLocal, universeGrid:
			continue // runs elsewhere than on the pool's machines
		}
		pilot := v.isPilot(j)
		switch j.Status {
		case statusRunning, statusTransfer, statusSuspended:
			running = append(running, j)
		case statusIdle:
			if pilot || fits(j) {
				pending = append(pending, j)
			}
		}
	}
	sort.SliceStable(running, func(a, b int) bool { return lessID(running[a], running[b]) })
	// HTCondor has no global queue order: the negotiator serves users by
	// fair-share and each user's jobs by JobPrio, then submission order.
	// Without the accountant's figures, JobPrio then submission is the
	// honest approximation.
	sort.SliceStable(pending, func(a, b int) bool {
		x, y := pending[a], pending[b]
		if x.Prio != y.Prio {
			return x.Prio > y.Prio
		}
		if x.QDate != y.QDate {
			return x.QDate < y.QDate
		}
		return lessID(x, y)
	})

	for _, j := range running {
		snap.Jobs = append(snap.Jobs, toJob(j, cluster.Running, v, snap.Now))
	}
	for _, j := range pending {
		snap.Jobs = append(snap.Jobs, toJob(j, cluster.Pending, v, snap.Now))
	}
	if err := snap.Validate(); err != nil {
		return cluster.Snapshot{}, fmt.Errorf("htcondor: %w", err)
	}
	return snap, nil
}

func lessID(x, y JobAd) bool {
	if x.Cluster != y.Cluster {
		return x.Cluster < y.Cluster
	}
	return x.Proc < y.Proc
}

func toJob(j JobAd, state cluster.JobState, v View, now int64) cluster.Job {
	out := cluster.Job{
		ID:         j.ID(),
		User:       j.Owner,
		Name:       j.BatchName,
		State:      state,
		Nodes:      1,
		TimeLimit:  j.Limit,
		SubmitTime: j.QDate,
		Priority:   float64(j.Prio),
		Pilot:      v.isPilot(j),
	}
	if out.TimeLimit == 0 {
		out.TimeLimit = cluster.Unlimited // a JobAd built without a limit
	}
	if j.Universe == universeParallel && j.MinHosts > 1 {
		out.Nodes = int(j.MinHosts)
	}
	if state == cluster.Running {
		out.StartTime = j.CurrentStart
		if j.CurrentStart > 0 && now > j.CurrentStart {
			out.RunTime = now - j.CurrentStart
		}
		out.NodeList = hostOf(j.RemoteHost)
	}
	return out
}

// hostOf is the machine of a RemoteHost: slot1_1@host, or
// slot1@glidein_1@host on a glidein (the host is after the last @).
func hostOf(remoteHost string) string {
	return remoteHost[strings.LastIndex(remoteHost, "@")+1:]
}
