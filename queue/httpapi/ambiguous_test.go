package httpapi_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/harvest-hpc/harvest/queue/api"
	"github.com/harvest-hpc/harvest/queue/queuetest"
)

// A request the API would have to guess about is refused with a 400 (a
// 401 for credentials) that names what is wrong, and changes nothing. A
// query parameter given twice took its first value and one the endpoint
// does not know was ignored: ?stat=RUNNING (a typo) listed every job,
// ?limit=5&limit=100000000 read 5. Two Authorization headers identified
// the caller by the first, which a proxy that checks the last would not
// see; two Idempotency-Key or Content-Type headers likewise took the
// first. "bearer" (the scheme is case-insensitive, RFC 9110) was read as
// no token at all, and a token without its scheme as "missing".
func TestAmbiguousRequestsAreRefusedAndChangeNothing(t *testing.T) {
	e := queuetest.New(t)
	ctx := context.Background()
	good := e.Dataset("good", 2)
	if _, err := e.Q.Submit(ctx, "alice", api.JobSpec{Dataset: e.Dataset("mine", 1), Command: []string{"x"}, BatchSize: 1}); err != nil {
		t.Fatal(err)
	}
	alice, admin := e.Tokens["alice"], e.Tokens["admin"]
	type hdr = map[string][]string
	do := func(method, path, body string, h hdr) (int, string) {
		t.Helper()
		req, err := http.NewRequest(method, e.URL()+path, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		for k, v := range h {
			req.Header[k] = v
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		var ae api.Error
		json.Unmarshal(b, &ae)
		return resp.StatusCode, ae.Error
	}
	bearer := func(tok string) hdr { return hdr{"Authorization": {"Bearer " + tok}} }
	with := func(h hdr, k string, v ...string) hdr {
		out := hdr{k: v}
		for k2, v2 := range h {
			out[k2] = v2
		}
		return out
	}
	for _, tc := range []struct {
		name, method, path, body string
		h                        hdr
		status                   int
		msg                      string
	}{
		{"an unknown query parameter", "GET", "/v1/jobs?stat=RUNNING", "", bearer(alice), 400, `unknown query parameter "stat"`},
		{"a query parameter on an endpoint that takes none", "GET", "/v1/jobs/1?verbose=1", "", bearer(alice), 400, `unknown query parameter "verbose"`},
		{"a query parameter given twice", "GET", "/v1/jobs?limit=5&limit=100000000", "", bearer(alice), 400, `query parameter "limit" is given 2 times`},
		{"a state given twice", "GET", "/v1/jobs?state=RUNNING&state=DONE", "", bearer(alice), 400, `query parameter "state" is given 2 times`},
		{"a user given twice to the token list", "GET", "/v1/tokens?user=alice&user=bob", "", bearer(alice), 400, `query parameter "user" is given 2 times`},
		{"a malformed query", "GET", "/v1/jobs?limit=%zz", "", bearer(alice), 400, "malformed query"},
		{"an unknown query parameter on a submission", "POST", "/v1/jobs?dry_run=1", jobBody(good, nil), with(bearer(alice), "Content-Type", "application/json"), 400, `unknown query parameter "dry_run"`},
		{"two Authorization headers", "GET", "/v1/whoami", "", hdr{"Authorization": {"Bearer " + alice, "Bearer " + admin}}, 400, "Authorization header is given 2 times"},
		{"two Authorization headers on a submission", "POST", "/v1/jobs", jobBody(good, nil), hdr{"Authorization": {"Bearer " + alice, "Bearer " + admin}, "Content-Type": {"application/json"}}, 400, "Authorization header is given 2 times"},
		{"two Idempotency-Key headers", "POST", "/v1/jobs", jobBody(good, nil), with(bearer(alice), api.HeaderIdempotencyKey, "k1", "k2"), 400, "Idempotency-Key header is given 2 times"},
		{"two Content-Type headers", "POST", "/v1/jobs", jobBody(good, nil), with(bearer(alice), "Content-Type", "application/json", "text/plain"), 400, "Content-Type header is given 2 times"},
		{"a token without its scheme", "GET", "/v1/jobs", "", hdr{"Authorization": {alice}}, 401, `Authorization must be "Bearer TOKEN"`},
		{"another scheme", "GET", "/v1/jobs", "", hdr{"Authorization": {"Basic YWxpY2U6eA=="}}, 401, `Authorization must be "Bearer TOKEN"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := e.Snapshot(t)
			status, msg := do(tc.method, tc.path, tc.body, tc.h)
			if status != tc.status || !strings.Contains(msg, tc.msg) {
				t.Fatalf("got %d %q, want %d containing %q", status, msg, tc.status, tc.msg)
			}
			if after := e.Snapshot(t); after != before {
				t.Fatalf("the request changed stored state:\nbefore:\n%s\nafter:\n%s", before, after)
			}
		})
	}
	// What the API takes is still taken: the scheme in any case, each
	// endpoint's own parameters once.
	for _, tc := range []struct {
		path string
		h    hdr
	}{
		{"/v1/whoami", hdr{"Authorization": {"bearer " + alice}}},
		{"/v1/jobs?state=WAITING&limit=5&cursor=0", bearer(alice)},
		{"/v1/jobs?user=bob", bearer(admin)},
		{"/v1/jobs/1/failures?limit=3&cursor=0", bearer(alice)},
		{"/v1/tokens?user=alice", bearer(alice)},
	} {
		if status, msg := do("GET", tc.path, "", tc.h); status != 200 {
			t.Errorf("GET %s: %d %s, want 200", tc.path, status, msg)
		}
	}
}
