package main

import (
	"context"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/harvest-hpc/harvest/queue/api"
)

// `harvest queue serve`, run as the CLI runs it, serves the queue's
// metrics beside its API on the Unix socket (the caller is known by its
// uid), and stops when its context ends.
func TestQueueServeServesItsMetricsOnTheSocket(t *testing.T) {
	dir, err := os.MkdirTemp("", "hqs") // short: socket paths are limited to 108 bytes
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	sock := filepath.Join(dir, "q.sock")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		app := newApp()
		app.Writer, app.ErrWriter = io.Discard, io.Discard
		done <- app.RunContext(ctx, []string{"harvest", "queue", "serve", "--db", filepath.Join(dir, "q.db"), "--socket", sock,
			"--allowed-root", dir, "--pilot-token", "pt", "--log-level", "error"})
	}()
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			cancel()
			<-done
		}
	})

	hc := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", sock)
		}}}
	get := func(path string) (int, string, error) {
		resp, err := hc.Get("http://queue" + path)
		if err != nil {
			return 0, "", err
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b), err
	}
	// Wait for the socket to answer, with a deadline.
	deadline := time.Now().Add(30 * time.Second)
	for {
		if code, _, err := get("/v1/healthz"); err == nil && code == http.StatusOK {
			break
		}
		select {
		case err := <-done:
			stopped = true
			t.Fatalf("queue serve ended before it answered: %v", err)
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatal("queue serve did not answer on its socket within 30 s")
		}
	}

	code, body, err := get(api.PathMetrics)
	if err != nil || code != http.StatusOK {
		t.Fatalf("GET /metrics on the socket: %d %v %s", code, err, body)
	}
	for _, series := range []string{"\nharvest_queue_write_transaction_seconds_count ", "\nharvest_site_alive{site=\"local\"} ", "\nprocess_resident_memory_bytes "} {
		if !strings.Contains(body, series) {
			t.Errorf("/metrics has no %q", strings.TrimSpace(series))
		}
	}
	// The API is still there, behind the same listener.
	if code, body, _ := get("/v1/nothing"); code != http.StatusNotFound || !strings.Contains(body, `"code"`) {
		t.Errorf("GET /v1/nothing: %d %s, want the API's 404", code, body)
	}

	cancel()
	select {
	case err := <-done:
		stopped = true
		if err != nil {
			t.Errorf("queue serve after its context ended: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("queue serve did not stop within 30 s of its context ending")
	}
}
