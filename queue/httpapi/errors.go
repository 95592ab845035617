package httpapi

import (
	"encoding/json"
	"errors"
	"net/http"

	"github.com/harvest-hpc/harvest/queue"
	"github.com/harvest-hpc/harvest/queue/api"
)

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(v)
}

// WriteError writes err as the API's JSON error body: the message and the
// typed code of the sentinel it wraps, with that code's status (one table,
// queue/api). A 5xx is logged and its message hidden, except a closing
// queue's.
func (s *Server) WriteError(w http.ResponseWriter, err error) {
	code := api.CodeOf(err)
	status := api.StatusOf(code)
	msg := err.Error()
	if status >= 500 {
		s.log.Error("request failed", "error", err)
		if !errors.Is(err, queue.ErrClosed) {
			msg = "internal error (see the agent's log)"
		}
	}
	writeJSON(w, status, api.Error{Error: msg, Code: code})
}
