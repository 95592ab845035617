package master_test

import (
	"encoding/json"
	"io"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/harvest-hpc/harvest/pilotproto"
	"github.com/harvest-hpc/harvest/workerproto"
)

// TestWorkersOfEitherVersionGetTheirForm: in a pool mid-upgrade a worker
// older than the master pulls without asking for the compact form and
// gets its batches with every task in full; a newer one gets the job's
// fields once per batch. PullWire reads both.
func TestWorkersOfEitherVersionGetTheirForm(t *testing.T) {
	e := startQueue(t)
	jobs := map[int64]bool{}
	for range 2 {
		jobs[e.submit(t, 3, 3, nil).ID] = true
	}
	rm := startMaster(t, e.Q, t.TempDir(), "p1", nil, nil)
	call := func(path, body string) (map[string]json.RawMessage, []byte) {
		t.Helper()
		req, _ := http.NewRequest("POST", rm.srv.URL+path, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != 200 {
			t.Fatalf("%s: %d %s", path, resp.StatusCode, b)
		}
		keys := map[string]json.RawMessage{}
		json.Unmarshal(b, &keys)
		return keys, b
	}
	var got []pilotproto.Task
	for _, w := range []struct {
		id      string
		compact bool
	}{{"old", false}, {"new", true}} {
		call(workerproto.PathRegister, `{"worker_id": "`+w.id+`", "pilot_id": "p1", "slots": 1, "capacity": 3}`)
		pull := `{"worker_id": "` + w.id + `", "free": 3, "wait_ms": 5000}`
		if w.compact {
			pull = `{"worker_id": "` + w.id + `", "free": 3, "wait_ms": 5000, "compact": true}`
		}
		_, b := call(workerproto.PathPull, pull)
		var raw struct {
			Batches []map[string]json.RawMessage `json:"batches"`
		}
		if err := json.Unmarshal(b, &raw); err != nil || len(raw.Batches) != 1 {
			t.Fatalf("worker %s: %v %s", w.id, err, b)
		}
		_, full := raw.Batches[0]["tasks"]
		_, compact := raw.Batches[0]["jobs"]
		if full == w.compact || compact != w.compact {
			t.Fatalf("worker %s (compact %v) got %s", w.id, w.compact, b)
		}
		var pw workerproto.PullWire
		if err := json.Unmarshal(b, &pw); err != nil {
			t.Fatal(err)
		}
		resp, err := pw.Unpack()
		if err != nil || len(resp.Batches) != 1 || len(resp.Batches[0].Tasks) != 3 {
			t.Fatalf("worker %s: %v %+v", w.id, err, resp)
		}
		got = append(got, resp.Batches[0].Tasks...)
	}
	seen := map[int64]bool{}
	for _, tk := range got {
		j := e.job(t, tk.JobID)
		if !jobs[tk.JobID] || seen[tk.ID] || tk.Input != filepath.Join(j.Dataset, tk.Name) || tk.Output != filepath.Join(j.OutputDir, tk.Name) ||
			!slices.Equal(tk.Command, j.Command) || !slices.Equal(tk.Env, pilotproto.TaskEnv(j.ID, tk.ID)) {
			t.Fatalf("task %+v of job %+v", tk, j)
		}
		seen[tk.ID] = true
	}
}
