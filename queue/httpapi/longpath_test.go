package httpapi_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/harvest-hpc/harvest/queue/api"
	"github.com/harvest-hpc/harvest/queue/queuetest"
)

// A dataset or output path longer than the kernel takes (PATH_MAX, 4096
// bytes) is refused at once with a short error that says so, and changes
// nothing. An output of 200,000 components ("a/a/a/...", 400 KB in a
// 1 MiB body) kept one submission busy for over ten minutes (each
// missing component was joined onto the rest again, quadratic), and every
// refusal quoted the whole path back, twice.
func TestAPathLongerThanPathMaxIsRefusedAtOnce(t *testing.T) {
	e := queuetest.New(t)
	ds := e.Dataset("d", 1)
	long := e.Data + "/" + strings.Repeat("a/", 20000)
	before := e.Snapshot(t)
	for _, tc := range []struct{ name, body string }{
		{"a long dataset", jobBody(long, nil)},
		{"a long output", jobBody(ds, func(m map[string]any) { m["output"] = long })},
	} {
		code, msg := e.Raw("POST", api.PathJobs, "alice", tc.body)
		if code != http.StatusBadRequest || !strings.Contains(msg, "at most 4096 bytes") || len(msg) > 1000 {
			t.Errorf("%s: %d, a %d-byte error %.200q; want a 400 under 1000 bytes saying at most 4096", tc.name, code, len(msg), msg)
		}
	}
	if after := e.Snapshot(t); after != before {
		t.Errorf("a refused submission changed the database:\n%s", after)
	}
}
