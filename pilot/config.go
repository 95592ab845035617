package pilot

import (
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"time"

	"github.com/harvest-hpc/harvest/master"
	"github.com/harvest-hpc/harvest/worker"
	"github.com/harvest-hpc/harvest/worker/confine"
)

// Config of a pilot. Only cmd/ maps flags and environment onto it.
type Config struct {
	PilotID   string    // the batch system's job id (SLURM_JOB_ID)
	Token     string    // pilot token (HARVEST_PILOT_TOKEN)
	StateDir  string    // shared directory holding the master checkpoint
	Slots     int       // cores of this pilot's allocation
	Deadline  time.Time // the pilot's end (zero: none)
	Listen    string    // address the master API listens on when this pilot is master
	Advertise string    // URL workers use to reach this pilot ("" = http://<hostname>:<port>)
	Site      string    // the site (cluster) this pilot runs at: its tasks see HARVEST_SITE

	// Confine says whether tasks run confined (package worker/confine):
	// auto (where the kernel has Landlock), require, off. TaskRoots are
	// the queue's allowed roots (inputs must resolve inside them; a task
	// reads only its job's dataset and linked entry there), TaskRead more
	// directories every task may read. They apply
	// when Worker.Runner is nil (the pilot makes an ExecRunner).
	Confine   confine.Mode
	TaskRoots []string
	TaskRead  []string
	// TaskLogMax bounds each task log (worker.ExecRunner.LogMax): 0, no
	// limit.
	TaskLogMax int64

	StopBefore time.Duration // stop this long before the deadline (the batch system's kill follows)
	LeaseRetry time.Duration // wait between lease questions while no master is known
	LeasePoll  time.Duration // wait between lease questions once a dead master's lease has run out

	Master master.Config // PilotID, Address, Epoch, CheckpointDir, LeaseSince, Token are filled in
	Worker worker.Config // ID, PilotID, Slots, Deadline, Token are filled in

	Logger *slog.Logger
}

// DefaultConfig returns production defaults.
func DefaultConfig() Config {
	return Config{
		Slots: 1, Listen: "0.0.0.0:0", Confine: confine.ModeAuto, TaskLogMax: worker.DefaultLogMax, StopBefore: 5 * time.Second, LeaseRetry: 2 * time.Second, LeasePoll: 200 * time.Millisecond,
		Master: master.DefaultConfig(), Worker: worker.DefaultConfig(), Logger: slog.Default(),
	}
}

// probeConfine asks the kernel for its Landlock ABI (tests set another).
var probeConfine = confine.Probe

// ErrInvalidConfig marks configuration errors.
var ErrInvalidConfig = errors.New("invalid pilot config")

// Validate reports the first problem.
func (c Config) Validate() error {
	bad := func(f string, a ...any) error { return fmt.Errorf("%w: %s", ErrInvalidConfig, fmt.Sprintf(f, a...)) }
	switch {
	case c.PilotID == "":
		return bad("pilot id is empty (set --pilot-id or SLURM_JOB_ID)")
	case c.Token == "":
		return bad("pilot token is empty (set HARVEST_PILOT_TOKEN)")
	case c.StateDir == "":
		return bad("state directory is empty (set --state-dir or HARVEST_STATE_DIR)")
	case c.Slots < 1:
		return bad("slots %d: want at least 1", c.Slots)
	case c.Listen == "":
		return bad("listen address is empty")
	case c.StopBefore < 0 || c.LeaseRetry <= 0 || c.LeasePoll <= 0:
		return bad("durations must be positive")
	case c.Logger == nil:
		return bad("Logger must be set")
	}
	if c.TaskLogMax < 0 {
		return bad("task log limit %d is negative (0: no limit)", c.TaskLogMax)
	}
	if _, err := confine.ParseMode(string(c.Confine)); err != nil {
		return bad("%v", err)
	}
	for _, d := range append(append([]string(nil), c.TaskRoots...), c.TaskRead...) {
		if !filepath.IsAbs(d) {
			return bad("task directory %q is not absolute", d)
		}
	}
	if c.Confine == confine.ModeRequire && c.Worker.Runner == nil {
		// Landlock alone is not enough: every task of a kernel older than
		// the rules need failed at its start, the pilot running on.
		s, need := probeConfine(), confine.RequiredABI()
		if !s.Confined(c.Confine) {
			return bad("confinement required, but tasks cannot be confined here: %s", s.Describe(c.Confine))
		}
		if s.ABI < need {
			return bad("confinement required, but this kernel's Landlock ABI is %d and confined tasks need ABI %d or later (Linux 6.12+): run on a newer kernel, or use --confine auto (best effort: tasks confined with what ABI %d has, not scoped)", s.ABI, need, s.ABI)
		}
	}
	if err := master.CheckStateDir(c.StateDir); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	// The master and worker settings are checked now, with the fields the
	// pilot fills in later, so a bad setting fails at start, not at election.
	m := c.Master
	m.PilotID, m.Epoch, m.CheckpointDir, m.Token = c.PilotID, 1, c.StateDir, c.Token
	if m.Logger == nil {
		m.Logger = c.Logger
	}
	if err := m.Validate(); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	w := c.Worker
	w.ID, w.Token, w.Slots = c.PilotID, c.Token, c.Slots
	if w.Runner == nil {
		w.Runner = worker.NoopRunner{}
	}
	if w.Logger == nil {
		w.Logger = c.Logger
	}
	if err := w.Validate(); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	return nil
}
