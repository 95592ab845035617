package httpapi

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/harvest-hpc/harvest/queue/api"
)

func invalid(format string, a ...any) error {
	return fmt.Errorf("%w: %s", api.ErrInvalid, fmt.Sprintf(format, a...))
}

// decode reads one JSON object, rejecting unknown fields, trailing data
// and bodies over limit. Every request body of the API goes through here.
func decode(w http.ResponseWriter, r *http.Request, limit int64, v any) error {
	if ct := r.Header.Get("Content-Type"); ct != "" && !strings.HasPrefix(ct, "application/json") {
		return invalid("Content-Type must be application/json, got %q", ct)
	}
	r.Body = http.MaxBytesReader(w, r.Body, limit)
	dec := json.NewDecoder(r.Body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return fmt.Errorf("%w: the limit is %d bytes", api.ErrTooLarge, limit)
		}
		if errors.Is(err, io.EOF) {
			return invalid("empty body: a JSON object is required")
		}
		return invalid("malformed JSON: %v", err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return fmt.Errorf("%w: the limit is %d bytes", api.ErrTooLarge, limit)
		}
		return invalid("malformed JSON: data after the object")
	}
	return nil
}
