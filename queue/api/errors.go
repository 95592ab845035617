package api

import (
	"errors"
	"net/http"
)

// Code is the typed error code in every error answer's body. Clients map
// it back onto the sentinel error below with ErrOf; nobody matches the
// message text.
type Code string

// The error codes of the API.
const (
	CodeInvalid      Code = "invalid"
	CodeUnauthorized Code = "unauthorized"
	CodeForbidden    Code = "forbidden"
	CodeNotFound     Code = "not_found"
	CodeUnknownUser  Code = "unknown_user"
	CodeMethod       Code = "method_not_allowed"
	CodeConflict     Code = "conflict"
	CodeStaleEpoch   Code = "stale_epoch"
	CodeLeaseExpired Code = "lease_expired"
	CodeTooLarge     Code = "too_large"
	CodeUnavailable  Code = "unavailable"
	CodeInternal     Code = "internal"
)

// Sentinel errors shared by the server (package queue), the Go client and
// the master: declared once, here. Every error the API answers wraps one
// of them; check with errors.Is.
var (
	ErrInvalid      = errors.New("invalid request")
	ErrUnauthorized = errors.New("not authenticated")
	ErrForbidden    = errors.New("forbidden")
	ErrNotFound     = errors.New("not found")
	ErrUnknownUser  = errors.New("unknown user")
	ErrMethod       = errors.New("method not allowed")
	ErrConflict     = errors.New("conflict")
	// ErrStaleEpoch: a write from a master whose epoch is not the current
	// lease's (a newer master exists). The master that gets it must stop.
	ErrStaleEpoch = errors.New("stale epoch")
	// ErrLeaseExpired: the master's lease ran out; it may renew it if
	// nobody else took it.
	ErrLeaseExpired = errors.New("lease expired")
	ErrTooLarge     = errors.New("request body too large")
	// ErrUnavailable: the queue is closing or cannot serve now; retry.
	ErrUnavailable = errors.New("queue unavailable")
	ErrInternal    = errors.New("internal error")
)

// codeTable is the one table from code to sentinel and HTTP status, read
// by both sides. Order matters for CodeOf only where an error wraps two
// sentinels: the more specific code comes first.
var codeTable = []struct {
	code   Code
	err    error
	status int
}{
	{CodeStaleEpoch, ErrStaleEpoch, http.StatusConflict},
	{CodeLeaseExpired, ErrLeaseExpired, http.StatusConflict},
	{CodeConflict, ErrConflict, http.StatusConflict},
	{CodeInvalid, ErrInvalid, http.StatusBadRequest},
	{CodeUnauthorized, ErrUnauthorized, http.StatusUnauthorized},
	{CodeForbidden, ErrForbidden, http.StatusForbidden},
	{CodeUnknownUser, ErrUnknownUser, http.StatusNotFound},
	{CodeNotFound, ErrNotFound, http.StatusNotFound},
	{CodeMethod, ErrMethod, http.StatusMethodNotAllowed},
	{CodeTooLarge, ErrTooLarge, http.StatusRequestEntityTooLarge},
	{CodeUnavailable, ErrUnavailable, http.StatusServiceUnavailable},
	{CodeInternal, ErrInternal, http.StatusInternalServerError},
}

// CodeOf is the code of err: that of the first sentinel it wraps, or
// CodeInternal.
func CodeOf(err error) Code {
	for _, e := range codeTable {
		if errors.Is(err, e.err) {
			return e.code
		}
	}
	return CodeInternal
}

// StatusOf is the HTTP status of an error code (500 for an unknown one).
func StatusOf(c Code) int {
	for _, e := range codeTable {
		if e.code == c {
			return e.status
		}
	}
	return http.StatusInternalServerError
}

// ErrOf is the sentinel of an error code; for a code this version does not
// know (a newer server), the sentinel of the HTTP status's usual code.
func ErrOf(c Code, status int) error {
	for _, e := range codeTable {
		if e.code == c {
			return e.err
		}
	}
	switch status {
	case http.StatusConflict:
		return ErrConflict
	case http.StatusNotFound:
		return ErrNotFound
	}
	for _, e := range codeTable {
		if e.status == status {
			return e.err
		}
	}
	if status >= 500 {
		return ErrInternal
	}
	return ErrInvalid
}
