package master_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/harvest-hpc/harvest/master"
	"github.com/harvest-hpc/harvest/pilotproto"
	"github.com/harvest-hpc/harvest/queue/api"
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
		b := postWorker(t, rm.srv.URL, path, body, 200)
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

// TestWorkerResultsInEitherForm: the master says at registration that it
// reads plain successes as columns, and takes results in either form (an
// older worker's full records, a newer one's columns); a malformed list
// is refused and changes nothing.
func TestWorkerResultsInEitherForm(t *testing.T) {
	e := startQueue(t)
	job := e.submit(t, 3, 3, nil)
	rm := startMaster(t, e.Q, t.TempDir(), "p1", nil, nil)
	call := func(path, body string, want int) []byte {
		t.Helper()
		return postWorker(t, rm.srv.URL, path, body, want)
	}
	var reg workerproto.RegisterResponse
	json.Unmarshal(call(workerproto.PathRegister, `{"worker_id": "w", "pilot_id": "p1", "slots": 1, "capacity": 3}`, 200), &reg)
	if !reg.CompactResults {
		t.Fatalf("the master does not say it reads compact results: %+v", reg)
	}
	var pw workerproto.PullWire
	json.Unmarshal(call(workerproto.PathPull, `{"worker_id": "w", "free": 3, "wait_ms": 5000, "compact": true}`, 200), &pw)
	resp, err := pw.Unpack()
	if err != nil || len(resp.Batches) != 1 || len(resp.Batches[0].Tasks) != 3 {
		t.Fatalf("%+v, %v", resp, err)
	}
	tk := resp.Batches[0].Tasks
	call(workerproto.PathResults, fmt.Sprintf(`{"worker_id": "w", "plain": [{"ids": [%d], "attempts": [1], "started_at": [1], "duration_ms": []}]}`, tk[0].ID), 400)
	call(workerproto.PathResults, fmt.Sprintf(`{"worker_id": "w", "results": [{"task_id": %d, "attempt": 1, "status": "done", "started_at": 1, "duration_ms": 2}]}`, tk[0].ID), 200)
	call(workerproto.PathResults, fmt.Sprintf(`{"worker_id": "w", "plain": [{"pilot": "p1", "ids": [%d, %d], "attempts": [1, 1], "started_at": [1, 0], "duration_ms": [2, 3]}]}`,
		tk[1].ID, tk[2].ID-tk[1].ID), 200)
	waitFor(t, rm.m, "3 results reported", 10*time.Second, func(s master.Stats) bool { return s.Reported == 3 })
	if j := e.job(t, job.ID); j.State != api.JobDone || j.Tasks.Done != 3 {
		t.Fatalf("job %+v, want DONE with 3 done", j)
	}
}

// postWorker posts body to the master at base as a worker does and
// checks the answer's status.
func postWorker(t *testing.T, base, path, body string, want int) []byte {
	t.Helper()
	req, _ := http.NewRequest("POST", base+path, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != want {
		t.Fatalf("%s: %d %s, want %d", path, resp.StatusCode, b, want)
	}
	return b
}
