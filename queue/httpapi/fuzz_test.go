package httpapi_test

import (
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/harvest-hpc/harvest/pilotproto"
	"github.com/harvest-hpc/harvest/queue/queuetest"
)

var fuzzPaths = []string{"/v1/jobs", pilotproto.PathPull, pilotproto.PathResults, pilotproto.PathLease,
	pilotproto.PathHeartbeat, pilotproto.PathRecommendation, "/v1/users/alice", "/v1/admin/nodes", "/v1/tokens"}

// FuzzRequestBodies feeds arbitrary bodies to the write endpoints: no
// input may panic or cause a 5xx, and a refused request stores nothing.
func FuzzRequestBodies(f *testing.F) {
	for _, s := range []string{
		`{"dataset": "/x", "command": ["p", "{input}"], "batch_size": 2}`,
		`{"dataset": "", "command": [], "batch_size": -1, "price": -0}`,
		`{"epoch": 1, "max": 3}`, `{"epoch": 1, "results": [{"task_id": 1, "attempt": 1, "status": "done"}]}`,
		`{"pilot_id": "p", "epoch": 9223372036854775807}`, `{"priority": 1e308}`, `null`, `[]`, `"x"`, `{`, ``,
		`{"command": ["{{input}}"], "batch_size": 1, "dataset": "/../.."}`,
		// results in the compact form, good and odd
		`{"epoch": 1, "done": [{"job_id": 1, "pilot": "p", "ids": [1, 2], "attempts": [1, 1], "duration_ms": 7, "started_at": 1}], "results": [{"task_id": 3, "attempt": 1, "status": "failed", "exit_code": 2}]}`,
		`{"epoch": 1, "done": [{"job_id": 1, "ids": [1, 2], "attempts": [1], "duration_ms": -7, "started_at": 1}]}`,
		`{"epoch": 1, "plain": [{"pilot": "p", "ids": [4294967297, 1], "attempts": [1, 2], "started_at": [1700000000000, -3], "duration_ms": [0, 5]}]}`,
		`{"epoch": 1, "plain": [{"ids": [9223372036854775807, 9223372036854775807], "attempts": [1, 1], "started_at": [0, null], "duration_ms": [0, -1]}]}`,
		`{"epoch": 1, "max": 3, "compact": true}`,
		// odd encodings encoding/json decides on
		`{"epoch": 1, "results": [{"task_id": 1, "attempt": 1, "status": "d\u006fne", "pilot": "p\x"}]}`,
		"{\"epoch\": 1, \"results\": [{\"task_id\": 1, \"attempt\": 1, \"status\": \"done\", \"pilot\": \"\xff\"}]}",
		`{"epoch": 1, "results": [{"Task_ID": 1, "attempt": 1.0, "status": "done"}]} {}`,
	} {
		for i := range fuzzPaths {
			f.Add(uint8(i), s)
		}
	}
	e := queuetest.New(f)
	h := e.Handler()
	e.Q.Lease(f.Context(), pilotproto.LeaseRequest{PilotID: "p"})
	f.Fuzz(func(t *testing.T, which uint8, body string) {
		path := fuzzPaths[int(which)%len(fuzzPaths)]
		method, who := "POST", "alice"
		switch {
		case strings.HasPrefix(path, "/v1/pilot/"):
			who = "pilot"
		case strings.HasPrefix(path, "/v1/users/") || path == "/v1/admin/nodes":
			method, who = "PUT", "admin"
		}
		req := httptest.NewRequest(method, path, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+e.Tokens[who])
		before := e.Snapshot(t)
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code >= 500 {
			t.Fatalf("%s %s %q: %d %s", method, path, body, rec.Code, rec.Body)
		}
		if rec.Code >= 400 && e.Snapshot(t) != before {
			t.Fatalf("%s %s %q was refused (%d) but changed stored state", method, path, body, rec.Code)
		}
	})
}
