package web

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// Issue 35 item 8: the agent's own endpoints decode as strictly as the
// queue's API. Before, {"user":"dave","user":"carol"} rotated carol's
// tokens (the last key won), and keys in any case, trailing data and any
// application/json* type were taken. Each refusal changes nothing.
func TestTheAgentsEndpointsDecodeStrictly(t *testing.T) {
	h, q, ctl := newServer(t, testRound())
	tests := []struct{ name, method, path, ctype, body string }{
		{"a duplicate key", "POST", "/v1/admin/tokens/rotate", "application/json", `{"user":"dave","user":"carol"}`},
		{"a key in another case", "POST", "/v1/admin/tokens/rotate", "application/json", `{"User":"carol"}`},
		{"data after the object", "POST", "/v1/admin/tokens/rotate", "application/json", `{"user":"carol"} {"user":"dave"}`},
		{"another json type", "POST", "/v1/admin/tokens/rotate", "application/json-patch+json", `{"user":"carol"}`},
		{"a charset other than utf-8", "PUT", "/v1/admin/harvest", "application/json; charset=latin1", `{"paused":true}`},
		{"a duplicate paused", "PUT", "/v1/admin/harvest", "application/json", `{"paused":false,"paused":true}`},
		{"a key in another case to drain", "POST", "/v1/admin/drain", "application/json", `{"Now":true}`},
		{"null for a boolean", "POST", "/v1/admin/drain", "application/json", `{"now":null}`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			req := httptest.NewRequest(tc.method, tc.path, strings.NewReader(tc.body))
			req.Header.Set("Authorization", "Bearer admin-tok")
			req.Header.Set("Content-Type", tc.ctype)
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, req)
			if rec.Code != http.StatusBadRequest {
				t.Errorf("%s %s %s: %d %s, want 400", tc.method, tc.path, tc.body, rec.Code, rec.Body)
			}
			if len(q.revoked) != 0 || ctl.Paused() {
				t.Fatalf("a refused request changed something: revoked %v, paused %v", q.revoked, ctl.Paused())
			}
		})
	}
}

// Issue 35 item 10: /status told an agent token it was "not the pilot
// token". It names the token it was given.
func TestTheStatusPageNamesTheTokenItRefuses(t *testing.T) {
	h, q, _ := newServer(t, testRound())
	q.tokens["agent-tok"] = "site-b/agent"
	for tok, want := range map[string]string{"agent-tok": "an agent token", "pilot-tok": "the pilot token"} {
		resp := do(h, "GET", "/status", tok, "")
		body := text(resp)
		if resp.StatusCode != http.StatusForbidden || !strings.Contains(body, want) {
			t.Errorf("/status with %s: %d, want 403 saying %q:\n%s", tok, resp.StatusCode, want, body)
		}
	}
}
