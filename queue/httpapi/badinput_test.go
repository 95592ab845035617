package httpapi_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/harvest-hpc/harvest/pilotproto"
	"github.com/harvest-hpc/harvest/queue/api"
	"github.com/harvest-hpc/harvest/queue/queuetest"
)

func jobBody(dataset string, mod func(m map[string]any)) string {
	m := map[string]any{"dataset": dataset, "command": []string{"/bin/prog", "{input}", "{output}"}, "batch_size": 2}
	if mod != nil {
		mod(m)
	}
	b, _ := json.Marshal(m)
	return string(b)
}

// TestBadInputIsRefusedAndChangesNothing sends every kind of bad request
// over real HTTP and checks the 4xx, the JSON error, and that a dump of
// every table is byte-for-byte the same afterwards.
func TestBadInputIsRefusedAndChangesNothing(t *testing.T) {
	e := queuetest.New(t)
	ctx := context.Background()
	good := e.Dataset("good", 3)
	bobs, err := e.Q.Submit(ctx, "bob", api.JobSpec{Dataset: e.Dataset("bobset", 2), Command: []string{"x"}, BatchSize: 1})
	if err != nil {
		t.Fatal(err)
	}
	killed, err := e.Q.Submit(ctx, "alice", api.JobSpec{Dataset: e.Dataset("killed", 1), Command: []string{"x"}, BatchSize: 1})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.Q.Cancel(ctx, "alice", false, killed.ID); err != nil {
		t.Fatal(err)
	}
	outside := filepath.Join(e.Dir, "outside")
	os.MkdirAll(filepath.Join(outside, "secret"), 0o755)
	if err := os.Symlink(outside, filepath.Join(e.Data, "escape")); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(e.Data, "afile"), []byte("x"), 0o644)
	// Lease history: epoch 1 (p1) expired, epoch 2 (p2) expired too.
	if _, err := e.Q.Lease(ctx, pilotproto.LeaseRequest{PilotID: "p1", Address: "http://n1:1"}); err != nil {
		t.Fatal(err)
	}
	e.Clock.Advance(31 * time.Second)
	if l, err := e.Q.Lease(ctx, pilotproto.LeaseRequest{PilotID: "p2", Address: "http://n2:1"}); err != nil || l.Epoch != 2 {
		t.Fatalf("second lease: %+v %v", l, err)
	}
	e.Clock.Advance(31 * time.Second)

	// Issue 13 items 4, 5 and 7: links and names in datasets, outputs of
	// another user.
	linkedOut := e.Dataset("linkedout", 2)
	if err := os.Symlink(filepath.Join(outside, "secret"), filepath.Join(linkedOut, "shadow")); err != nil {
		t.Fatal(err)
	}
	badName := e.Dataset("badname", 1)
	if err := os.Mkdir(filepath.Join(badName, "bad\xff"), 0o755); err != nil {
		t.Fatal(err)
	}
	alices := filepath.Join(e.Data, "alice-results") // the test's uid is alice's
	os.MkdirAll(alices, 0o755)
	rawJob := func(rest string) string { return `{"dataset": "` + good + `", "batch_size": 1, ` + rest + `}` }

	huge := `{"dataset": "` + strings.Repeat("a", 2<<20) + `"}`
	for _, tc := range []struct {
		name         string
		method, path string
		who, body    string
		status       int
		msg          string
	}{
		{"malformed JSON is a 400", "POST", "/v1/jobs", "alice", `{"dataset": `, 400, "malformed JSON"},
		{"a body that is not an object is a 400", "POST", "/v1/jobs", "alice", `[1,2]`, 400, "malformed JSON"},
		{"trailing data after the object is a 400", "POST", "/v1/jobs", "alice", jobBody(good, nil) + `{}`, 400, "data after the object"},
		{"an empty body is a 400", "POST", "/v1/jobs", "alice", ``, 400, "empty body"},
		{"a huge body is a 413", "POST", "/v1/jobs", "alice", huge, 413, "too large"},
		{"an unknown field is a 400", "POST", "/v1/jobs", "alice", jobBody(good, func(m map[string]any) { m["shell"] = true }), 400, "unknown field"},
		{"a dataset path with .. is refused", "POST", "/v1/jobs", "alice", jobBody(e.Data+"/../outside", nil), 400, `".."`},
		{"a symlink escaping the roots is refused", "POST", "/v1/jobs", "alice", jobBody(filepath.Join(e.Data, "escape"), nil), 400, "outside the allowed roots"},
		{"a dataset outside the roots is refused", "POST", "/v1/jobs", "alice", jobBody(outside, nil), 400, "outside the allowed roots"},
		{"a relative dataset path is refused", "POST", "/v1/jobs", "alice", jobBody("data/good", nil), 400, "not an absolute path"},
		{"a missing dataset is refused", "POST", "/v1/jobs", "alice", jobBody(filepath.Join(e.Data, "nope"), nil), 400, "does not exist"},
		{"a dataset that is a file is refused", "POST", "/v1/jobs", "alice", jobBody(filepath.Join(e.Data, "afile"), nil), 400, "not a directory"},
		{"an empty dataset is refused", "POST", "/v1/jobs", "alice", jobBody(e.Dataset("empty", 0), nil), 400, "no entries"},
		{"an output escaping through .. is refused", "POST", "/v1/jobs", "alice", jobBody(good, func(m map[string]any) { m["output"] = e.Data + "/../outside/o" }), 400, `".."`},
		{"an output outside the roots is refused", "POST", "/v1/jobs", "alice", jobBody(good, func(m map[string]any) { m["output"] = "/tmp/harvest-o" }), 400, "outside the allowed roots"},
		{"a dataset entry linked out of the roots is refused", "POST", "/v1/jobs", "alice", jobBody(linkedOut, nil), 400, "entry shadow"},
		{"a dataset entry whose name is not UTF-8 is refused", "POST", "/v1/jobs", "alice", jobBody(badName, nil), 400, "not valid UTF-8"},
		{"another user's output directory is refused", "POST", "/v1/jobs", "bob", jobBody(good, func(m map[string]any) { m["output"] = alices }), 403, "owned by uid"},
		{"an output inside another user's directory is refused", "POST", "/v1/jobs", "bob", jobBody(good, func(m map[string]any) { m["output"] = alices + "/bobs" }), 403, "owned by uid"},
		{"a NUL byte in the output is refused", "POST", "/v1/jobs", "alice", jobBody(good, func(m map[string]any) { m["output"] = alices + "/o\x00x" }), 400, "NUL"},
		{"a NUL byte in the dataset is refused", "POST", "/v1/jobs", "alice", jobBody(good+"\x00", nil), 400, "NUL"},
		{"null inside the command is refused", "POST", "/v1/jobs", "alice", rawJob(`"command": ["prog", null]`), 400, "null"},
		{"a key in another case is refused", "POST", "/v1/jobs", "alice", `{"Dataset": "` + good + `", "command": ["x"], "batch_size": 1}`, 400, "unknown field"},
		{"a duplicate key is refused", "POST", "/v1/jobs", "alice", rawJob(`"command": ["x"], "command": ["y"]`), 400, "duplicate key"},
		{"a price that makes costs infinite is refused", "POST", "/v1/jobs", "alice", jobBody(good, func(m map[string]any) { m["price"] = 1e308 }), 400, "price"},
		{"cores above the bound are refused", "POST", "/v1/jobs", "alice", jobBody(good, func(m map[string]any) { m["cores"] = 100000 }), 400, "cores"},
		{"a job id with a sign is a 400", "GET", "/v1/jobs/+1", "alice", "", 400, "not a positive integer"},
		{"a negative batch size is refused", "POST", "/v1/jobs", "alice", jobBody(good, func(m map[string]any) { m["batch_size"] = -1 }), 400, "batch_size -1"},
		{"a batch size above the bound is refused", "POST", "/v1/jobs", "alice", jobBody(good, func(m map[string]any) { m["batch_size"] = 10001 }), 400, "outside 1..10000"},
		{"an unknown placeholder is refused", "POST", "/v1/jobs", "alice", jobBody(good, func(m map[string]any) { m["command"] = []string{"prog", "{inptu}"} }), 400, "unknown placeholder {inptu}"},
		{"an empty command is refused", "POST", "/v1/jobs", "alice", jobBody(good, func(m map[string]any) { m["command"] = []string{} }), 400, "non-empty argv"},
		{"an empty program name is refused", "POST", "/v1/jobs", "alice", jobBody(good, func(m map[string]any) { m["command"] = []string{"", "x"} }), 400, "non-empty argv"},
		{"a zero price is refused", "POST", "/v1/jobs", "alice", jobBody(good, func(m map[string]any) { m["price"] = 0 }), 400, "price"},
		{"zero cores are refused", "POST", "/v1/jobs", "alice", jobBody(good, func(m map[string]any) { m["cores"] = 0 }), 400, "cores"},
		{"zero max attempts are refused", "POST", "/v1/jobs", "alice", jobBody(good, func(m map[string]any) { m["max_attempts"] = 0 }), 400, "max_attempts"},
		{"a negative timeout is refused", "POST", "/v1/jobs", "alice", jobBody(good, func(m map[string]any) { m["timeout_s"] = -5 }), 400, "timeout_s"},
		{"another user's job is not found", "GET", fmt.Sprintf("/v1/jobs/%d", bobs.ID), "alice", "", 404, "not found"},
		{"another user's job cannot be cancelled", "DELETE", fmt.Sprintf("/v1/jobs/%d", bobs.ID), "alice", "", 404, "not found"},
		{"listing another user's jobs is forbidden", "GET", "/v1/jobs?user=bob", "alice", "", 403, "only your own"},
		{"a job that does not exist is not found", "GET", "/v1/jobs/999999", "alice", "", 404, "not found"},
		{"a job id that is not a number is a 400", "GET", "/v1/jobs/abc", "alice", "", 400, "not a positive integer"},
		{"cancelling a killed job again succeeds and changes nothing", "DELETE", fmt.Sprintf("/v1/jobs/%d", killed.ID), "alice", "", 200, ""},
		{"a bad page limit is a 400", "GET", "/v1/jobs?limit=0", "alice", "", 400, "limit"},
		{"an unknown state filter is a 400", "GET", "/v1/jobs?state=SLEEPING", "alice", "", 400, "unknown job state"},
		{"no token is a 401", "GET", "/v1/jobs", "", "", 401, "missing bearer token"},
		{"a wrong token is a 401", "GET", "/v1/jobs", "not-a-token", "", 401, "invalid token"},
		{"a wrong token cannot submit", "POST", "/v1/jobs", "not-a-token", jobBody(good, nil), 401, "invalid token"},
		{"a user cannot set quotas", "PUT", "/v1/users/alice", "alice", `{"priority": 100}`, 403, "admin role"},
		{"a user cannot set nodes", "PUT", "/v1/admin/nodes", "alice", `{"min_nodes": 3}`, 403, "admin role"},
		{"a user cannot pull tasks", "POST", pilotproto.PathPull, "alice", `{"epoch": 2, "max": 1}`, 403, "pilot role"},
		{"an admin cannot take the lease", "POST", pilotproto.PathLease, "admin", `{"pilot_id": "x"}`, 403, "pilot role"},
		{"a pilot cannot list jobs", "GET", "/v1/jobs", "pilot", "", 403, "user or admin role"},
		{"a pilot cannot submit", "POST", "/v1/jobs", "pilot", jobBody(good, nil), 403, "user or admin role"},
		{"a user cannot make a token for someone else", "POST", "/v1/tokens", "alice", `{"user": "bob"}`, 403, "only a user token for yourself"},
		{"a user cannot make an admin token", "POST", "/v1/tokens", "alice", `{"role": "admin"}`, 403, "only a user token"},
		{"an admin cannot make a token of an unknown role", "POST", "/v1/tokens", "admin", `{"user": "carol", "role": "root"}`, 400, "role must be"},
		{"an admin cannot make a token for an invalid name", "POST", "/v1/tokens", "admin", `{"user": "../etc"}`, 400, "not a valid user name"},
		{"an invalid priority is refused", "PUT", "/v1/users/alice", "admin", `{"priority": -1}`, 400, "priority"},
		{"an invalid user name is refused", "PUT", "/v1/users/Bad%20Name", "admin", `{"priority": 2}`, 400, "not a valid user name"},
		{"an unknown user is not found", "GET", "/v1/users/nobody", "alice", "", 404, "unknown user"},
		{"min nodes above max nodes are refused", "PUT", "/v1/admin/nodes", "admin", `{"min_nodes": 5, "max_nodes": 2}`, 400, "exceeds max_nodes"},
		{"negative min nodes are refused", "PUT", "/v1/admin/nodes", "admin", `{"min_nodes": -1}`, 400, "negative"},
		{"an old epoch cannot pull", "POST", pilotproto.PathPull, "pilot", `{"epoch": 1, "max": 5}`, 409, "stale epoch"},
		{"an old epoch cannot report results", "POST", pilotproto.PathResults, "pilot", `{"epoch": 1, "results": [{"task_id": 1, "attempt": 1, "status": "done"}]}`, 409, "stale epoch"},
		{"an old epoch cannot heartbeat", "POST", pilotproto.PathHeartbeat, "pilot", `{"epoch": 1, "running": []}`, 409, "stale epoch"},
		// A heartbeat whose meaning depends on the parser (encoding/json
		// keeps the last of two keys and folds the case of names) is
		// refused, as every other body is.
		{"a duplicate key in a heartbeat is refused", "POST", pilotproto.PathHeartbeat, "pilot", `{"epoch": 1, "epoch": 2, "running": []}`, 400, `duplicate key "epoch"`},
		{"a heartbeat key in another case is refused", "POST", pilotproto.PathHeartbeat, "pilot", `{"EPOCH": 2}`, 400, `unknown field "EPOCH"`},
		{"two heartbeat keys differing in case are refused", "POST", pilotproto.PathHeartbeat, "pilot", `{"epoch": 2, "Epoch": 1}`, 400, `unknown field "Epoch"`},
		{"a duplicate key in a heartbeat's running task is refused", "POST", pilotproto.PathHeartbeat, "pilot", `{"epoch": 2, "running": [{"task_id": 1, "attempt": 1, "task_id": 2}]}`, 400, `duplicate key "task_id"`},
		{"an escaped duplicate key in a heartbeat's pilot is refused", "POST", pilotproto.PathHeartbeat, "pilot", `{"epoch": 2, "pilots": [{"pilot_id": "a", "pilot\u005fid": "b"}]}`, 400, `duplicate key "pilot_id"`},
		{"an old epoch cannot renew the lease", "POST", pilotproto.PathLease, "pilot", `{"pilot_id": "p1", "epoch": 1}`, 409, "stale epoch"},
		{"an epoch never granted is refused", "POST", pilotproto.PathPull, "pilot", `{"epoch": 7, "max": 5}`, 409, "never granted"},
		{"an expired lease cannot pull", "POST", pilotproto.PathPull, "pilot", `{"epoch": 2, "max": 5}`, 409, "lease expired"},
		// encoding/json read null as 0: a heartbeat of "epoch": null was
		// one of epoch 0, a running task's "attempt": null attempt 0.
		{"a null epoch in a heartbeat is refused", "POST", pilotproto.PathHeartbeat, "pilot", `{"epoch": null, "running": []}`, 400, `null for "epoch", where a value is required`},
		{"a null attempt in a heartbeat is refused", "POST", pilotproto.PathHeartbeat, "pilot", `{"epoch": 2, "running": [{"task_id": 1, "attempt": null}]}`, 400, `null for "attempt"`},
		{"a null running task in a heartbeat is refused", "POST", pilotproto.PathHeartbeat, "pilot", `{"epoch": 2, "running": [null]}`, 400, `null for an element of "running"`},
		{"a null busy flag in a heartbeat is refused", "POST", pilotproto.PathHeartbeat, "pilot", `{"epoch": 2, "pilots": [{"pilot_id": "a", "busy": null}]}`, 400, `null for "busy"`},
		{"a null heartbeat is refused", "POST", pilotproto.PathHeartbeat, "pilot", `null`, 400, `null for the body`},
		{"a null number elsewhere is refused", "POST", pilotproto.PathRecommendation, "pilot", `{"epoch": 2, "min_nodes": null}`, 400, `null is not a valid min_nodes`},
		{"an expired lease cannot heartbeat", "POST", pilotproto.PathHeartbeat, "pilot", `{"epoch": 2}`, 409, "lease expired"},
		{"an expired lease cannot recommend", "POST", pilotproto.PathRecommendation, "pilot", `{"epoch": 2, "min_nodes": 3}`, 409, "lease expired"},
		{"a pull without an epoch is refused", "POST", pilotproto.PathPull, "pilot", `{"max": 5}`, 400, "epoch is required"},
		{"a pull of zero tasks is refused", "POST", pilotproto.PathPull, "pilot", `{"epoch": 2, "max": 0}`, 400, "max must be"},
		{"a result with an unknown status is refused", "POST", pilotproto.PathResults, "pilot", `{"epoch": 2, "results": [{"task_id": 1, "attempt": 1, "status": "great"}]}`, 400, "unknown status"},
		{"a result without attempt is refused", "POST", pilotproto.PathResults, "pilot", `{"epoch": 2, "results": [{"task_id": 1, "status": "done"}]}`, 400, "attempt"},
		// The master's address is handed to the pool's workers, who send
		// it the pilot token: only an http(s) URL of a host and port.
		{"a lease address of another scheme is refused", "POST", pilotproto.PathLease, "pilot", `{"pilot_id": "p9", "address": "file:///etc/passwd"}`, 400, "address"},
		{"a lease address with a path is refused", "POST", pilotproto.PathLease, "pilot", `{"pilot_id": "p9", "address": "http://n9:8470/../v1/admin"}`, 400, "address"},
		{"a lease address with credentials is refused", "POST", pilotproto.PathLease, "pilot", `{"pilot_id": "p9", "address": "http://u:p@n9:8470"}`, 400, "address"},
		{"a lease address with a bad port is refused", "POST", pilotproto.PathLease, "pilot", `{"pilot_id": "p9", "address": "http://n9:70000"}`, 400, "address"},
		{"a lease address with a query is refused", "POST", pilotproto.PathLease, "pilot", `{"pilot_id": "p9", "address": "http://n9:1?x=1"}`, 400, "address"},
		{"a lease request without a pilot id is refused", "POST", pilotproto.PathLease, "pilot", `{"address": "http://x"}`, 400, "pilot_id"},
		{"a negative recommendation is refused", "POST", pilotproto.PathRecommendation, "pilot", `{"epoch": 2, "min_nodes": -3}`, 400, "negative"},
		{"an unknown field in a pilot request is refused", "POST", pilotproto.PathPull, "pilot", `{"epoch": 2, "max": 1, "greedy": true}`, 400, "unknown field"},
		// Results in either form (a newer pilot's done groups, an older
		// pilot's full records) go through the strict decoder.
		{"an unknown field in a done group is refused", "POST", pilotproto.PathResults, "pilot", `{"epoch": 2, "done": [{"job_id": 1, "ids": [1], "attempts": [1], "duration_ms": 1, "started_at": 1, "bonus": 1}]}`, 400, "unknown field"},
		{"a duplicate key in a done group is refused", "POST", pilotproto.PathResults, "pilot", `{"epoch": 2, "done": [{"job_id": 1, "ids": [1], "ids": [2], "attempts": [1], "duration_ms": 1, "started_at": 1}]}`, 400, "duplicate key"},
		{"a done group with fewer attempts than ids is refused", "POST", pilotproto.PathResults, "pilot", `{"epoch": 2, "done": [{"job_id": 1, "ids": [1, 2], "attempts": [1], "duration_ms": 1, "started_at": 1}]}`, 400, "as many of each"},
		{"an empty done group is refused", "POST", pilotproto.PathResults, "pilot", `{"epoch": 2, "done": [{"job_id": 1, "ids": [], "attempts": [], "duration_ms": 0, "started_at": 1}]}`, 400, "at least one"},
		{"a null id in a done group is refused", "POST", pilotproto.PathResults, "pilot", `{"epoch": 2, "done": [{"job_id": 1, "ids": [1, null], "attempts": [1, 1], "duration_ms": 1, "started_at": 1}]}`, 400, "null is not a valid element of ids"},
		{"a string id in a done group is refused", "POST", pilotproto.PathResults, "pilot", `{"epoch": 2, "done": [{"job_id": 1, "ids": [1, "n"], "attempts": [1, 1], "duration_ms": 1, "started_at": 1}]}`, 400, "cannot unmarshal string"},
		{"null done ids are refused", "POST", pilotproto.PathResults, "pilot", `{"epoch": 2, "done": [{"job_id": 1, "ids": null, "attempts": [1], "duration_ms": 1, "started_at": 1}]}`, 400, "as many of each"},
		{"a done group with a negative duration is refused", "POST", pilotproto.PathResults, "pilot", `{"epoch": 2, "done": [{"job_id": 1, "ids": [1], "attempts": [1], "duration_ms": -1, "started_at": 1}]}`, 400, "negative"},
		{"a done group without a job is refused", "POST", pilotproto.PathResults, "pilot", `{"epoch": 2, "done": [{"ids": [1], "attempts": [1], "duration_ms": 1, "started_at": 1}]}`, 400, "job_id"},
		{"a done entry with attempt 0 is refused", "POST", pilotproto.PathResults, "pilot", `{"epoch": 2, "done": [{"job_id": 1, "ids": [1], "attempts": [0], "duration_ms": 1, "started_at": 1}]}`, 400, "attempt"},
		{"too many done entries are refused", "POST", pilotproto.PathResults, "pilot", `{"epoch": 2, "done": [{"job_id": 1, "ids": [` + strings.Repeat("1,", pilotproto.MaxResults) + `1], "attempts": [1], "duration_ms": 1, "started_at": 1}]}`, 400, "as many of each"},
		{"too many results in both forms are refused", "POST", pilotproto.PathResults, "pilot", `{"epoch": 2, "done": [{"job_id": 1, "ids": [` + strings.Repeat("1,", pilotproto.MaxResults-1) + `1], "attempts": [` + strings.Repeat("1,", pilotproto.MaxResults-1) + `1], "duration_ms": 1, "started_at": 1}], "results": [{"task_id": 1, "attempt": 1, "status": "done"}]}`, 400, "at most 100000 results"},
		{"an unknown field in a result is refused", "POST", pilotproto.PathResults, "pilot", `{"epoch": 2, "results": [{"task_id": 1, "attempt": 1, "status": "done", "bonus": 1}]}`, 400, "unknown field"},
		{"data after a results report is refused", "POST", pilotproto.PathResults, "pilot", `{"epoch": 2, "results": []} {}`, 400, "data after the object"},
		{"a malformed results report is refused", "POST", pilotproto.PathResults, "pilot", `{"epoch": 2, "results": [{"task_id": 1,]}`, 400, "malformed JSON"},
		{"an empty results report is refused", "POST", pilotproto.PathResults, "pilot", " ", 400, "empty body"},
		{"a fractional attempt is refused", "POST", pilotproto.PathResults, "pilot", `{"epoch": 2, "results": [{"task_id": 1, "attempt": 1.5, "status": "done"}]}`, 400, "cannot unmarshal number 1.5"},
		{"a task id past int64 is refused", "POST", pilotproto.PathResults, "pilot", `{"epoch": 2, "results": [{"task_id": 9223372036854775808, "attempt": 1, "status": "done"}]}`, 400, "cannot unmarshal number"},
		{"a task id as a string is refused", "POST", pilotproto.PathResults, "pilot", `{"epoch": 2, "results": [{"task_id": "1", "attempt": 1, "status": "done"}]}`, 400, "cannot unmarshal string"},
		{"a wrong method is a 405", "PATCH", "/v1/jobs", "alice", "", 405, "method not allowed"},
		{"an unknown path is a 404", "GET", "/v1/nothing", "alice", "", 404, "no endpoint"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := e.Snapshot(t)
			status, msg := e.Raw(tc.method, tc.path, tc.who, tc.body)
			if status != tc.status || !strings.Contains(msg, tc.msg) {
				t.Fatalf("got %d %q, want %d containing %q", status, msg, tc.status, tc.msg)
			}
			if after := e.Snapshot(t); after != before {
				t.Fatalf("the request changed stored state:\nbefore:\n%s\nafter:\n%s", before, after)
			}
		})
	}

	for _, ct := range []string{"text/plain", "application/jsonx", "application/json-seq", "application/json; charset=latin1"} {
		t.Run("content type "+ct+" is a 400", func(t *testing.T) {
			before := e.Snapshot(t)
			req, _ := http.NewRequest("POST", e.URL()+"/v1/jobs", strings.NewReader(jobBody(good, nil)))
			req.Header.Set("Content-Type", ct)
			req.Header.Set("Authorization", "Bearer "+e.Tokens["alice"])
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != 400 {
				t.Fatalf("status %d, want 400", resp.StatusCode)
			}
			if e.Snapshot(t) != before {
				t.Fatal("the request changed stored state")
			}
		})
	}
	t.Run("content type application/json; charset=utf-8 is accepted", func(t *testing.T) {
		req, _ := http.NewRequest("POST", e.URL()+"/v1/jobs", strings.NewReader(jobBody(good, nil)))
		req.Header.Set("Content-Type", "application/json; charset=utf-8")
		req.Header.Set("Authorization", "Bearer "+e.Tokens["alice"])
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 201 && resp.StatusCode != 200 {
			t.Fatalf("status %d, want success", resp.StatusCode)
		}
	})
}
