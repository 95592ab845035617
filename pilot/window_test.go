package pilot_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/harvest-hpc/harvest/master"
	"github.com/harvest-hpc/harvest/pilotproto"
	"github.com/harvest-hpc/harvest/workerproto"
)

// heldLease holds the first lease request at the queue's door until let
// is closed: the queue has not granted it yet, but a worker already
// knocks at the pilot (in a real failover the grant is written and other
// pilots read the new address before the answer reaches the winner).
type heldLease struct {
	master.Queue
	once  sync.Once
	asked chan struct{}
	let   chan struct{}
}

func (h *heldLease) Lease(ctx context.Context, r pilotproto.LeaseRequest) (pilotproto.Lease, error) {
	first := false
	h.once.Do(func() { first = true })
	if first {
		close(h.asked)
		<-h.let
	}
	return h.Queue.Lease(ctx, r)
}

// TestAWorkerReachingAPilotWhoseLeaseRequestIsOnItsWayWaits: a worker that
// reaches a pilot while the pilot's lease request is on its way is served
// once the pilot is master, not turned away with "not the master" (which
// sends it back to the lease for a backoff of about half a second, a pause
// in its completions at every failover).
func TestAWorkerReachingAPilotWhoseLeaseRequestIsOnItsWayWaits(t *testing.T) {
	r := startQueue(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	cfg := fastPilot(r, "p1", 2)
	cfg.Listen = addr
	q := &heldLease{Queue: r.pilot, asked: make(chan struct{}), let: make(chan struct{})}
	startPilot(t, cfg, q)
	select {
	case <-q.asked:
	case <-time.After(10 * time.Second):
		t.Fatal("the pilot never asked for the lease")
	}
	body, _ := json.Marshal(workerproto.RegisterRequest{WorkerID: "w9", PilotID: "p9", Slots: 1, Capacity: 1})
	req, _ := http.NewRequest(http.MethodPost, "http://"+addr+workerproto.PathRegister, bytes.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+pilotToken)
	req.Header.Set("Content-Type", "application/json")
	type answer struct {
		code int
		body string
		err  error
	}
	got := make(chan answer, 1)
	go func() {
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			got <- answer{err: err}
			return
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		got <- answer{code: resp.StatusCode, body: string(b)}
	}()
	// Before the lease is granted the worker has no answer: without the
	// wait it had "not the master" at once.
	select {
	case a := <-got:
		close(q.let)
		t.Fatalf("answered before the pilot's lease request was: %d %s %v", a.code, a.body, a.err)
	case <-time.After(300 * time.Millisecond):
	}
	close(q.let)
	select {
	case a := <-got:
		if a.err != nil || a.code != http.StatusOK {
			t.Fatalf("registration: %d %s %v, want it served by the new master", a.code, a.body, a.err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("no answer after the lease was granted")
	}
}
