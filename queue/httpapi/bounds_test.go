package httpapi_test

import (
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/harvest-hpc/harvest/queue/api"
	"github.com/harvest-hpc/harvest/queue/queuetest"
)

// Issue 35 item 8: every duration and count the API takes is bounded.
// timeout_s 1e10 overflowed time.Duration in the worker and every task was
// killed at once; node figures and pulled-in ends had no upper bound.
// Each refusal is a 400 and changes nothing.
func TestDurationsAndCountsAreBounded(t *testing.T) {
	e := queuetest.New(t)
	ds := e.Dataset("d", 2)
	before := e.Snapshot(t)
	for _, tc := range []struct{ name, method, path, who, body string }{
		{"timeout_s past a year", "POST", api.PathJobs, "alice", jobBody(ds, func(m map[string]any) { m["timeout_s"] = 1e10 })},
		{"timeout_s a year and a second", "POST", api.PathJobs, "alice", jobBody(ds, func(m map[string]any) { m["timeout_s"] = api.MaxTimeoutS + 1 })},
		{"max_nodes past the bound", "PUT", api.PathNodes, "admin", `{"max_nodes": 1000000000}`},
		{"min_nodes past the bound", "PUT", api.PathNodes, "admin", `{"min_nodes": 2000000, "max_nodes": 0}`},
		{"global_max_nodes past the bound", "PUT", api.PathNodes, "admin", `{"global_max_nodes": 9000000000}`},
	} {
		if code, msg := e.Raw(tc.method, tc.path, tc.who, tc.body); code != http.StatusBadRequest {
			t.Errorf("%s: %d %s, want 400", tc.name, code, msg)
		}
	}
	if after := e.Snapshot(t); after != before {
		t.Errorf("a refused request changed the database:\n%s", after)
	}
	// The bound itself is accepted.
	if code, msg := e.Raw("POST", api.PathJobs, "alice", jobBody(ds, func(m map[string]any) { m["timeout_s"] = api.MaxTimeoutS })); code != http.StatusCreated {
		t.Errorf("timeout_s of a year: %d %s, want 201", code, msg)
	}
}

// Issue 35 item 8: with NDJSON an empty dataset answered 200 and an error
// line (a plain submit: 400). An error known before the first entry is
// listed is now answered with its status; a good dataset still streams.
func TestAStreamedSubmissionOfAnEmptyDatasetAnswersItsStatus(t *testing.T) {
	e := queuetest.New(t)
	post := func(ds string) (int, string, string) {
		req, _ := http.NewRequest("POST", e.URL()+api.PathJobs, strings.NewReader(jobBody(ds, nil)))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", api.ContentTypeNDJSON)
		req.Header.Set("Authorization", "Bearer "+e.Tokens["alice"])
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, resp.Header.Get("Content-Type"), string(b)
	}
	if code, ct, body := post(e.Dataset("empty", 0)); code != http.StatusBadRequest || !strings.HasPrefix(ct, "application/json") || !strings.Contains(body, "no entries") {
		t.Errorf("streamed submit of an empty dataset: %d %s %s, want 400 and the JSON error", code, ct, body)
	}
	if code, ct, body := post(e.Dataset("good", 3)); code != http.StatusOK || ct != api.ContentTypeNDJSON || !strings.Contains(body, `"job"`) {
		t.Errorf("streamed submit of a good dataset: %d %s %s, want 200 and the job line", code, ct, body)
	}
}

// Issue 35 item 10: job names held U+202E, U+2028 and U+200B (printed raw
// by harvest jobs), the 200 limit counted bytes, and bytes that are not
// UTF-8 in a command or name became U+FFFD silently.
func TestNamesAndArgumentsMustBePrintableUTF8(t *testing.T) {
	e := queuetest.New(t)
	ds := e.Dataset("d", 2)
	before := e.Snapshot(t)
	for _, tc := range []struct{ name, body string }{
		{"a right-to-left override", jobBody(ds, func(m map[string]any) { m["name"] = "invoice\u202Etxt.exe" })},
		{"a line separator", jobBody(ds, func(m map[string]any) { m["name"] = "one\u2028two" })},
		{"a zero-width space", jobBody(ds, func(m map[string]any) { m["name"] = "ad\u200Bmin" })},
		{"201 characters", jobBody(ds, func(m map[string]any) { m["name"] = strings.Repeat("é", 201) })},
		{"a name that is not UTF-8", `{"dataset":"` + ds + `","command":["/bin/prog"],"batch_size":1,"name":"caf` + "\xe9" + `"}`},
		{"an argument that is not UTF-8", `{"dataset":"` + ds + `","command":["/bin/prog","` + "\xff\xfe" + `"],"batch_size":1}`},
	} {
		if code, msg := e.Raw("POST", api.PathJobs, "alice", tc.body); code != http.StatusBadRequest {
			t.Errorf("%s: %d %s, want 400", tc.name, code, msg)
		}
	}
	if after := e.Snapshot(t); after != before {
		t.Errorf("a refused submission changed the database:\n%s", after)
	}
	// The limit is in characters: 200 two-byte ones are a good name.
	if code, msg := e.Raw("POST", api.PathJobs, "alice", jobBody(ds, func(m map[string]any) { m["name"] = strings.Repeat("é", 200) })); code != http.StatusCreated {
		t.Errorf("a name of 200 characters (400 bytes): %d %s, want 201", code, msg)
	}
}
