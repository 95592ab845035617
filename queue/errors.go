package queue

import (
	"fmt"

	"github.com/harvest-hpc/harvest/queue/api"
)

// The sentinel errors, their codes and HTTP statuses are declared once, in
// queue/api (errors.go). Two more are the server's own:
var (
	// ErrClosed: the queue is shutting down (503, retry elsewhere/later).
	ErrClosed = fmt.Errorf("queue closed: %w", api.ErrUnavailable)
	// errInternalWrite: a storage failure; the answer is a logged 500.
	errInternalWrite = api.ErrInternal
)

// statusOf maps an error onto its HTTP status through the code table.
func statusOf(err error) int { return api.StatusOf(api.CodeOf(err)) }

func invalid(format string, a ...any) error {
	return fmt.Errorf("%w: %s", api.ErrInvalid, fmt.Sprintf(format, a...))
}
