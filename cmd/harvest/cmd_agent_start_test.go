package main

import (
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/harvest-hpc/harvest/queue/api"
)

// Issue 35 item 5: with a batch system that answers garbage at start, the
// agent does not exit: its queue comes up (users can submit and look at
// their jobs), and /status and /metrics say the batch system is
// unreachable and since when, while the agent keeps retrying.
func TestTheAgentsQueueServesWhileTheBatchSystemAnswersGarbage(t *testing.T) {
	dir, err := os.MkdirTemp("", "has") // short: socket paths are limited
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	bin := filepath.Join(dir, "bin")
	os.MkdirAll(bin, 0o755)
	for _, name := range []string{"sinfo", "squeue", "scontrol", "sbatch", "scancel"} {
		if err := os.WriteFile(filepath.Join(bin, name), []byte("#!/bin/sh\necho 'garbage from a broken slurm'\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	data := filepath.Join(dir, "data")
	os.MkdirAll(data, 0o755)
	sock := filepath.Join(dir, "q.sock")
	app := newApp()
	var errOut bytes.Buffer
	app.Writer, app.ErrWriter = io.Discard, &errOut
	app.ExitErrHandler = func(*cli.Context, error) {}
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- app.RunContext(ctx, []string{"harvest", "agent", "--state-dir", filepath.Join(dir, "state"), "--allowed-root", data,
			"--socket", sock, "--listen", "", "--adapter", "slurm", "--adapter-in-process",
			"--adapter-opt", "bin_dir=" + bin, "--poll", "50ms", "--log-level", "error"})
	}()
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			stop()
			<-done
		}
	})
	hc := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", sock)
		}}}
	get := func(path string) (int, string) {
		resp, err := hc.Get("http://queue" + path)
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	// Wait, with a deadline, until the status page says why the batch
	// system is not used (the first Info has failed by then).
	deadline := time.Now().Add(30 * time.Second)
	for {
		code, body := get(api.PathStatus)
		if code == http.StatusOK && strings.Contains(body, "batch system unreachable since") {
			if !strings.Contains(body, "garbage from a broken slurm") {
				t.Errorf("/status does not say why the batch system is unreachable:\n%s", body)
			}
			break
		}
		select {
		case err := <-done:
			stopped = true
			t.Fatalf("the agent ended while the batch system answered garbage: %v\n%s", err, errOut.String())
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("/status did not say the batch system is unreachable within 30 s: %d %s", code, body)
		}
	}
	if code, body := get("/v1/healthz"); code != http.StatusOK {
		t.Errorf("queue health while the batch system is down: %d %s", code, body)
	}
	code, body := get(api.PathMetrics)
	if code != http.StatusOK || !strings.Contains(body, "\nharvest_batch_system_up 0\n") ||
		strings.Contains(body, "\nharvest_batch_system_unreachable_since_timestamp_seconds 0\n") {
		t.Errorf("/metrics does not show the batch system down: %d\n%s", code, body)
	}
	stop()
	select {
	case err := <-done:
		stopped = true
		if err != nil {
			t.Errorf("agent stopped while waiting for the batch system: %v, want a clean stop", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the agent did not stop within 30 s of its context ending")
	}
}
