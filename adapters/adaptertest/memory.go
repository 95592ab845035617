package adaptertest

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"sync"

	"github.com/harvest-hpc/harvest/adapters"
	"github.com/harvest-hpc/harvest/cluster"
)

// Memory is a minimal in-memory batch system: N one-node slots, pilots
// start at once on a free node, foreign jobs are added by tests. It is the
// reference implementation the suite is checked against, and a handy
// adapter for agent tests.
type Memory struct {
	mu      sync.Mutex
	Tag     string
	Nodes   int
	Now     int64
	Down    bool // the batch system is unreachable
	nextID  int
	jobs    map[string]*cluster.Job
	ordered []string
}

var _ adapters.Adapter = (*Memory)(nil)

// NewMemory returns an empty cluster of n nodes.
func NewMemory(n int) *Memory {
	return &Memory{Tag: "harvest-pilot", Nodes: n, Now: 1_000_000, nextID: 100, jobs: map[string]*cluster.Job{}}
}

// AddJob adds a foreign job; pending jobs keep the order they are added in.
func (m *Memory) AddJob(j cluster.Job) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.jobs[j.ID] = &j
	m.ordered = append(m.ordered, j.ID)
}

// Advance moves the clock forward by d seconds.
func (m *Memory) Advance(d int64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.Now += d
	for _, j := range m.jobs {
		if j.State == cluster.Running {
			j.RunTime += d
		}
	}
}

func (m *Memory) busy() int {
	n := 0
	for _, j := range m.jobs {
		if j.State == cluster.Running {
			n += j.Nodes
		}
	}
	return n
}

func (m *Memory) check(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if m.Down {
		return fmt.Errorf("memory cluster: %w", adapters.ErrUnreachable)
	}
	return nil
}

// Info implements adapters.Adapter.
func (m *Memory) Info(ctx context.Context) (adapters.Info, error) {
	if err := ctx.Err(); err != nil {
		return adapters.Info{}, err
	}
	return adapters.Info{Name: "memory", Tag: m.Tag, TimeGranularity: 60, Shrink: true}, nil
}

// Snapshot implements adapters.Adapter.
func (m *Memory) Snapshot(ctx context.Context) (cluster.Snapshot, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.check(ctx); err != nil {
		return cluster.Snapshot{}, err
	}
	s := cluster.Snapshot{Now: m.Now, TotalNodes: m.Nodes, IdleNodes: m.Nodes - m.busy(), Jobs: []cluster.Job{}}
	for _, id := range m.ordered {
		if j, ok := m.jobs[id]; ok {
			s.Jobs = append(s.Jobs, *j)
		}
	}
	return s, nil
}

// Submit implements adapters.Adapter.
func (m *Memory) Submit(ctx context.Context, spec adapters.PilotSpec) (adapters.PilotID, error) {
	if err := spec.Validate(); err != nil {
		return "", err
	}
	lim := adapters.RoundDown(spec.TimeLimit, 60)
	if lim == 0 {
		return "", fmt.Errorf("%w: limit %v is under one minute", adapters.ErrInvalidSpec, spec.TimeLimit)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.check(ctx); err != nil {
		return "", err
	}
	m.nextID++
	id := strconv.Itoa(m.nextID)
	j := &cluster.Job{ID: id, User: "harvest", Name: m.Tag, State: cluster.Pending, Nodes: 1, TimeLimit: lim, Pilot: true, SubmitTime: m.Now}
	if m.busy() < m.Nodes {
		j.State, j.StartTime = cluster.Running, m.Now
	}
	m.jobs[id] = j
	m.ordered = append(m.ordered, id)
	return adapters.PilotID(id), nil
}

// Cancel implements adapters.Adapter.
func (m *Memory) Cancel(ctx context.Context, id adapters.PilotID) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.check(ctx); err != nil {
		return err
	}
	j, ok := m.jobs[string(id)]
	if !ok {
		return nil
	}
	if !j.Pilot {
		return fmt.Errorf("cancel %s: %w", id, adapters.ErrNotPilot)
	}
	delete(m.jobs, string(id))
	return nil
}

// Shrink implements adapters.Adapter: a running pilot's limit is cut so
// that it ends at end.
func (m *Memory) Shrink(ctx context.Context, id adapters.PilotID, end int64) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.check(ctx); err != nil {
		return err
	}
	if end <= m.Now {
		return fmt.Errorf("%w: end %d is not after now %d", adapters.ErrInvalidSpec, end, m.Now)
	}
	j, ok := m.jobs[string(id)]
	if !ok || j.State != cluster.Running {
		return nil
	}
	if !j.Pilot {
		return fmt.Errorf("shrink %s: %w", id, adapters.ErrNotPilot)
	}
	if lim := cluster.Limit(end - m.Now + j.RunTime); j.TimeLimit.IsUnlimited() || lim < j.TimeLimit {
		j.TimeLimit = lim
	}
	return nil
}

// End finishes a job (foreign or pilot) as the batch system would.
func (m *Memory) End(id string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.jobs, id)
}

// PilotIDs returns the ids of current pilots, sorted.
func (m *Memory) PilotIDs() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []string
	for id, j := range m.jobs {
		if j.Pilot {
			out = append(out, id)
		}
	}
	sort.Strings(out)
	return out
}
