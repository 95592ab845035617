package worker_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/harvest-hpc/harvest/worker"
	"github.com/harvest-hpc/harvest/workerproto"
)

// TestAPulledInEndReachesThePilotAndTheNextRegistration: the master's
// heartbeat answer carries the pilot's new end; the worker passes it to
// the pilot (OnDeadline) and registers with it from then on. A later end
// is not taken.
func TestAPulledInEndReachesThePilotAndTheNextRegistration(t *testing.T) {
	start := time.Now().Truncate(time.Millisecond)
	first, pulledIn := start.Add(time.Hour), start.Add(10*time.Minute)
	var mu sync.Mutex
	beats := 0
	registered := make(chan time.Time, 10)
	master := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		switch r.URL.Path {
		case workerproto.PathRegister:
			var req workerproto.RegisterRequest
			json.NewDecoder(r.Body).Decode(&req)
			registered <- time.UnixMilli(req.Deadline)
			json.NewEncoder(w).Encode(workerproto.RegisterResponse{Epoch: 1})
		case workerproto.PathHeartbeat:
			mu.Lock()
			beats++
			n := beats
			mu.Unlock()
			switch n {
			case 1:
				json.NewEncoder(w).Encode(workerproto.HeartbeatResponse{DeadlineMS: pulledIn.UnixMilli()})
			case 2:
				json.NewEncoder(w).Encode(workerproto.HeartbeatResponse{DeadlineMS: first.UnixMilli()}) // later: ignored
			case 3:
				w.WriteHeader(http.StatusNotFound) // forgotten: the worker registers again
				json.NewEncoder(w).Encode(workerproto.ErrorBody{Error: workerproto.ErrUnknownWorker})
			default:
				json.NewEncoder(w).Encode(workerproto.HeartbeatResponse{})
			}
		case workerproto.PathPull:
			select {
			case <-r.Context().Done():
			case <-time.After(50 * time.Millisecond):
			}
			json.NewEncoder(w).Encode(workerproto.PullResponse{})
		default:
			json.NewEncoder(w).Encode(workerproto.ResultsResponse{})
		}
	}))
	defer master.Close()

	told := make(chan time.Time, 10)
	cfg := worker.DefaultConfig()
	cfg.ID, cfg.PilotID, cfg.Token, cfg.Runner = "w1", "p1", "token", worker.NoopRunner{}
	cfg.Deadline, cfg.HeartbeatInterval, cfg.PullWait = first, 20*time.Millisecond, 50*time.Millisecond
	cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	cfg.OnDeadline = func(d time.Time) { told <- d }
	w, err := worker.New(cfg, func(context.Context) (worker.Endpoint, error) { return worker.Endpoint{URL: master.URL}, nil })
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { w.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()

	wait := func(c chan time.Time, what string) time.Time {
		t.Helper()
		select {
		case v := <-c:
			return v
		case <-time.After(10 * time.Second):
			t.Fatalf("no %s within 10 s", what)
		}
		return time.Time{}
	}
	if d := wait(registered, "registration"); !d.Equal(first) {
		t.Fatalf("registered with deadline %v, want %v", d, first)
	}
	if d := wait(told, "pulled-in end"); !d.Equal(pulledIn) {
		t.Fatalf("told %v, want %v", d, pulledIn)
	}
	if d := wait(registered, "second registration"); !d.Equal(pulledIn) {
		t.Fatalf("registered again with deadline %v, want the pulled-in %v", d, pulledIn)
	}
	select {
	case d := <-told:
		t.Fatalf("told again, %v: a later end must not be taken", d)
	default:
	}
}
