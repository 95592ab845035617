package queue

import (
	"fmt"

	"github.com/harvest-hpc/harvest/queue/api"
)

// The sentinel errors, their codes and HTTP statuses are declared once, in
// queue/api (errors.go). ErrClosed is the server's own: the queue is
// shutting down (503, retry later).
var ErrClosed = fmt.Errorf("queue closed: %w", api.ErrUnavailable)

func invalid(format string, a ...any) error {
	return fmt.Errorf("%w: %s", api.ErrInvalid, fmt.Sprintf(format, a...))
}
