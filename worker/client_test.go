package worker

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/harvest-hpc/harvest/pilotproto"
	"github.com/harvest-hpc/harvest/workerproto"
)

// post encodes the request itself and decodes the answer from the stream:
// the master sees the JSON and the token, the worker gets the answer, the
// master's errors map to the worker's, and successive calls reuse one
// connection (the answer is read to its end).
func TestClientPostAnswersErrorsAndKeepAlive(t *testing.T) {
	var conns atomic.Int32
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer tok" || r.Header.Get("Content-Type") != "application/json" {
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		var req workerproto.PullRequest
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
			w.WriteHeader(http.StatusBadRequest)
			json.NewEncoder(w).Encode(workerproto.ErrorBody{Error: "bad body: " + err.Error()})
			return
		}
		switch req.WorkerID {
		case "gone":
			w.WriteHeader(http.StatusNotFound)
			json.NewEncoder(w).Encode(workerproto.ErrorBody{Error: workerproto.ErrUnknownWorker})
		case "old":
			w.WriteHeader(http.StatusServiceUnavailable)
			json.NewEncoder(w).Encode(workerproto.ErrorBody{Error: workerproto.ErrNotMaster})
		case "bad":
			w.WriteHeader(http.StatusBadRequest)
			json.NewEncoder(w).Encode(workerproto.ErrorBody{Error: "free and wait_ms must not be negative"})
		default:
			json.NewEncoder(w).Encode(workerproto.PullResponse{
				Batches:  []workerproto.Batch{{ID: 7, Tasks: []pilotproto.Task{{ID: int64(req.Free), JobID: 3, Command: []string{"true"}}}}},
				KillJobs: []int64{9},
			})
		}
	}))
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	srv.Start()
	defer srv.Close()
	c := &client{base: srv.URL + "/", r: newHTTP("tok")}
	ctx := context.Background()
	for i := 1; i <= 3; i++ {
		var resp workerproto.PullResponse
		if err := c.post(ctx, workerproto.PathPull, workerproto.PullRequest{WorkerID: "w", Free: i}, &resp); err != nil {
			t.Fatalf("pull %d: %v", i, err)
		}
		if len(resp.Batches) != 1 || resp.Batches[0].ID != 7 || len(resp.Batches[0].Tasks) != 1 ||
			resp.Batches[0].Tasks[0].ID != int64(i) || len(resp.KillJobs) != 1 || resp.KillJobs[0] != 9 {
			t.Fatalf("pull %d: answer %+v", i, resp)
		}
	}
	var out workerproto.PullResponse
	if err := c.post(ctx, workerproto.PathPull, workerproto.PullRequest{WorkerID: "gone"}, &out); !errors.Is(err, ErrUnknownWorker) {
		t.Errorf("unknown worker: %v, want ErrUnknownWorker", err)
	}
	if err := c.post(ctx, workerproto.PathPull, workerproto.PullRequest{WorkerID: "old"}, &out); !errors.Is(err, ErrNotMaster) {
		t.Errorf("not the master: %v, want ErrNotMaster", err)
	}
	err := c.post(ctx, workerproto.PathPull, workerproto.PullRequest{WorkerID: "bad"}, &out)
	if err == nil || !strings.Contains(err.Error(), "must not be negative") || !strings.Contains(err.Error(), "400") {
		t.Errorf("bad request: %v, want the master's message and status", err)
	}
	if n := conns.Load(); n != 1 {
		t.Errorf("%d connections for 6 sequential calls, want 1 (keep-alive)", n)
	}
	bad := &client{base: srv.URL, r: newHTTP("other")}
	if err := bad.post(ctx, workerproto.PathPull, workerproto.PullRequest{WorkerID: "w"}, &out); err == nil || !strings.Contains(err.Error(), "401") {
		t.Errorf("wrong token: %v, want a 401 error", err)
	}
}

// BenchmarkClientPull is one pull exchange of the worker's client against
// a local server answering 32 tasks (a batch as short tasks bring them):
// the client's CPU and allocations per exchange, not the master's.
func BenchmarkClientPull(b *testing.B) {
	tasks := make([]pilotproto.Task, 32)
	for i := range tasks {
		tasks[i] = pilotproto.Task{ID: int64(i), JobID: int64(i), Owner: "alice", Attempt: 1, Name: "in-1",
			Input: "/data/in-1", Output: "/out/in-1", OutputDir: "/out", Command: []string{"true", "{input}"}, BatchSize: 1, Cores: 1}
	}
	answer, err := json.Marshal(workerproto.PullResponse{Batches: []workerproto.Batch{{ID: 1, Tasks: tasks}}})
	if err != nil {
		b.Fatal(err)
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req workerproto.PullRequest
		json.NewDecoder(r.Body).Decode(&req)
		w.Header().Set("Content-Type", "application/json")
		w.Write(answer)
	}))
	defer srv.Close()
	c := &client{base: srv.URL, r: newHTTP("tok")}
	b.ReportAllocs()
	for b.Loop() {
		var resp workerproto.PullResponse
		if err := c.post(context.Background(), workerproto.PathPull, workerproto.PullRequest{WorkerID: "w", Free: 32, WaitMS: 20000}, &resp); err != nil {
			b.Fatal(err)
		}
		if len(resp.Batches) != 1 || len(resp.Batches[0].Tasks) != 32 {
			b.Fatalf("answer %+v", resp)
		}
	}
}

// A worker sends plain successes as columns only to a master that said
// at registration it reads them: a master older than the worker would
// drop the columns as an unknown field and acknowledge results it never
// stored.
func TestClientSendsCompactResultsOnlyWhenTheMasterReadsThem(t *testing.T) {
	for _, masterReads := range []bool{false, true} {
		var got []map[string]json.RawMessage
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == workerproto.PathRegister {
				json.NewEncoder(w).Encode(workerproto.RegisterResponse{Epoch: 1, CompactResults: masterReads})
				return
			}
			body := map[string]json.RawMessage{}
			json.NewDecoder(r.Body).Decode(&body)
			got = append(got, body)
			json.NewEncoder(w).Encode(workerproto.ResultsResponse{Accepted: 2})
		}))
		c := &client{base: srv.URL, r: newHTTP("tok")}
		ctx := context.Background()
		results := []pilotproto.Result{
			{TaskID: 10, Attempt: 1, Status: pilotproto.StatusDone, StartedAt: 5, DurationMS: 1, Pilot: "p"},
			{TaskID: 11, Attempt: 1, Status: pilotproto.StatusFailed, ExitCode: 2, StartedAt: 6, DurationMS: 1, Pilot: "p"},
		}
		var ans workerproto.ResultsResponse
		// Before registering: in full whatever the master.
		if err := c.post(ctx, workerproto.PathResults, workerproto.ResultsRequest{WorkerID: "w", Results: results}, &ans); err != nil {
			t.Fatal(err)
		}
		var reg workerproto.RegisterResponse
		if err := c.post(ctx, workerproto.PathRegister, workerproto.RegisterRequest{WorkerID: "w", Slots: 1, Capacity: 1}, &reg); err != nil {
			t.Fatal(err)
		}
		if err := c.post(ctx, workerproto.PathResults, workerproto.ResultsRequest{WorkerID: "w", Results: results}, &ans); err != nil {
			t.Fatal(err)
		}
		srv.Close()
		if len(got) != 2 {
			t.Fatalf("master saw %d reports", len(got))
		}
		_, plain0 := got[0]["plain"]
		_, plain1 := got[1]["plain"]
		if plain0 || plain1 != masterReads {
			t.Fatalf("master reads compact results %v: plain lists sent %v then %v", masterReads, plain0, plain1)
		}
		// Either way the master reads every result back.
		for _, body := range got {
			b, _ := json.Marshal(body)
			var w workerproto.ResultsWire
			if err := json.Unmarshal(b, &w); err != nil {
				t.Fatal(err)
			}
			req, err := w.Unpack()
			if err != nil || len(req.Results) != 2 || req.Results[0] != results[0] || req.Results[1] != results[1] {
				t.Fatalf("%s came back as %+v, %v", b, req, err)
			}
		}
	}
}
