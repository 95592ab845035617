// Package cluster holds the batch-system-neutral picture of a cluster that
// adapters produce and the scaling policy consumes. Its JSON form is the
// snapshot file of `harvest decide` (see DESIGN.md), so any snapshot the agent
// decided on can be dumped and replayed offline.
package cluster

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"hash/maphash"
	"strconv"
	"sync"
)

// Limit is a time limit in seconds. Unlimited (-1) is written as JSON null,
// as in the snapshot contract ("time_limit_s": null means unlimited).
type Limit int64

// Unlimited is the limit of a job that never ends by itself.
const Unlimited Limit = -1

// Seconds returns a limit of s seconds.
func Seconds(s int64) Limit { return Limit(s) }

// IsUnlimited reports whether l is the unlimited limit.
func (l Limit) IsUnlimited() bool { return l == Unlimited }

// Min returns the smaller of two limits, unlimited being the largest.
func (l Limit) Min(o Limit) Limit {
	switch {
	case l.IsUnlimited():
		return o
	case o.IsUnlimited():
		return l
	case o < l:
		return o
	}
	return l
}

// String formats the limit for logs: "unlimited" or Go duration syntax.
func (l Limit) String() string {
	if l.IsUnlimited() {
		return "unlimited"
	}
	return fmt.Sprintf("%ds", int64(l))
}

// MarshalJSON writes null for Unlimited. Other negative values are
// written as numbers so that the reader rejects them instead of taking
// them for unlimited.
func (l Limit) MarshalJSON() ([]byte, error) {
	if l.IsUnlimited() {
		return []byte("null"), nil
	}
	return strconv.AppendInt(nil, int64(l), 10), nil
}

// UnmarshalJSON reads null as Unlimited and rejects negative numbers.
func (l *Limit) UnmarshalJSON(b []byte) error {
	b = bytes.TrimSpace(b)
	if string(b) == "null" {
		*l = Unlimited
		return nil
	}
	var v float64
	if err := json.Unmarshal(b, &v); err != nil {
		return fmt.Errorf("time limit must be a number of seconds or null: %w", err)
	}
	if v < 0 {
		return fmt.Errorf("time limit %v is negative (use null for unlimited)", v)
	}
	*l = Limit(int64(v))
	return nil
}

// JobState is the coarse state the policy needs. Batch-system states map
// onto these two; finished jobs do not appear in a snapshot.
type JobState string

const (
	Pending JobState = "pending"
	Running JobState = "running"
)

// Job is one batch job: a foreign job of another user, or one of our pilots.
type Job struct {
	ID    string   `json:"id"`
	User  string   `json:"user,omitempty"`
	Name  string   `json:"name,omitempty"`
	State JobState `json:"state"`
	Nodes int      `json:"nodes"`
	// TimeLimit is the job's limit in seconds; Unlimited never frees its nodes.
	TimeLimit Limit `json:"time_limit_s"`
	// RunTime is how long a running job has run, in seconds.
	RunTime int64 `json:"run_time_s,omitempty"`
	// Pilot marks our own pilot jobs (recognised by the adapter's tag).
	Pilot bool `json:"pilot,omitempty"`
	// Busy marks a pilot whose worker is running tasks (filled in by the
	// agent from the queue's heartbeats; adapters leave it false).
	Busy bool `json:"busy,omitempty"`
	// Master marks the pilot that hosts the master (filled in by the agent
	// from the queue's lease holder; adapters leave it false): releasing
	// it costs a master hand-over, so it goes last among equals.
	Master bool `json:"master,omitempty"`
	// Preemptible marks a pilot in the batch system's preemptible tier
	// (a partition foreign jobs preempt at once).
	Preemptible bool `json:"preemptible,omitempty"`
	// Reason is the batch system's pending reason (Resources, Priority...).
	Reason string `json:"reason,omitempty"`
	// ExpectedStart is the batch system's own estimate of when a pending
	// job starts (Unix seconds), when it gives one.
	ExpectedStart int64 `json:"expected_start,omitempty"`
	// SubmitTime and StartTime are Unix seconds (0 = unknown / not started).
	SubmitTime int64 `json:"submit_time,omitempty"`
	StartTime  int64 `json:"start_time,omitempty"`
	// NodeList is the batch system's node list ("n[1-6]"); Node the first.
	NodeList  string `json:"node_list,omitempty"`
	Partition string `json:"partition,omitempty"`
	// Priority is the batch system's priority (higher first) where known.
	Priority float64 `json:"priority,omitempty"`
}

// Remaining is the time a running job may still hold its nodes.
func (j Job) Remaining() Limit {
	if j.TimeLimit.IsUnlimited() {
		return Unlimited
	}
	r := int64(j.TimeLimit) - j.RunTime
	if r < 0 {
		r = 0 // overrunning its limit (SLURM enforces limits late)
	}
	return Limit(r)
}

// NodeState summarises one node.
type NodeState string

const (
	NodeIdle      NodeState = "idle"
	NodePlanned   NodeState = "planned" // idle, but reserved for a pending job by backfill
	NodeAllocated NodeState = "allocated"
	NodeDrained   NodeState = "drained" // drained, draining, down or otherwise unusable
)

// Node is one compute node.
type Node struct {
	Name  string    `json:"name"`
	State NodeState `json:"state"`
	CPUs  int       `json:"cpus,omitempty"`
}

// Demand is the harvest backlog as the queue reports it.
type Demand struct {
	PendingTasks int `json:"pending_tasks"`
	RunningTasks int `json:"running_tasks"`
	SlotsPerNode int `json:"slots_per_node"`
}

// Snapshot is the state of the cluster at one instant.
//
// Jobs holds running jobs in any order and pending jobs in the batch
// system's priority order (highest first); pilots are marked Pilot.
type Snapshot struct {
	// Now is the batch system's clock, Unix seconds (or virtual seconds).
	Now        int64 `json:"now"`
	TotalNodes int   `json:"total_nodes"`
	// IdleNodes counts usable idle nodes, including planned ones.
	IdleNodes int `json:"idle_nodes"`
	// PlannedNodes are idle nodes the backfill scheduler holds for a pending job.
	PlannedNodes int `json:"planned_nodes,omitempty"`
	// DrainedNodes are drained, down or failed nodes (not in TotalNodes' usable part).
	DrainedNodes int `json:"drained_nodes,omitempty"`
	// MaxTime is the partition's MaxTime; absent or null = unlimited.
	MaxTime *Limit `json:"max_time_s,omitempty"`
	// Partition is the partition the snapshot describes.
	Partition string `json:"partition,omitempty"`

	// The fields below come from the agent, not the adapter, so that a
	// dumped snapshot holds everything the decision was made on.
	MinNodes int     `json:"min_nodes,omitempty"`
	MaxNodes int     `json:"max_nodes,omitempty"`
	Demand   *Demand `json:"demand,omitempty"`

	Jobs  []Job  `json:"jobs"`
	Nodes []Node `json:"nodes,omitempty"`
}

// PartitionMaxTime returns the partition's MaxTime (Unlimited if not set).
func (s Snapshot) PartitionMaxTime() Limit {
	if s.MaxTime == nil {
		return Unlimited
	}
	return *s.MaxTime
}

// Pilots returns the pilot jobs of the snapshot.
func (s Snapshot) Pilots() []Job {
	var out []Job
	for _, j := range s.Jobs {
		if j.Pilot {
			out = append(out, j)
		}
	}
	return out
}

// ErrInvalidSnapshot is wrapped by every Validate error.
var ErrInvalidSnapshot = errors.New("invalid snapshot")

// Validate checks the snapshot for contradictions a policy must not act on.
func (s Snapshot) Validate() error {
	if err := s.ValidateFigures(); err != nil {
		return err
	}
	return validateJobs(s.Jobs)
}

func bad(format string, a ...any) error {
	return fmt.Errorf("%w: %s", ErrInvalidSnapshot, fmt.Sprintf(format, a...))
}

// ValidateFigures is Validate without the checks of the jobs: for a caller
// that validated them and then changed only the figures (the agent adds
// the queue's demand and the admin's node counts to the adapter's
// snapshot).
func (s Snapshot) ValidateFigures() error {
	if s.TotalNodes < 0 || s.IdleNodes < 0 || s.PlannedNodes < 0 || s.DrainedNodes < 0 {
		return bad("node counts must not be negative")
	}
	if s.IdleNodes > s.TotalNodes {
		return bad("idle_nodes %d exceeds total_nodes %d", s.IdleNodes, s.TotalNodes)
	}
	if s.MinNodes < 0 || s.MaxNodes < 0 {
		return bad("min_nodes and max_nodes must not be negative")
	}
	if s.MaxNodes > 0 && s.MinNodes > s.MaxNodes {
		return bad("min_nodes %d exceeds max_nodes %d", s.MinNodes, s.MaxNodes)
	}
	if s.Demand != nil && (s.Demand.PendingTasks < 0 || s.Demand.RunningTasks < 0 || s.Demand.SlotsPerNode < 0) {
		return bad("demand figures must not be negative")
	}
	return nil
}

func validateJobs(jobs []Job) error {
	dup := firstDuplicate(jobs)
	for i := range jobs {
		j := &jobs[i]
		if j.ID == "" {
			return bad("job %d has no id", i)
		}
		if i == dup {
			return bad("job id %q appears twice", j.ID)
		}
		if err := j.Check(); err != nil {
			return err
		}
	}
	return nil
}

// Check is Validate's check of one job, all but the uniqueness of its id:
// for an adapter that checks the jobs it writes into a snapshot as it
// writes them (the simulator keeps its entries from one snapshot to the
// next and writes only those that changed).
func (j *Job) Check() error {
	if j.ID == "" {
		return bad("a job has no id")
	}
	if j.State != Pending && j.State != Running {
		return bad("job %s: state %q is neither %q nor %q", j.ID, j.State, Pending, Running)
	}
	if j.Nodes <= 0 {
		return bad("job %s: nodes must be positive, got %d", j.ID, j.Nodes)
	}
	if j.TimeLimit == 0 {
		return bad("job %s: time_limit_s missing or zero (null means unlimited)", j.ID)
	}
	if j.TimeLimit < Unlimited {
		return bad("job %s: negative time limit", j.ID)
	}
	if j.RunTime < 0 {
		return bad("job %s: negative run_time_s", j.ID)
	}
	return nil
}

var (
	idSeed  = maphash.MakeSeed()
	idTable = sync.Pool{New: func() any { return new([]int32) }}
)

// IDHash hashes a job id for a set of ids (firstDuplicate, the agent's
// ledger): eight bytes a step, inline, for the short ids of batch systems
// (a call of maphash per id was a tenth of a simulated month, and FNV-1a's
// byte a step a twentieth of a 5,000-node one), maphash for long ones.
// Its quality only bounds the probes: equal ids are found whatever it
// returns.
func IDHash(id string) uint64 {
	if len(id) > 24 {
		return maphash.String(idSeed, id)
	}
	h := uint64(len(id))
	var w uint64
	if len(id) < 8 {
		for i := 0; i < len(id); i++ {
			w |= uint64(id[i]) << (8 * i)
		}
	} else {
		// Words of eight bytes, the last one ending at the id's end
		// (overlapping the one before it).
		for i := 0; i+8 < len(id); i += 8 {
			h = (h ^ le64(id[i:])) * 0x9e3779b97f4a7c15
			h ^= h >> 31
		}
		w = le64(id[len(id)-8:])
	}
	// The finaliser of splitmix64: the sets index by the low bits.
	h = (h ^ w) * 0xbf58476d1ce4e5b9
	h ^= h >> 31
	h *= 0x94d049bb133111eb
	return h ^ h>>29
}

func le64(s string) uint64 {
	_ = s[7]
	return uint64(s[0]) | uint64(s[1])<<8 | uint64(s[2])<<16 | uint64(s[3])<<24 |
		uint64(s[4])<<32 | uint64(s[5])<<40 | uint64(s[6])<<48 | uint64(s[7])<<56
}

// firstDuplicate returns the index of the first job whose id an earlier
// job has, or -1. It is an open-addressing set of job indexes by id hash,
// reused between calls: a simulated month validates hundreds of thousands
// of snapshots of a thousand jobs, and a map per call was a fifth of it.
func firstDuplicate(jobs []Job) int {
	size := 16
	for size < 2*len(jobs) {
		size *= 2
	}
	tp := idTable.Get().(*[]int32)
	defer idTable.Put(tp)
	if cap(*tp) < size {
		*tp = make([]int32, size)
	}
	t := (*tp)[:size]
	clear(t)
	mask := uint64(size - 1)
	for i := range jobs {
		k := IDHash(jobs[i].ID) & mask
		for t[k] != 0 {
			if jobs[t[k]-1].ID == jobs[i].ID {
				return i
			}
			k = (k + 1) & mask
		}
		t[k] = int32(i + 1)
	}
	return -1
}
