package httpapi_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/harvest-hpc/harvest/pilotproto"
	"github.com/harvest-hpc/harvest/queue/api"
	"github.com/harvest-hpc/harvest/queue/queuetest"
)

// post sends body to a pilot endpoint and returns the status and the
// answer's top-level keys and bytes.
func post(t *testing.T, e *queuetest.Env, path, body string) (int, map[string]json.RawMessage, []byte) {
	t.Helper()
	req, _ := http.NewRequest("POST", e.URL()+path, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+e.Tokens["pilot"])
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	keys := map[string]json.RawMessage{}
	json.Unmarshal(b, &keys)
	return resp.StatusCode, keys, b
}

// TestOlderPilotsKeepTheirForms: during a rolling upgrade a pilot older
// than the agent pulls without asking for the compact form and reports
// every result in full; it gets and may send the old forms, and a newer
// pilot's compact forms mean the same to the queue.
func TestOlderPilotsKeepTheirForms(t *testing.T) {
	e := queuetest.New(t)
	ctx := context.Background()
	var jobs []api.Job
	for _, u := range []string{"alice", "bob"} {
		j, err := e.Q.Submit(ctx, u, api.JobSpec{Dataset: e.Dataset("set-"+u, 3), Command: []string{"prog", "{input}"}, BatchSize: 2, Cores: queuetest.Ptr(2)})
		if err != nil {
			t.Fatal(err)
		}
		jobs = append(jobs, j)
	}
	l, err := e.Q.Lease(ctx, pilotproto.LeaseRequest{PilotID: "p1"})
	if err != nil {
		t.Fatal(err)
	}

	// The old form: every task in full.
	code, keys, b := post(t, e, pilotproto.PathPull, fmt.Sprintf(`{"epoch": %d, "max": 2}`, l.Epoch))
	if _, compact := keys["jobs"]; code != 200 || keys["tasks"] == nil || compact {
		t.Fatalf("an older pilot's pull: %d %s", code, b)
	}
	var old pilotproto.PullResponse
	if err := json.Unmarshal(b, &old); err != nil || len(old.Tasks) != 2 || old.Tasks[0].Command == nil || old.Tasks[0].Input == "" {
		t.Fatalf("an older pilot's pull: %v %s", err, b)
	}

	// The compact form: the two users' jobs once each, in fair-share order.
	code, keys, b = post(t, e, pilotproto.PathPull, fmt.Sprintf(`{"epoch": %d, "max": 4, "compact": true}`, l.Epoch))
	if _, full := keys["tasks"]; code != 200 || keys["jobs"] == nil || full {
		t.Fatalf("a newer pilot's pull: %d %s", code, b)
	}
	var w pilotproto.PullWire
	if err := json.Unmarshal(b, &w); err != nil || len(w.Jobs) != 2 {
		t.Fatalf("a newer pilot's pull: %v %s", err, b)
	}
	compact, err := w.Unpack()
	if err != nil || len(compact.Tasks) != 4 {
		t.Fatalf("unpacked %d tasks: %v", len(compact.Tasks), err)
	}
	for _, tk := range append(old.Tasks, compact.Tasks...) {
		j := jobs[slices.IndexFunc(jobs, func(j api.Job) bool { return j.ID == tk.JobID })]
		if tk.Owner != j.Owner || tk.Input != filepath.Join(j.Dataset, tk.Name) || tk.Output != filepath.Join(j.OutputDir, tk.Name) ||
			!slices.Equal(tk.Command, j.Command) || !slices.Equal(tk.Env, pilotproto.TaskEnv(j.ID, tk.ID)) || tk.Cores != 2 || tk.BatchSize != 2 {
			t.Fatalf("task %+v of job %+v", tk, j)
		}
	}

	// Results in both forms, and both in one report.
	by := map[int64][]pilotproto.Task{}
	for _, tk := range append(old.Tasks, compact.Tasks...) {
		by[tk.JobID] = append(by[tk.JobID], tk)
	}
	a, bb := by[jobs[0].ID], by[jobs[1].ID]
	reports := []string{
		// an older pilot: full records
		fmt.Sprintf(`{"epoch": %d, "results": [{"task_id": %d, "attempt": 1, "status": "done", "exit_code": 0, "started_at": 1, "duration_ms": 4000, "pilot": "p1"}]}`, l.Epoch, a[0].ID),
		// the previous release's: a done group and a failure in full
		fmt.Sprintf(`{"epoch": %d, "done": [{"job_id": %d, "pilot": "p1", "ids": [%d], "attempts": [1], "duration_ms": 4000, "started_at": 1}], "results": [{"task_id": %d, "attempt": 1, "status": "failed", "exit_code": 3, "started_at": 1, "duration_ms": 1000, "error_tail": "boom"}]}`,
			l.Epoch, jobs[0].ID, a[1].ID, bb[0].ID),
		// this release's: plain successes as columns
		fmt.Sprintf(`{"epoch": %d, "plain": [{"pilot": "p1", "ids": [%d], "attempts": [1], "started_at": [1], "duration_ms": [2000]}]}`, l.Epoch, a[2].ID),
		// a malformed list: refused, nothing changes
		fmt.Sprintf(`{"epoch": %d, "plain": [{"ids": [%d, 1], "attempts": [1, 1], "started_at": [1, 0], "duration_ms": [2000]}]}`, l.Epoch, bb[1].ID),
	}
	want := []pilotproto.ResultsResponse{{Applied: 1}, {Applied: 2}, {Applied: 1}, {}}
	for i, r := range reports {
		code, _, b := post(t, e, pilotproto.PathResults, r)
		var got pilotproto.ResultsResponse
		if i == 3 {
			if code != 400 {
				t.Fatalf("a malformed list: %d %s, want 400", code, b)
			}
			continue
		}
		if json.Unmarshal(b, &got); code != 200 || got != want[i] {
			t.Fatalf("report %d: %d %s, want %+v", i, code, b, want[i])
		}
	}
	ja, err := e.Q.Job(ctx, "alice", false, jobs[0].ID)
	if err != nil || ja.Tasks.Done != 3 {
		t.Fatalf("alice's job after the reports: %+v %v", ja.Tasks, err)
	}
	users, err := e.Q.Users(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// Usage: cores x duration, whatever the form.
	for _, u := range users {
		if wantCPU := map[string]float64{"alice": 2 * 10, "bob": 2 * 1}[u.Name]; math.Abs(u.CPUTime24h-wantCPU) > 1e-9 {
			t.Fatalf("%s's CPU time %v, want %v", u.Name, u.CPUTime24h, wantCPU)
		}
	}
	// This release's heartbeat names ranges; bob's last two entries, as
	// ranges of consecutive ids, renewed as one range each.
	state := func(id int64) string {
		var st string
		e.QueryRow(`SELECT state FROM tasks WHERE id = $1`, id).Scan(&st)
		return st
	}
	rest := []pilotproto.Result{{TaskID: bb[1].ID, Attempt: 1, Status: pilotproto.StatusDone, DurationMS: 1500, Pilot: "p1"},
		{TaskID: bb[2].ID, Attempt: 1, Status: pilotproto.StatusDone, DurationMS: 2500, Pilot: "p1"}}
	held := pilotproto.PackRanges(pilotproto.RangesOf([]pilotproto.TaskRef{{TaskID: bb[1].ID, Attempt: 1}, {TaskID: bb[2].ID, Attempt: 1}}))
	hb, _ := json.Marshal(pilotproto.HeartbeatRequest{Epoch: l.Epoch, Ranges: &held})
	if code, _, b := post(t, e, pilotproto.PathHeartbeat, string(hb)); code != 200 || !strings.Contains(string(hb), `"ranges"`) {
		t.Fatalf("a heartbeat of ranges %s: %d %s", hb, code, b)
	}
	if s1, s2 := state(bb[1].ID), state(bb[2].ID); s1 != api.TaskRunning || s2 != api.TaskRunning {
		t.Fatalf("after a heartbeat of ranges: %s %s", s1, s2)
	}
	// Their results as ranges, twice: applied once.
	rb, _ := json.Marshal(pilotproto.PackResults(pilotproto.ResultsRequest{Epoch: l.Epoch, Results: rest}))
	for i, want := range []pilotproto.ResultsResponse{{Applied: 2}, {Duplicates: 2}} {
		code, _, b := post(t, e, pilotproto.PathResults, string(rb))
		var got pilotproto.ResultsResponse
		if json.Unmarshal(b, &got); code != 200 || got != want || !strings.Contains(string(rb), `"ranges"`) {
			t.Fatalf("ranges report %d %s: %d %s, want %+v", i, rb, code, b, want)
		}
	}
	if u, err := e.Q.User(ctx, "bob"); err != nil || math.Abs(u.CPUTime24h-2*(1+4)) > 1e-9 {
		t.Fatalf("bob's CPU time %v (%v), want %v", u.CPUTime24h, err, 2*(1+4))
	}
	// A report repeated in the other form is a duplicate.
	code, _, b = post(t, e, pilotproto.PathResults, fmt.Sprintf(`{"epoch": %d, "done": [{"job_id": %d, "ids": [%d], "attempts": [1], "duration_ms": 4000, "started_at": 1}]}`, l.Epoch, jobs[0].ID, a[0].ID))
	var dup pilotproto.ResultsResponse
	if json.Unmarshal(b, &dup); code != 200 || dup != (pilotproto.ResultsResponse{Duplicates: 1}) {
		t.Fatalf("a repeated report: %d %s", code, b)
	}
}
