package client

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	"github.com/harvest-hpc/harvest/pilotproto"
	"github.com/harvest-hpc/harvest/queue/api"
)

// agentServer answers every request with status and body, counting them.
func agentServer(status int, body string) (*httptest.Server, *atomic.Int32) {
	var calls atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		w.Write([]byte(body))
	}))
	return srv, &calls
}

// deadURL is the URL of a server that is gone: its connections are refused.
func deadURL() string {
	srv := httptest.NewServer(http.NotFoundHandler())
	srv.Close()
	return srv.URL
}

func TestURLs(t *testing.T) {
	got := URLs(" http://a:1 ,,http://b:2,http://a:1, ")
	if len(got) != 2 || got[0] != "http://a:1" || got[1] != "http://b:2" {
		t.Fatalf("URLs: %q", got)
	}
	for _, bad := range []string{"", " , ", "http://a:1,ftp://b", "http://a:1,http://"} {
		cfg := DefaultConfig()
		cfg.URL = bad
		if _, err := New(cfg); err == nil {
			t.Errorf("New(%q): no error", bad)
		}
	}
}

func TestFailoverToTheNextAgent(t *testing.T) {
	ctx := context.Background()
	t.Run("a refused connection moves to the next URL and stays there", func(t *testing.T) {
		b, calls := agentServer(200, `{"granted":true,"epoch":3}`)
		defer b.Close()
		c := newTestClient(t, deadURL()+","+b.URL)
		for range 3 {
			l, err := c.Lease(ctx, pilotproto.LeaseRequest{PilotID: "1"})
			if err != nil || l.Epoch != 3 {
				t.Fatalf("lease %+v %v", l, err)
			}
		}
		if calls.Load() != 3 || c.URL() != b.URL {
			t.Fatalf("b got %d calls, current URL %s", calls.Load(), c.URL())
		}
	})
	t.Run("a 5xx moves an idempotent call to the next URL", func(t *testing.T) {
		a, aCalls := agentServer(503, `{"error":"queue closed"}`)
		defer a.Close()
		b, bCalls := agentServer(200, `{"applied":1,"duplicates":0}`)
		defer b.Close()
		r, err := newTestClient(t, a.URL+","+b.URL).Results(ctx, pilotproto.ResultsRequest{Epoch: 1})
		if err != nil || r.Applied != 1 || aCalls.Load() != 1 || bCalls.Load() != 1 {
			t.Fatalf("results %+v %v; a %d calls, b %d", r, err, aCalls.Load(), bCalls.Load())
		}
	})
	t.Run("a 4xx is the answer: no other URL is tried", func(t *testing.T) {
		a, aCalls := agentServer(409, `{"error":"stale epoch","code":"stale_epoch"}`)
		defer a.Close()
		b, bCalls := agentServer(200, `{"applied":1}`)
		defer b.Close()
		_, err := newTestClient(t, a.URL+","+b.URL).Results(ctx, pilotproto.ResultsRequest{Epoch: 1})
		if !errors.Is(err, api.ErrStaleEpoch) || aCalls.Load() != 1 || bCalls.Load() != 0 {
			t.Fatalf("results: %v; a %d calls, b %d", err, aCalls.Load(), bCalls.Load())
		}
	})
	t.Run("a pull moves on only when its connection was never made", func(t *testing.T) {
		b, bCalls := agentServer(200, `{"tasks":[]}`)
		defer b.Close()
		if _, err := newTestClient(t, deadURL()+","+b.URL).Pull(ctx, pilotproto.PullRequest{Epoch: 1, Max: 1}); err != nil || bCalls.Load() != 1 {
			t.Fatalf("pull after a refused connection: %v, b %d calls", err, bCalls.Load())
		}
		a, aCalls := agentServer(503, `{"error":"queue closed"}`)
		defer a.Close()
		if _, err := newTestClient(t, a.URL+","+b.URL).Pull(ctx, pilotproto.PullRequest{Epoch: 1, Max: 1}); err == nil || aCalls.Load() != 1 || bCalls.Load() != 1 {
			t.Fatalf("pull after a 5xx (it may have been applied): %v, a %d calls, b %d", err, aCalls.Load(), bCalls.Load())
		}
	})
	t.Run("a submit cut mid-answer is retried at the next URL with its key", func(t *testing.T) {
		var keys []string
		var mu atomic.Int32
		cut := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			mu.Add(1)
			keys = append(keys, r.Header.Get(api.HeaderIdempotencyKey))
			panic(http.ErrAbortHandler)
		}))
		defer cut.Close()
		b := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			keys = append(keys, r.Header.Get(api.HeaderIdempotencyKey))
			w.Header().Set("Content-Type", api.ContentTypeNDJSON)
			w.Write([]byte(`{"job":{"id":9,"state":"WAITING"}}` + "\n"))
		}))
		defer b.Close()
		j, err := newTestClient(t, cut.URL+","+b.URL).Submit(ctx, api.JobSpec{})
		if err != nil || j.ID != 9 || mu.Load() != 1 || len(keys) != 2 || keys[0] == "" || keys[0] != keys[1] {
			t.Fatalf("submit %+v %v; keys %q", j, err, keys)
		}
	})
}
