package worker

import (
	"errors"
	"fmt"
	"log/slog"
	"time"
)

// Config of a worker. Only cmd/ maps flags and environment onto it.
type Config struct {
	ID       string    // stable for the life of the process, across masters
	PilotID  string    // batch system id of its pilot
	Slots    int       // tasks run at once (an Endpoint may lower it)
	Prefetch int       // tasks held beyond Slots, so the next one is already here (-1: automatic, see autoPrefetch)
	Deadline time.Time // the pilot's end (zero: none)
	Token    string    // pilot token
	// Address is the URL the worker's pilot listens at, sent with its
	// registration: a new master that finds nothing listening there knows
	// the worker is gone ("": the master waits for its reconnect grace).
	Address string

	PullWait          time.Duration // long-poll length asked of the master
	HeartbeatInterval time.Duration
	MasterGrace       time.Duration // master unreachable this long: back to the lease
	RetryInterval     time.Duration // wait after a failed call
	ShutdownTimeout   time.Duration // time to report interrupted tasks when stopping
	// StopGrace: a task killed by a stop signal (SIGTERM, SIGKILL, ...)
	// that the worker did not send waits this long for the pilot's own
	// stop before it counts as a failed attempt. The batch system signals
	// every process of the pilot job at once, so a task may die of
	// scancel's SIGTERM before the pilot's handler has run.
	StopGrace   time.Duration
	ResultBatch int // results per request
	// ResultDelay is how long a finished task's result may wait for
	// others to join its request while the worker still runs or holds
	// tasks (0: sent at once). Short real tasks otherwise finish one at
	// a time and each result cost an exchange and a checkpoint commit
	// on the master. A result waits only in the worker's memory, as it
	// did during its request before; results that are not plain
	// successes, a full batch, an idle or stopping worker send at once.
	ResultDelay time.Duration
	// GroupResultDelay is how long such a result may wait instead while
	// the worker runs groups of tasks (GroupRunner) and none of them ended
	// since its last request (0: ResultDelay only): short tasks run in a
	// group then report a group's worth at a time (a group's end sends
	// what waits, within ResultDelay), not ResultDelay's worth, each
	// request costing the master a checkpoint commit. Like ResultDelay,
	// it only delays when the queue hears of a result: a result waits in
	// the worker's memory, and goes at once when it is not a plain
	// success, when the worker is idle or stopping.
	GroupResultDelay time.Duration

	Runner Runner
	Logger *slog.Logger
	// OnDeadline, if set, is called when the master reports the pilot's
	// end pulled in (the agent shrank it); the pilot stops by then.
	OnDeadline func(time.Time)
	// Confinement says how tasks are isolated ("yes (Landlock ABI 7)"),
	// reported to the master for the status page.
	Confinement string
}

// DefaultConfig returns production defaults; ID, Token and Runner must be set.
func DefaultConfig() Config {
	return Config{
		Slots: 1, Prefetch: -1, PullWait: 20 * time.Second, HeartbeatInterval: 5 * time.Second,
		MasterGrace: 30 * time.Second, RetryInterval: 500 * time.Millisecond,
		ShutdownTimeout: 5 * time.Second, StopGrace: 2 * time.Second, ResultBatch: 1000,
		ResultDelay: 20 * time.Millisecond, GroupResultDelay: time.Second, Logger: slog.Default(),
	}
}

// ErrInvalidConfig marks configuration errors.
var ErrInvalidConfig = errors.New("invalid worker config")

// Validate reports the first problem.
func (c Config) Validate() error {
	bad := func(f string, a ...any) error { return fmt.Errorf("%w: %s", ErrInvalidConfig, fmt.Sprintf(f, a...)) }
	switch {
	case c.ID == "":
		return bad("worker id is empty")
	case c.Token == "":
		return bad("pilot token is empty")
	case c.Slots < 1:
		return bad("slots %d: want at least 1", c.Slots)
	case c.Runner == nil || c.Logger == nil:
		return bad("Runner and Logger must be set")
	case c.PullWait <= 0 || c.HeartbeatInterval <= 0 || c.MasterGrace <= 0 || c.RetryInterval <= 0 || c.ShutdownTimeout <= 0 || c.StopGrace <= 0:
		return bad("durations must be positive")
	case c.ResultDelay < 0 || c.ResultDelay > time.Second:
		return bad("result delay %s: want 0 to 1s", c.ResultDelay)
	case c.GroupResultDelay < 0 || c.GroupResultDelay > 10*time.Second:
		return bad("group result delay %s: want 0 to 10s", c.GroupResultDelay)
	case c.ResultBatch < 1:
		return bad("result batch %d: want at least 1", c.ResultBatch)
	}
	return nil
}
