package adapters

import (
	"errors"
	"fmt"
)

// Sentinel errors. Adapters wrap them (fmt.Errorf("...: %w", ErrX)) and
// callers test with errors.Is; they survive the plugin boundary.
var (
	// ErrOutcomeUnknown: the request may or may not have taken effect
	// (e.g. sbatch timed out after it reached slurmctld). Like
	// database/sql/driver.ErrBadConn's rule in reverse: never retry a
	// Submit that returned it; the next snapshot decides.
	ErrOutcomeUnknown = errors.New("outcome unknown")

	// ErrUnreachable: the batch system could not be asked (controller
	// down, command timed out before doing anything, command missing).
	// Nothing was changed. Retry with backoff.
	ErrUnreachable = errors.New("batch system unreachable")

	// ErrNotImplemented: the adapter does not support this call.
	ErrNotImplemented = errors.New("not implemented")

	// ErrInvalidSpec: the pilot spec was rejected before anything was
	// submitted.
	ErrInvalidSpec = errors.New("invalid pilot spec")

	// ErrNotPilot: Cancel was asked for a job that is not one of ours.
	ErrNotPilot = errors.New("not a pilot of this agent")
)

func invalidSpec(msg string) error { return fmt.Errorf("%w: %s", ErrInvalidSpec, msg) }
