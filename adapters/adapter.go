// Package adapters defines the contract between the harvest agent and a
// batch system (SLURM, HTCondor, the simulator, or a site's own plugin).
//
// The contract is coarse on purpose: every method is one round-trip across
// the plugin boundary, and the agent never needs a second call to act on a
// decision.
package adapters

import (
	"context"

	"github.com/harvest-hpc/harvest/cluster"
)

// Adapter is what every batch-system adapter implements. Implementations
// must be safe for concurrent use.
type Adapter interface {
	// Info describes the adapter and the batch system it talks to.
	// Required. It must not block on the batch system for long: it is
	// called once at start.
	Info(ctx context.Context) (Info, error)

	// Snapshot returns the state of the cluster: nodes, foreign jobs
	// (pending ones in priority order) and our pilots, recognised by the
	// tag the adapter was configured with. Required.
	//
	// If the batch system cannot be asked, Snapshot returns an error that
	// wraps ErrUnreachable; it never returns an empty snapshot that looks
	// real (an agent that believed it would cancel every pilot).
	Snapshot(ctx context.Context) (cluster.Snapshot, error)

	// Submit asks for one one-node pilot job. Required.
	//
	// The adapter rounds spec.TimeLimit down to the batch system's
	// granularity (Info.TimeGranularity). If the batch system may have
	// accepted the job but the answer was lost (a timeout after the
	// command ran), Submit returns an error wrapping ErrOutcomeUnknown;
	// the caller must not retry blindly: the next snapshot tells whether
	// the pilot exists. ErrInvalidSpec means nothing was submitted.
	Submit(ctx context.Context, spec PilotSpec) (PilotID, error)

	// Cancel cancels a pilot, queued or running. Required. Cancelling a
	// pilot that no longer exists is not an error (idempotent). The
	// adapter refuses to cancel a job that is not one of its pilots.
	Cancel(ctx context.Context, id PilotID) error

	// Shrink pulls a running pilot's end in to end (Unix seconds, or the
	// simulator's virtual seconds: the snapshot clock), so that the batch
	// system's own plan sees its node free from then. Optional: an adapter
	// whose batch system cannot do it says so in Info.Shrink and returns
	// ErrNotImplemented. It never extends: an end at or after the pilot's
	// current end, or a pilot that is not running (queued, finished, gone),
	// changes nothing and is not an error. An end in the past is
	// ErrInvalidSpec. Like Cancel, it refuses a job that is not one of its
	// pilots (ErrNotPilot).
	Shrink(ctx context.Context, id PilotID, end int64) error
}

// InProcess is implemented by an adapter that is not a batch system's
// client but the cluster itself, in the agent's process (the simulator).
// When InProcess reports true, the adapter promises that
//   - its calls never wait on anything (no batch system, no network), so
//     the agent gives them no deadline of their own (a context and a timer
//     per call were a thirtieth of a simulated month); the caller's context
//     still stops them;
//   - every job of its snapshots passed cluster.Job.Check when the adapter
//     wrote it, and no two jobs it shows have the same id (its own
//     bookkeeping makes ids unique), so the agent checks only the
//     snapshot's figures (cluster.Snapshot.ValidateFigures): a simulator
//     that keeps its snapshot's entries from one call to the next checks
//     the few it writes, not thousands per round.
//
// An adapter behind a plugin boundary never is: the RPC client does not
// implement it, and its snapshots are checked whole.
type InProcess interface {
	InProcess() bool
}

// JobEventCounter is optional: an adapter whose batch system can say
// cheaply, without listing jobs, that a job was submitted, ended or was
// cancelled implements it, and the agent asks it between rounds (every
// agent.Config.EventCheck) to start a round at once when the count moves:
// a job that arrives onto nodes the pilots hold then waits about one check,
// not one poll. On SLURM it is sdiag's counters, one RPC that takes none
// of slurmctld's job locks (docs/policy.md, "The event check"). The batch
// system may reset the count (sdiag's at midnight): only a change counts.
// ErrNotImplemented (an adapter, or a plugin built without it) turns the
// check off.
type JobEventCounter interface {
	JobEvents(ctx context.Context) (int64, error)
}

// PilotID is the batch system's id of a pilot job ("1234" in SLURM,
// "12.0" in HTCondor).
type PilotID string

// PilotSpec describes one pilot job. Everything the batch system needs to
// start `harvest pilot` on one node.
type PilotSpec struct {
	// TimeLimit is the pilot's wall-clock limit; cluster.Unlimited asks
	// for the longest the partition allows.
	TimeLimit cluster.Limit `json:"time_limit_s"`
	// Command is the argv the pilot job runs (usually `harvest pilot ...`).
	Command []string `json:"command"`
	// Env is added to the pilot's environment (queue URL, pilot token...).
	Env map[string]string `json:"env,omitempty"`
	// WorkDir is the pilot's working directory; empty = the adapter's default.
	WorkDir string `json:"work_dir,omitempty"`
	// Output is where the batch system writes the pilot's stdout/stderr
	// (a pattern in the batch system's syntax); empty = adapter default.
	Output string `json:"output,omitempty"`
	// Preemptible asks for the batch system's preemptible tier
	// (Info.Preemption, when usable): foreign jobs preempt the pilot the
	// moment they need its node. False for floor pilots, which must be
	// guaranteed; adapters without a usable tier ignore it.
	Preemptible bool `json:"preemptible,omitempty"`
	// MinTimeLimit, when positive, lets the batch system shorten the
	// limit down to it to fit its own plan (Info.TimeMinSizing; SLURM's
	// --time-min). Adapters that cannot size pilots ignore it. Rounded up
	// to the granularity, and at most TimeLimit.
	MinTimeLimit cluster.Limit `json:"min_time_limit_s,omitempty"`
}

// Validate rejects specs that no adapter could submit.
func (s PilotSpec) Validate() error {
	if len(s.Command) == 0 || s.Command[0] == "" {
		return invalidSpec("command is empty")
	}
	if s.TimeLimit == 0 || s.TimeLimit < cluster.Unlimited {
		return invalidSpec("time limit must be positive or unlimited, got " + s.TimeLimit.String())
	}
	for k := range s.Env {
		if k == "" {
			return invalidSpec("environment variable with an empty name")
		}
	}
	if s.MinTimeLimit < 0 || s.MinTimeLimit > 0 && !s.TimeLimit.IsUnlimited() && s.MinTimeLimit > s.TimeLimit {
		return invalidSpec("min time limit must be 0 or positive and at most the time limit, got " +
			s.MinTimeLimit.String() + " for " + s.TimeLimit.String())
	}
	return nil
}

// Info describes an adapter.
type Info struct {
	// Name is the adapter's name ("slurm", "htcondor", "sim", or a plugin's).
	Name string `json:"name"`
	// Version is the batch system's version where known ("22.05.8").
	Version string `json:"version,omitempty"`
	// Tag is the job name/comment by which pilots are recognised.
	Tag string `json:"tag"`
	// TimeGranularity is the batch system's time-limit granularity in
	// seconds (SLURM: 60). Pilot limits are rounded down to a multiple.
	TimeGranularity int64 `json:"time_granularity_s"`
	// ExpectedStart reports whether snapshots carry the batch system's
	// expected start for pending jobs (SLURM yes, HTCondor no).
	ExpectedStart bool `json:"expected_start"`
	// Backfill reports whether the batch system backfills with
	// reservations (SLURM's sched/backfill: yes; HTCondor: no).
	Backfill bool `json:"backfill"`
	// Preemption describes the batch system's preemptible tier for
	// pilots; nil when it has none.
	Preemption *Preemption `json:"preemption,omitempty"`
	// TimeMinSizing reports whether the batch system sizes a pilot
	// submitted with a MinTimeLimit to its own plan (SLURM's backfill from
	// 25.11 on; 22.05's sets the limit to the minimum).
	TimeMinSizing bool `json:"time_min_sizing,omitempty"`
	// Shrink reports whether Shrink works.
	Shrink bool `json:"shrink,omitempty"`
	// SubmitsVisible reports that every snapshot taken after a Submit
	// returned lists that pilot while it lives (sbatch returns once
	// slurmctld made the job's record, condor_submit once the schedd
	// committed it). The agent then counts a submitted pilot the next
	// snapshot does not show as gone (preempted or ended within the poll),
	// not as on its way; without it, as on its way for minutes.
	SubmitsVisible bool `json:"submits_visible,omitempty"`
}

// Preemption is a tier (SLURM: a partition of a lower PriorityTier over the
// same nodes) whose jobs foreign jobs preempt the moment they need their
// nodes: harvest's zero-delay give-back.
type Preemption struct {
	// Partition is where preemptible pilots are submitted.
	Partition string `json:"partition"`
	// Mode is how a preempted pilot ends (SLURM: CANCEL or REQUEUE).
	Mode string `json:"mode,omitempty"`
	// GraceTime is the time between the preemption signal (SIGTERM) and
	// the kill, seconds.
	GraceTime int64 `json:"grace_time_s"`
	// Usable reports whether pilots may rely on it: foreign jobs preempt
	// them at once and the pilot hears of it (SIGTERM) at once.
	Usable bool `json:"usable"`
	// Problem says why it is not usable, or what to watch for; empty when
	// there is nothing to say.
	Problem string `json:"problem,omitempty"`
}

// RoundDown rounds a pilot time limit down to the granularity g (seconds).
// Unlimited stays unlimited; a limit below one unit becomes 0 (do not submit).
func RoundDown(l cluster.Limit, g int64) cluster.Limit {
	if l.IsUnlimited() || g <= 1 {
		return l
	}
	return cluster.Limit(int64(l) / g * g)
}
