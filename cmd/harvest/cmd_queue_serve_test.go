package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/harvest-hpc/harvest/queue/api"
	"github.com/urfave/cli/v2"
)

// socketGet GETs paths over the Unix socket sock: status and body.
func socketGet(sock string) func(path string) (int, string, error) {
	hc := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", sock)
		}}}
	return func(path string) (int, string, error) {
		resp, err := hc.Get("http://queue" + path)
		if err != nil {
			return 0, "", err
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b), err
	}
}

// runOnSocket runs `harvest ARGV...` in the background, as the CLI runs
// it, and waits (with a 30 s deadline) until GET path on sock satisfies
// ready. stop ends the run and returns its error (also at cleanup).
func runOnSocket(t *testing.T, sock string, argv []string, path string, ready func(code int, body string) bool) (stop func() error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		app := newApp()
		app.Writer, app.ErrWriter = io.Discard, io.Discard
		app.ExitErrHandler = func(*cli.Context, error) {} // the test reads the exit, not os.Exit
		done <- app.RunContext(ctx, append([]string{"harvest"}, argv...))
	}()
	var once sync.Once
	var runErr error
	stop = func() error {
		once.Do(func() {
			cancel()
			select {
			case runErr = <-done:
			case <-time.After(30 * time.Second):
				runErr = errors.New("did not stop within 30 s of its context ending")
			}
		})
		return runErr
	}
	t.Cleanup(func() { stop() })
	get := socketGet(sock)
	deadline := time.Now().Add(30 * time.Second)
	for {
		code, body, err := get(path)
		if err == nil && ready(code, body) {
			return stop
		}
		select {
		case err := <-done:
			done <- err
			t.Fatalf("harvest %s ended before it was ready: %v", argv[0], err)
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("harvest %s was not ready within 30 s: GET %s: %d %v %s", argv[0], path, code, err, body)
		}
	}
}

func httpOK(code int, _ string) bool { return code == http.StatusOK }

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
	stop := runOnSocket(t, sock, []string{"queue", "serve", "--db", filepath.Join(dir, "q.db"), "--socket", sock,
		"--allowed-root", dir, "--pilot-token", "pt", "--log-level", "error"}, "/v1/healthz", httpOK)
	get := socketGet(sock)

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
	if err := stop(); err != nil {
		t.Errorf("queue serve after its context ended: %v", err)
	}
}

// A second queue (or an agent) on a state directory a running queue holds
// is refused before it opens anything, and the refusal names the holder's
// pid (issue 35 item 2). The first keeps serving.
func TestSecondQueueOnTheSameStateDirIsRefused(t *testing.T) {
	dir, err := os.MkdirTemp("", "hql")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	sock := filepath.Join(dir, "q.sock")
	runOnSocket(t, sock, []string{"queue", "serve", "--db", filepath.Join(dir, "queue.db"), "--socket", sock,
		"--allowed-root", dir, "--pilot-token", "pt", "--log-level", "error"}, "/v1/healthz", httpOK)

	wantPid := fmt.Sprintf("pid %d", os.Getpid())
	for _, argv := range [][]string{
		{"harvest", "queue", "serve", "--db", filepath.Join(dir, "queue.db"), "--socket", filepath.Join(dir, "q2.sock"),
			"--allowed-root", dir, "--pilot-token", "pt", "--log-level", "error"},
		{"harvest", "agent", "--state-dir", dir, "--socket", filepath.Join(os.TempDir(), "hql-agent.sock"), "--listen", "",
			"--allowed-root", dir, "--adapter", "sim", "--log-level", "error"},
	} {
		app := newApp()
		app.Writer, app.ErrWriter = io.Discard, io.Discard
		app.ExitErrHandler = func(*cli.Context, error) {} // the test reads the exit, not os.Exit
		var ec cli.ExitCoder
		// Refused at once; one that starts anyway serves until this ends.
		rctx, rcancel := context.WithTimeout(context.Background(), 10*time.Second)
		err := app.RunContext(rctx, argv)
		rcancel()
		if !errors.As(err, &ec) || ec.ExitCode() != 1 || !strings.Contains(err.Error(), wantPid) || !strings.Contains(err.Error(), dir) {
			t.Errorf("%s on a held state directory: %v, want exit 1 naming %s and %s", strings.Join(argv[:3], " "), err, dir, wantPid)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "q2.sock")); err == nil {
		t.Error("the refused queue opened its socket")
	}
	if code, _, err := socketGet(sock)("/v1/healthz"); err != nil || code != http.StatusOK {
		t.Errorf("the first queue stopped answering after the refusals: %d %v", code, err)
	}
}
