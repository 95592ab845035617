package httpapi_test

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/harvest-hpc/harvest/queue/api"
	"github.com/harvest-hpc/harvest/queue/queuetest"
)

// A job whose output directory is its dataset, or inside it, was
// accepted: each task's output path (OUTPUT/name) was then its own input
// (DATASET/name), or a path inside another entry, so the tasks wrote over
// the dataset. It is refused, through a link too, and nothing is stored.
func TestAnOutputDirectoryInItsDatasetIsRefused(t *testing.T) {
	e := queuetest.New(t)
	ds := e.Dataset("ds", 3)
	if err := os.Symlink(ds, filepath.Join(e.Data, "ds-link")); err != nil {
		t.Fatal(err)
	}
	before := e.Snapshot(t)
	for _, out := range []string{ds, ds + "/", filepath.Join(ds, "e00001"), filepath.Join(ds, "new", "out"), filepath.Join(e.Data, "ds-link"), filepath.Join(e.Data, "ds-link", "out")} {
		body := fmt.Sprintf(`{"dataset":%q,"command":["prog","{input}","{output}"],"batch_size":1,"output":%q}`, ds, out)
		code, msg := e.Raw("POST", api.PathJobs, "alice", body)
		if code != http.StatusBadRequest || !strings.Contains(msg, "inside the dataset") {
			t.Errorf("output %s: %d %q, want 400 saying it is inside the dataset", out, code, msg)
		}
	}
	if after := e.Snapshot(t); after != before {
		t.Fatalf("a refused submission changed the database:\n%s", after)
	}
	if _, err := os.Stat(filepath.Join(ds, "new")); !os.IsNotExist(err) {
		t.Errorf("a refused submission made its output directory: %v", err)
	}
	// Beside the dataset is fine, and so is its parent (OUTPUT/name is
	// not an entry there).
	for _, out := range []string{filepath.Join(e.Data, "ds-out"), e.Data} {
		body := fmt.Sprintf(`{"dataset":%q,"command":["prog","{input}","{output}"],"batch_size":1,"output":%q}`, ds, out)
		if code, msg := e.Raw("POST", api.PathJobs, "alice", body); code != http.StatusCreated {
			t.Errorf("output %s: %d %q, want 201", out, code, msg)
		}
	}
}
