package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/harvest-hpc/harvest/internal/jsonkeys"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"reflect"
	"sync"
	"time"

	"github.com/harvest-hpc/harvest/agent/policy"
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
	err = jsonkeys.For(reflect.TypeOf(c.state), true).Check(b) // null is not "unpaused"
	if err == nil {
		err = json.Unmarshal(b, &c.state)
	}
	if err != nil {
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

// Demand makes src report the admin's pause and drain: they are inputs
// of the policy, and the reconciler carries them out with everything
// else it decides (one actuator: releases go through the same cancels,
// ledger and metrics as any other round).
func (c *Control) Demand(src DemandSource) DemandSource { return controlled{src: src, c: c} }

type controlled struct {
	src DemandSource
	c   *Control
}

// Demand implements DemandSource.
func (s controlled) Demand(ctx context.Context, seen Seen) (DemandInfo, error) {
	d, err := s.src.Demand(ctx, seen)
	if err != nil {
		return d, err
	}
	st := s.c.State()
	d.Paused = d.Paused || st.Paused
	if st.Drain != nil {
		// A finished drain stays in force until resume: a pilot that
		// shows up late is released too.
		d.Drain = &policy.Drain{Now: st.Drain.Now}
	}
	return d, nil
}

// PullIn passes the pulled-in end on when the wrapped source takes it
// (EndSink).
func (s controlled) PullIn(ctx context.Context, pilot string, end int64) error {
	if sink, ok := s.src.(EndSink); ok {
		return sink.PullIn(ctx, pilot, end)
	}
	return nil
}

// Observe records a drain's progress from a round that decided with it
// (for the reconciler's OnRound hook): the pilots left (visible ones not
// cancelled this round, and those on their way), how many of them are
// busy, the cancels so far and the last cancel error.
func (c *Control) Observe(res RoundResult) {
	if res.Drain == nil || res.Decision.Case != policy.CaseDrain {
		return
	}
	gone := make(map[string]bool, len(res.Cancelled))
	for _, id := range res.Cancelled {
		gone[id] = true
	}
	remaining, busy := 0, 0
	for _, j := range res.Snapshot.Jobs {
		if !j.Pilot || gone[j.ID] {
			continue
		}
		remaining++
		if j.State == cluster.Running && j.Busy {
			busy++
		}
	}
	for _, u := range res.Upcoming {
		remaining += u.Count
	}
	lastErr := ""
	if len(res.Errors) > 0 {
		lastErr = res.Errors[len(res.Errors)-1].Error()
	}

	c.mu.Lock()
	defer c.mu.Unlock()
	if c.state.Drain == nil || c.state.Drain.Done || c.state.Drain.Now != res.Drain.Now {
		return // resumed, finished or restarted meanwhile
	}
	next := c.copyLocked()
	nd := next.Drain
	nd.Remaining, nd.Busy, nd.LastError = remaining, busy, lastErr
	nd.Cancelled += len(res.Cancelled)
	if remaining == 0 {
		nd.Done, nd.DoneAt = true, time.Now().Unix()
		c.log.Info("drain done: no pilot left", "cancelled", nd.Cancelled)
	}
	if err := c.saveLocked(next); err != nil {
		c.log.Warn("drain: saving progress failed", "error", err)
	}
	c.state = next
}
