package client

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/harvest-hpc/harvest/pilotproto"
	"github.com/harvest-hpc/harvest/queue/api"
)

// flaky answers 503 for the first n requests, then 200 with body.
func flaky(n int32, body string) (*httptest.Server, *atomic.Int32) {
	var calls atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		if calls.Add(1) <= n {
			w.WriteHeader(http.StatusServiceUnavailable)
			w.Write([]byte(`{"error":"queue closed"}`))
			return
		}
		w.Write([]byte(body))
	}))
	return srv, &calls
}

func newTestClient(t *testing.T, url string) *Client {
	cfg := DefaultConfig()
	cfg.URL, cfg.Token, cfg.RetryFor = url, "tok", 5*time.Second
	c, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestIdempotentCallsAreRetriedOthersAreNot(t *testing.T) {
	ctx := context.Background()
	t.Run("results are retried through 5xx answers", func(t *testing.T) {
		srv, calls := flaky(2, `{"applied":1,"duplicates":0}`)
		defer srv.Close()
		r, err := newTestClient(t, srv.URL).Results(ctx, pilotproto.ResultsRequest{Epoch: 1})
		if err != nil || r.Applied != 1 || calls.Load() != 3 {
			t.Fatalf("got %+v %v after %d calls", r, err, calls.Load())
		}
	})
	t.Run("a pull is never retried", func(t *testing.T) {
		srv, calls := flaky(1, `{"tasks":[]}`)
		defer srv.Close()
		_, err := newTestClient(t, srv.URL).Pull(ctx, pilotproto.PullRequest{Epoch: 1, Max: 1})
		if err == nil || calls.Load() != 1 {
			t.Fatalf("pull: %v after %d calls", err, calls.Load())
		}
	})
	t.Run("a submit is retried with the same idempotency key", func(t *testing.T) {
		var calls atomic.Int32
		var keys []string
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			keys = append(keys, r.Header.Get(api.HeaderIdempotencyKey))
			if calls.Add(1) == 1 {
				panic(http.ErrAbortHandler) // the connection dies without an answer
			}
			w.Header().Set("Content-Type", api.ContentTypeNDJSON)
			w.Write([]byte(`{"progress":{"phase":"storing","entries":2,"stored":1}}` + "\n" + `{"job":{"id":7,"state":"WAITING"}}` + "\n"))
		}))
		defer srv.Close()
		var progress []api.SubmitProgress
		j, err := newTestClient(t, srv.URL).SubmitWith(ctx, api.JobSpec{}, SubmitOptions{Progress: func(p api.SubmitProgress) { progress = append(progress, p) }})
		if err != nil || j.ID != 7 || calls.Load() != 2 {
			t.Fatalf("submit: %+v %v after %d calls", j, err, calls.Load())
		}
		if keys[0] == "" || keys[0] != keys[1] {
			t.Fatalf("idempotency keys %q: want one key, sent with every try", keys)
		}
		if len(progress) != 1 || progress[0].Stored != 1 {
			t.Fatalf("progress %+v", progress)
		}
	})
	t.Run("a submit refused with a 4xx is not retried", func(t *testing.T) {
		var calls atomic.Int32
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			calls.Add(1)
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusBadRequest)
			w.Write([]byte(`{"error":"invalid request: dataset is required","code":"invalid"}`))
		}))
		defer srv.Close()
		_, err := newTestClient(t, srv.URL).Submit(ctx, api.JobSpec{})
		if !errors.Is(err, api.ErrInvalid) || calls.Load() != 1 {
			t.Fatalf("submit: %v after %d calls", err, calls.Load())
		}
	})
	// A queue whose disk was full answered 500 at once, every time: each
	// answer counted as a sign of life and reset the back-off, so harvest
	// submit asked again every 200 ms for ever, saying nothing.
	for _, c := range []struct{ name, contentType, body string }{
		{"a submit the queue keeps failing with a 5xx ends after RetryFor", "application/json",
			`{"error":"store job: commit: database or disk is full","code":"internal"}`},
		{"a streamed 5xx error is no sign of life either", api.ContentTypeNDJSON,
			`{"error":"store tasks of job 1: commit: database or disk is full","code":"internal"}` + "\n"},
	} {
		t.Run(c.name, func(t *testing.T) {
			var calls atomic.Int32
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				calls.Add(1)
				w.Header().Set("Content-Type", c.contentType)
				if c.contentType != api.ContentTypeNDJSON {
					w.WriteHeader(http.StatusInternalServerError)
				}
				w.Write([]byte(c.body))
			}))
			defer srv.Close()
			cfg := DefaultConfig()
			cfg.URL, cfg.RetryFor = srv.URL, time.Second
			cl, _ := New(cfg)
			guard, cancel := context.WithTimeout(ctx, 20*time.Second)
			defer cancel()
			_, err := cl.Submit(guard, api.JobSpec{})
			var e *Error
			if !errors.As(err, &e) || e.Status != 500 || guard.Err() != nil {
				t.Fatalf("submit: %v after %d calls, want the queue's 500 once RetryFor has passed", err, calls.Load())
			}
		})
	}
	t.Run("a queue that falls silent is asked again", func(t *testing.T) {
		var calls atomic.Int32
		release := make(chan struct{})
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", api.ContentTypeNDJSON)
			if calls.Add(1) == 1 {
				w.WriteHeader(http.StatusOK)
				w.(http.Flusher).Flush()
				<-release // silent: no progress, no end
				return
			}
			w.Write([]byte(`{"job":{"id":9}}` + "\n"))
		}))
		defer srv.Close()
		defer close(release)
		cfg := DefaultConfig()
		cfg.URL, cfg.Timeout, cfg.RetryFor = srv.URL, 200*time.Millisecond, 5*time.Second
		c, _ := New(cfg)
		j, err := c.Submit(ctx, api.JobSpec{})
		if err != nil || j.ID != 9 || calls.Load() != 2 {
			t.Fatalf("submit: %+v %v after %d calls", j, err, calls.Load())
		}
	})
	t.Run("a 4xx is not retried and maps onto its sentinel", func(t *testing.T) {
		var calls atomic.Int32
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			calls.Add(1)
			if r.Header.Get("Authorization") != "Bearer tok" {
				t.Errorf("no bearer token sent")
			}
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusConflict)
			w.Write([]byte(`{"error":"stale epoch: epoch 1 is older than the current epoch 2","code":"stale_epoch"}`))
		}))
		defer srv.Close()
		_, err := newTestClient(t, srv.URL).Heartbeat(ctx, pilotproto.HeartbeatRequest{Epoch: 1})
		if !errors.Is(err, api.ErrStaleEpoch) || errors.Is(err, api.ErrLeaseExpired) || calls.Load() != 1 {
			t.Fatalf("heartbeat: %v after %d calls", err, calls.Load())
		}
		var e *Error
		if !errors.As(err, &e) || e.Status != 409 || e.Message == "" {
			t.Fatalf("error detail: %#v", err)
		}
	})
}

func TestErrorsMapByCodeNotByMessage(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name, body string
		status     int
		want, not  error
	}{
		{"the code decides, whatever the message says", `{"error":"stale epoch?","code":"lease_expired"}`, 409, api.ErrLeaseExpired, api.ErrStaleEpoch},
		{"a 409 without a code is a plain conflict", `{"error":"stale epoch"}`, 409, api.ErrConflict, api.ErrStaleEpoch},
		{"an unknown code falls back on the status", `{"error":"x","code":"from_the_future"}`, 404, api.ErrNotFound, api.ErrInvalid},
		{"a body that is not JSON maps by status", `<html>bad gateway</html>`, 403, api.ErrForbidden, api.ErrNotFound},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(tc.status)
				w.Write([]byte(tc.body))
			}))
			defer srv.Close()
			_, err := newTestClient(t, srv.URL).Job(ctx, 1)
			if !errors.Is(err, tc.want) || errors.Is(err, tc.not) {
				t.Fatalf("got %v: want it to be %v and not %v", err, tc.want, tc.not)
			}
		})
	}
}

func TestConfigValidate(t *testing.T) {
	for _, tc := range []struct {
		name string
		url  string
		ok   bool
	}{
		{"the default socket is valid", "unix:///run/harvest/queue.sock", true},
		{"an http URL is valid", "http://head:8080", true},
		{"an https URL is valid", "https://head", true},
		{"a unix URL without a path is refused", "unix://", false},
		{"an ftp URL is refused", "ftp://head", false},
		{"an http URL without a host is refused", "http://", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := DefaultConfig()
			cfg.URL = tc.url
			if err := cfg.Validate(); (err == nil) != tc.ok {
				t.Fatalf("Validate(%q) = %v", tc.url, err)
			}
		})
	}
}
