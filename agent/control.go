package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/harvest-hpc/harvest/adapters"
	"github.com/harvest-hpc/harvest/cluster"
	"github.com/harvest-hpc/harvest/queue/api"
)

// Control holds the admin's run-time switches: pause (no new pilots) and
// drain (pause, then cancel every pilot: idle ones at once, busy ones when
// their current batch is done, or all at once). The pause is persisted in
// a small JSON file so it survives a restart; a drain in progress is too,
// so a restarted agent keeps draining instead of refilling the cluster.
type Control struct {
	path string
	log  *slog.Logger

	mu    sync.Mutex
	state ControlState
}

// ControlState is what Control persists and the admin endpoints show.
type ControlState = api.HarvestState

// DrainState is the progress of a drain.
type DrainState = api.DrainState

// ErrControlState wraps errors reading or writing the control file.
var ErrControlState = errors.New("control state")

// OpenControl loads the control file at path (absent = not paused).
// An empty path keeps the state in memory only.
func OpenControl(path string, log *slog.Logger) (*Control, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	c := &Control{path: path, log: log}
	if path == "" {
		return c, nil
	}
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return c, nil
	}
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrControlState, err)
	}
	if err := json.Unmarshal(b, &c.state); err != nil {
		return nil, fmt.Errorf("%w: %s is not a control file (remove it to start unpaused): %w", ErrControlState, path, err)
	}
	return c, nil
}

// State returns a copy of the current state.
func (c *Control) State() ControlState {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.copyLocked()
}

func (c *Control) copyLocked() ControlState {
	s := c.state
	if s.Drain != nil {
		d := *s.Drain
		s.Drain = &d
	}
	return s
}

// Paused reports whether new pilots are withheld (pause or drain).
func (c *Control) Paused() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.state.Paused
}

// SetPaused pauses or resumes harvesting. Resuming also ends a drain.
// Nothing changes if the state cannot be persisted.
func (c *Control) SetPaused(paused bool) (ControlState, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	next := c.copyLocked()
	if paused && !next.Paused {
		next.PausedAt = time.Now().Unix()
	}
	next.Paused = paused
	if !paused {
		next.PausedAt = 0
		next.Drain = nil
	}
	if err := c.saveLocked(next); err != nil {
		return c.copyLocked(), err
	}
	c.state = next
	c.log.Info("harvest pause changed", "paused", paused)
	return c.copyLocked(), nil
}

// StartDrain pauses and starts a drain (restarting one in progress, e.g.
// to switch to --now).
func (c *Control) StartDrain(now bool) (ControlState, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	next := c.copyLocked()
	t := time.Now().Unix()
	if !next.Paused {
		next.PausedAt = t
	}
	next.Paused = true
	next.Drain = &DrainState{Now: now, StartedAt: t, Remaining: -1}
	if err := c.saveLocked(next); err != nil {
		return c.copyLocked(), err
	}
	c.state = next
	c.log.Info("drain started", "now", now)
	return c.copyLocked(), nil
}

func (c *Control) saveLocked(s ControlState) error {
	if c.path == "" {
		return nil
	}
	b, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return fmt.Errorf("%w: %w", ErrControlState, err)
	}
	if err := os.MkdirAll(filepath.Dir(c.path), 0o755); err != nil {
		return fmt.Errorf("%w: %w", ErrControlState, err)
	}
	tmp := c.path + ".tmp"
	if err := os.WriteFile(tmp, append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("%w: %w", ErrControlState, err)
	}
	if err := os.Rename(tmp, c.path); err != nil {
		return fmt.Errorf("%w: %w", ErrControlState, err)
	}
	return nil
}

// DrainPlan picks the pilots a drain cancels now from a snapshot: queued
// pilots and idle running ones, and busy ones too when now is set. It
// also returns how many pilots remain and how many of them are busy.
// Pure: the caller cancels.
func DrainPlan(s cluster.Snapshot, now bool) (cancel []string, remaining, busy int) {
	for _, j := range s.Jobs {
		if !j.Pilot {
			continue
		}
		remaining++
		if j.State == cluster.Running && j.Busy {
			busy++
			if !now {
				continue
			}
		}
		cancel = append(cancel, j.ID)
	}
	return cancel, remaining, busy
}

// AfterRound carries a drain forward from the round's snapshot: it
// cancels what DrainPlan picks and records the progress. Called from the
// reconciler's OnRound hook, so it runs once per round, after the
// round's own actions.
func (c *Control) AfterRound(ctx context.Context, ad adapters.Adapter, res RoundResult, timeout time.Duration) {
	c.mu.Lock()
	d := c.state.Drain
	if d == nil || d.Done {
		c.mu.Unlock()
		return
	}
	now := d.Now
	c.mu.Unlock()

	// Pilots the round itself just cancelled are gone already.
	gone := map[string]bool{}
	for _, id := range res.Cancelled {
		gone[id] = true
	}
	plan, _, _ := DrainPlan(res.Snapshot, now)
	inPlan := make(map[string]bool, len(plan))
	for _, id := range plan {
		inPlan[id] = true
	}
	remaining, busy, cancelled, lastErr := 0, 0, 0, ""
	for _, j := range res.Snapshot.Jobs {
		if !j.Pilot || gone[j.ID] {
			continue
		}
		if inPlan[j.ID] {
			cctx, cancel := context.WithTimeout(ctx, timeout)
			err := ad.Cancel(cctx, adapters.PilotID(j.ID))
			cancel()
			if err == nil {
				cancelled++
				c.log.Info("drain: cancelled pilot", "pilot", j.ID)
				continue
			}
			lastErr = err.Error()
			c.log.Error("drain: cancel pilot failed; retrying next round", "pilot", j.ID, "error", err)
		}
		remaining++
		if j.State == cluster.Running && j.Busy {
			busy++
		}
	}

	c.mu.Lock()
	defer c.mu.Unlock()
	if c.state.Drain == nil || c.state.Drain.StartedAt != d.StartedAt {
		return // resumed or restarted meanwhile
	}
	next := c.copyLocked()
	nd := next.Drain
	nd.Remaining, nd.Busy, nd.LastError = remaining, busy, lastErr
	nd.Cancelled += cancelled
	if remaining == 0 {
		nd.Done, nd.DoneAt = true, time.Now().Unix()
		c.log.Info("drain done: no pilot left", "cancelled", nd.Cancelled)
	}
	if err := c.saveLocked(next); err != nil {
		c.log.Warn("drain: saving progress failed", "error", err)
	}
	c.state = next
}

// PausedDemand makes any DemandSource report the admin's pause.
type PausedDemand struct {
	Src    DemandSource
	Paused func() bool
}

// Demand implements DemandSource.
func (p PausedDemand) Demand(ctx context.Context, seen Seen) (DemandInfo, error) {
	d, err := p.Src.Demand(ctx, seen)
	if err != nil {
		return d, err
	}
	if p.Paused != nil && p.Paused() {
		d.Paused = true
	}
	return d, nil
}

// PullIn passes the pulled-in end on when the wrapped source takes it
// (EndSink).
func (p PausedDemand) PullIn(ctx context.Context, pilot string, end int64) error {
	if s, ok := p.Src.(EndSink); ok {
		return s.PullIn(ctx, pilot, end)
	}
	return nil
}
