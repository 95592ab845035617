package master_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/harvest-hpc/harvest/workerproto"
)

// A worker request whose meaning depends on the parser is a 400 that
// says why, as the queue's pilot endpoints answer: encoding/json kept the
// last of two keys (a heartbeat holding one worker's tasks under another's
// id), folded the case of names, and ignored data after the object.
// Unknown fields stay accepted (a newer worker may send some).
func TestAmbiguousWorkerRequestsAreRefused(t *testing.T) {
	e := startQueue(t)
	srv := startMaster(t, e.Q, t.TempDir(), "p1", nil, nil).srv
	for _, tc := range []struct{ name, path, body, msg string }{
		{"a duplicate key", workerproto.PathHeartbeat, `{"worker_id": "w1", "worker_id": "w2"}`, `duplicate key "worker_id"`},
		{"keys differing in case", workerproto.PathHeartbeat, `{"worker_id": "w1", "Worker_ID": "w2"}`, `differs only in case`},
		{"a duplicate key in a held task", workerproto.PathHeartbeat, `{"worker_id": "w1", "held": [{"task_id": 1, "attempt": 1, "task_id": 2}]}`, `duplicate key "task_id"`},
		{"data after the object", workerproto.PathHeartbeat, `{"worker_id": "w1"} {"worker_id": "w2"}`, "data after the object"},
		{"a duplicate key in a registration", workerproto.PathRegister, `{"worker_id": "w1", "slots": 1, "slots": 1000}`, `duplicate key "slots"`},
		// encoding/json read null as the field's zero: a pull of "free":
		// null was a pull of nothing, a registration of 0 slots.
		{"a null free count", workerproto.PathPull, `{"worker_id": "w1", "free": null, "wait_ms": 0}`, `null for "free", where a value is required`},
		{"a null worker id", workerproto.PathHeartbeat, `{"worker_id": null}`, `null for "worker_id"`},
		{"null slots", workerproto.PathRegister, `{"worker_id": "w1", "pilot_id": "p1", "slots": null, "capacity": 1}`, `null for "slots"`},
		{"a null attempt in a result", workerproto.PathResults, `{"worker_id": "w1", "results": [{"task_id": 1, "attempt": null, "status": "done"}]}`, `null for "attempt"`},
		{"a null held task", workerproto.PathHeartbeat, `{"worker_id": "w1", "held": [null]}`, `null for an element of "held"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req, _ := http.NewRequest("POST", srv.URL+tc.path, strings.NewReader(tc.body))
			req.Header.Set("Authorization", "Bearer "+token)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			var eb workerproto.ErrorBody
			json.NewDecoder(resp.Body).Decode(&eb)
			if resp.StatusCode != http.StatusBadRequest || !strings.Contains(eb.Error, tc.msg) {
				t.Fatalf("got %d %q, want 400 saying %q", resp.StatusCode, eb.Error, tc.msg)
			}
		})
	}
	// A Go nil (a list) may be null, and an unknown field anything: an
	// older worker's "running" (here the worker is unknown: 404).
	req, _ := http.NewRequest("POST", srv.URL+workerproto.PathHeartbeat, strings.NewReader(`{"worker_id": "w9", "held": null, "running": null}`))
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound {
		t.Errorf("a heartbeat with null lists: %d, want 404 (unknown worker)", resp.StatusCode)
	}
}
