package httpapi

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"

	"github.com/harvest-hpc/harvest/queue"
	"github.com/harvest-hpc/harvest/queue/api"
)

// writeJSON answers v as JSON. It encodes before it writes the status, so
// a value that cannot be encoded (a non-finite figure) is a logged 500
// with an error body, never a 200 with an empty one (issue 13 item 6).
func (s *Server) writeJSON(w http.ResponseWriter, status int, v any) {
	var b bytes.Buffer
	if err := json.NewEncoder(&b).Encode(v); err != nil {
		s.log.Error("cannot encode the answer", "error", err, "type", fmt.Sprintf("%T", v))
		b.Reset()
		json.NewEncoder(&b).Encode(api.Error{Error: "internal error (see the agent's log)", Code: api.CodeInternal})
		status = http.StatusInternalServerError
	}
	w.Header().Set("Content-Type", "application/json")
	// With its length the answer goes out in one piece, not chunked.
	w.Header().Set("Content-Length", strconv.Itoa(b.Len()))
	w.WriteHeader(status)
	w.Write(b.Bytes())
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
	s.writeJSON(w, status, api.Error{Error: msg, Code: code})
}
