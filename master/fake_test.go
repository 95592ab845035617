package master_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/harvest-hpc/harvest/master"
	"github.com/harvest-hpc/harvest/pilotproto"
	"github.com/harvest-hpc/harvest/workerproto"
)

// FakeQueue is a Queue whose calls are closures; nil closures answer
// empty and succeed. It keeps none of the queue's rules: it injects
// answers (faults) into the driver; the rules are the real queue's
// (pilotproto/queuetest).
type FakeQueue struct {
	LeaseFunc     func(pilotproto.LeaseRequest) (pilotproto.Lease, error)
	PullFunc      func(pilotproto.PullRequest) (pilotproto.PullResponse, error)
	ResultsFunc   func(pilotproto.ResultsRequest) (pilotproto.ResultsResponse, error)
	HeartbeatFunc func(pilotproto.HeartbeatRequest) (pilotproto.HeartbeatResponse, error)
	RecommendFunc func(pilotproto.RecommendationRequest) error
}

var _ master.Queue = (*FakeQueue)(nil)

func (f *FakeQueue) Lease(_ context.Context, r pilotproto.LeaseRequest) (pilotproto.Lease, error) {
	if f.LeaseFunc == nil {
		return pilotproto.Lease{Granted: true, Epoch: r.Epoch}, nil
	}
	return f.LeaseFunc(r)
}
func (f *FakeQueue) Pull(_ context.Context, r pilotproto.PullRequest) (pilotproto.PullResponse, error) {
	if f.PullFunc == nil {
		return pilotproto.PullResponse{}, nil
	}
	return f.PullFunc(r)
}
func (f *FakeQueue) Results(_ context.Context, r pilotproto.ResultsRequest) (pilotproto.ResultsResponse, error) {
	if f.ResultsFunc == nil {
		return pilotproto.ResultsResponse{Applied: len(r.Results)}, nil
	}
	return f.ResultsFunc(r)
}
func (f *FakeQueue) Heartbeat(_ context.Context, r pilotproto.HeartbeatRequest) (pilotproto.HeartbeatResponse, error) {
	if f.HeartbeatFunc == nil {
		return pilotproto.HeartbeatResponse{}, nil
	}
	return f.HeartbeatFunc(r)
}
func (f *FakeQueue) Recommend(_ context.Context, r pilotproto.RecommendationRequest) error {
	if f.RecommendFunc == nil {
		return nil
	}
	return f.RecommendFunc(r)
}

func runFake(t *testing.T, f *FakeQueue) (*master.Master, chan error, context.CancelFunc) {
	t.Helper()
	cfg := fastMasterConfig(t.TempDir(), "p1", 3)
	m, err := master.New(cfg, f)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- m.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done; done <- nil })
	return m, done, cancel
}

func TestQueueStaleEpochStopsTheMaster(t *testing.T) {
	f := &FakeQueue{HeartbeatFunc: func(pilotproto.HeartbeatRequest) (pilotproto.HeartbeatResponse, error) {
		return pilotproto.HeartbeatResponse{}, master.ErrStaleEpoch
	}}
	m, done, _ := runFake(t, f)
	select {
	case err := <-done:
		done <- err
		if !errors.Is(err, master.ErrStaleEpoch) {
			t.Fatalf("master ended with %v, want ErrStaleEpoch", err)
		}
	case <-time.After(3 * time.Second):
		t.Fatal("master kept running after the queue said its epoch is stale")
	}
	if _, err := m.Register(context.Background(), workerproto.RegisterRequest{WorkerID: "w", Slots: 1, Capacity: 1}); !errors.Is(err, master.ErrNotMaster) {
		t.Fatalf("a stopped master accepted a worker: %v", err)
	}
}

func TestBadWorkerRequestsAreRefusedWithoutChangingState(t *testing.T) {
	m, _, _ := runFake(t, &FakeQueue{})
	srv := httptest.NewServer(m.Handler())
	defer srv.Close()
	cases := []struct {
		name, path, token, body string
		status                  int
	}{
		{"a request without the pilot token is refused", workerproto.PathRegister, "", `{"worker_id":"w","slots":1,"capacity":1}`, 401},
		{"a request with a wrong token is refused", workerproto.PathRegister, "nope", `{"worker_id":"w","slots":1,"capacity":1}`, 401},
		{"a worker without id is refused", workerproto.PathRegister, token, `{"slots":1,"capacity":1}`, 400},
		{"a worker without slots is refused", workerproto.PathRegister, token, `{"worker_id":"w","capacity":1}`, 400},
		{"a capacity below the slots is refused", workerproto.PathRegister, token, `{"worker_id":"w","slots":4,"capacity":2}`, 400},
		{"a body that is not JSON is refused", workerproto.PathRegister, token, `{"worker_id":`, 400},
		{"a result with an unknown status is refused", workerproto.PathResults, token, `{"worker_id":"w","results":[{"task_id":1,"attempt":1,"status":"great"}]}`, 400},
		{"a malformed results report is refused", workerproto.PathResults, token, `{"worker_id":"w","results":[{"task_id":1,`, 400},
		{"a result with a fractional attempt is refused", workerproto.PathResults, token, `{"worker_id":"w","results":[{"task_id":1,"attempt":0.5,"status":"done"}]}`, 400},
		{"a result with a task id past int64 is refused", workerproto.PathResults, token, `{"worker_id":"w","results":[{"task_id":99999999999999999999,"attempt":1,"status":"done"}]}`, 400},
		{"a results report without worker id is refused", workerproto.PathResults, token, `{"results":[]}`, 400},
		{"a pull from an unregistered worker asks it to register", workerproto.PathPull, token, `{"worker_id":"ghost","free":1}`, 404},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			req, _ := http.NewRequest(http.MethodPost, srv.URL+tc.path, strings.NewReader(tc.body))
			if tc.token != "" {
				req.Header.Set("Authorization", "Bearer "+tc.token)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			var eb workerproto.ErrorBody
			json.NewDecoder(resp.Body).Decode(&eb)
			if resp.StatusCode != tc.status || eb.Error == "" {
				t.Fatalf("status %d error %q, want %d with a JSON error", resp.StatusCode, eb.Error, tc.status)
			}
		})
	}
	if st := m.Stats(); st.Workers != 0 || st.Assigned != 0 {
		t.Fatalf("refused requests changed the master: %+v", st)
	}
}
