package httpapi

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"math"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/harvest-hpc/harvest/queue/api"
)

// TestAnAnswerThatCannotBeEncodedIsALogged500 is issue 13 item 6: a user's
// cost of +Inf made GET /v1/users answer 200 with an empty body, for
// everybody, for 24 hours (the encoder's error was ignored after the
// status was sent).
func TestAnAnswerThatCannotBeEncodedIsALogged500(t *testing.T) {
	var logs bytes.Buffer
	s := &Server{log: slog.New(slog.NewTextHandler(&logs, nil))}
	rec := httptest.NewRecorder()
	s.writeJSON(rec, 200, []api.User{{Name: "alice", Cost24h: math.Inf(1)}})
	if rec.Code != 500 {
		t.Fatalf("status %d, want 500", rec.Code)
	}
	var e api.Error
	if err := json.Unmarshal(rec.Body.Bytes(), &e); err != nil || e.Code != api.CodeInternal {
		t.Fatalf("body %q (%v): want a JSON error", rec.Body.String(), err)
	}
	if !strings.Contains(logs.String(), "cannot encode the answer") {
		t.Fatalf("not logged: %q", logs.String())
	}
	rec = httptest.NewRecorder()
	s.writeJSON(rec, 201, map[string]int{"a": 1})
	if rec.Code != 201 || strings.TrimSpace(rec.Body.String()) != `{"a":1}` {
		t.Fatalf("a good answer: %d %q", rec.Code, rec.Body.String())
	}
}
