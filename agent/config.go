// Package agent is the head-node daemon: it polls the batch system through
// an adapter, asks the pure policy what to do, and applies the decision.
// Round is the only place with I/O; the clock comes from the snapshot, so
// the same code runs in real time and in the simulator's virtual time.
package agent

import (
	"errors"
	"fmt"
	"time"

	"github.com/harvest-hpc/harvest/agent/policy"
)

// Config configures the reconciler and the daemon loop.
type Config struct {
	Policy policy.Config
	// PollInterval is the time between rounds.
	PollInterval time.Duration
	// FastPoll, when positive, is the time between rounds while the
	// round before found pilots holding nodes a waiting job could start
	// on once one running job ends (policy.Watch): the agent then
	// releases them about FastPoll after the end instead of up to
	// PollInterval. 0 = always PollInterval; one above PollInterval
	// acts as PollInterval.
	FastPoll time.Duration
	// EventCheck, when positive, is how often the agent asks the
	// adapter's job-event count between rounds (adapters.JobEventCounter;
	// SLURM: sdiag, one RPC that lists no jobs); a change (a job
	// submitted, ended or cancelled) starts a round at once, so a job that
	// arrives onto nodes the pilots hold waits about EventCheck, not up to
	// PollInterval. 0, or an adapter that does not count, = off.
	EventCheck time.Duration
	// SubmitTimeout is the first submit timeout; it grows by SubmitTimeoutStep
	// after each timeout and resets after a success (DESIGN.md).
	SubmitTimeout     time.Duration
	SubmitTimeoutStep time.Duration
	// CancelTimeout bounds one cancel call.
	CancelTimeout time.Duration
	// SnapshotTimeout bounds one snapshot call.
	SnapshotTimeout time.Duration
	// LedgerTTL is how long (seconds of batch-system time) a submitted pilot
	// that does not show up in snapshots still counts as held.
	LedgerTTL int64
	// SubmitsVisible (the adapter's Info.SubmitsVisible): a submitted
	// pilot that the next snapshot does not show has left; it is not
	// counted as held for LedgerTTL.
	SubmitsVisible bool
	// PilotCommand is the argv every pilot job runs.
	PilotCommand []string
	// PilotEnv is added to the pilots' environment.
	PilotEnv map[string]string
	// PilotWorkDir and PilotOutput are handed to the adapter unchanged.
	PilotWorkDir string
	PilotOutput  string
	// DryRun logs decisions without submitting or cancelling anything.
	DryRun bool
	// DumpDir, if set, receives every snapshot decided on (the format of
	// `harvest decide --snapshot`) and its decision.
	DumpDir string
	// DumpKeep bounds the number of dumped snapshots kept (oldest removed).
	DumpKeep int
	// MaxBackoff caps the wait between rounds while the batch system is
	// unreachable.
	MaxBackoff time.Duration
	// MaxSubmitPerRound bounds the pilots submitted in one round (0 = no
	// bound); the rest wait for the next rounds. Each sbatch is an RPC
	// to slurmctld: 50 per 10-second round is gentle on a real cluster
	// and still fills 1,000 idle nodes in under 4 minutes.
	MaxSubmitPerRound int
}

// DefaultConfig returns the defaults of DESIGN.md.
func DefaultConfig() Config {
	p := policy.DefaultConfig()
	// One idle node while a foreign job waits (polling): on the busy-thread
	// months of docs/sim.md this keeps polling within 1.5x of the 1 s
	// control in all seven, for 1.0-2.9% of the harvest.
	p.IdleMargin = 1
	return Config{
		Policy:            p,
		PollInterval:      10 * time.Second,
		FastPoll:          2 * time.Second,
		EventCheck:        time.Second,
		SubmitTimeout:     5 * time.Second,
		SubmitTimeoutStep: 5 * time.Second,
		CancelTimeout:     10 * time.Second,
		SnapshotTimeout:   30 * time.Second,
		LedgerTTL:         300,
		PilotCommand:      []string{"harvest", "pilot"},
		DumpKeep:          2000,
		MaxBackoff:        2 * time.Minute,
		MaxSubmitPerRound: 50,
	}
}

// Validate reports the first problem with the configuration.
func (c Config) Validate() error {
	var errs []error
	if err := c.Policy.Validate(); err != nil {
		errs = append(errs, err)
	}
	if c.PollInterval <= 0 {
		errs = append(errs, fmt.Errorf("poll interval must be positive, got %v", c.PollInterval))
	}
	if c.FastPoll < 0 {
		errs = append(errs, fmt.Errorf("fast poll must not be negative (0 = off), got %v", c.FastPoll))
	}
	if c.EventCheck < 0 {
		errs = append(errs, fmt.Errorf("event check must not be negative (0 = off), got %v", c.EventCheck))
	}
	if c.SubmitTimeout <= 0 || c.SubmitTimeoutStep < 0 {
		errs = append(errs, fmt.Errorf("submit timeout must be positive (got %v) and its step not negative (got %v)", c.SubmitTimeout, c.SubmitTimeoutStep))
	}
	if c.CancelTimeout <= 0 || c.SnapshotTimeout <= 0 {
		errs = append(errs, errors.New("cancel and snapshot timeouts must be positive"))
	}
	if c.SnapshotTimeout > time.Hour {
		errs = append(errs, fmt.Errorf("snapshot timeout must be at most 1h, got %v", c.SnapshotTimeout))
	}
	if c.LedgerTTL <= 0 {
		errs = append(errs, fmt.Errorf("ledger TTL must be positive, got %d s", c.LedgerTTL))
	}
	if len(c.PilotCommand) == 0 || c.PilotCommand[0] == "" {
		errs = append(errs, errors.New("pilot command must not be empty"))
	}
	if c.MaxSubmitPerRound < 0 {
		errs = append(errs, fmt.Errorf("max submits per round must not be negative (0 = no bound), got %d", c.MaxSubmitPerRound))
	}
	if c.DumpKeep < 0 {
		errs = append(errs, errors.New("dump-keep must not be negative"))
	}
	if c.MaxBackoff < c.PollInterval {
		errs = append(errs, fmt.Errorf("max backoff %v is shorter than the poll interval %v", c.MaxBackoff, c.PollInterval))
	}
	return errors.Join(errs...)
}
