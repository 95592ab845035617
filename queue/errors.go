package queue

import (
	"errors"
	"fmt"
	"net/http"
)

// Sentinel errors. Every error the API returns wraps one of them; the HTTP
// status comes from the one table below.
var (
	ErrInvalid       = errors.New("invalid request")
	ErrNotFound      = errors.New("not found")
	ErrUnauthorized  = errors.New("not authenticated")
	ErrForbidden     = errors.New("forbidden")
	ErrStaleEpoch    = errors.New("stale epoch")
	ErrLeaseExpired  = errors.New("lease expired")
	ErrConflict      = errors.New("conflict")
	ErrTooLarge      = errors.New("request body too large")
	ErrMethod        = errors.New("method not allowed")
	ErrUnknownUser   = errors.New("unknown user")
	ErrClosed        = errors.New("queue closed")
	errInternalWrite = errors.New("internal error")
)

// statusOf maps an error onto its HTTP status: the error-code table.
func statusOf(err error) int {
	switch {
	case errors.Is(err, ErrInvalid):
		return http.StatusBadRequest
	case errors.Is(err, ErrUnauthorized):
		return http.StatusUnauthorized
	case errors.Is(err, ErrForbidden):
		return http.StatusForbidden
	case errors.Is(err, ErrNotFound), errors.Is(err, ErrUnknownUser):
		return http.StatusNotFound
	case errors.Is(err, ErrMethod):
		return http.StatusMethodNotAllowed
	case errors.Is(err, ErrStaleEpoch), errors.Is(err, ErrLeaseExpired), errors.Is(err, ErrConflict):
		return http.StatusConflict
	case errors.Is(err, ErrTooLarge):
		return http.StatusRequestEntityTooLarge
	case errors.Is(err, ErrClosed):
		return http.StatusServiceUnavailable
	}
	return http.StatusInternalServerError
}

func invalid(format string, a ...any) error {
	return fmt.Errorf("%w: %s", ErrInvalid, fmt.Sprintf(format, a...))
}
