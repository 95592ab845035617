package main

import (
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

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
	// Ready when the status page says why the batch system is not used
	// (the first Info has failed by then).
	stop := runOnSocket(t, sock, []string{"agent", "--state-dir", filepath.Join(dir, "state"), "--allowed-root", data,
		"--socket", sock, "--listen", "", "--adapter", "slurm", "--adapter-in-process",
		"--adapter-opt", "bin_dir=" + bin, "--poll", "50ms", "--log-level", "error"},
		api.PathStatus, func(code int, body string) bool {
			return code == http.StatusOK && strings.Contains(body, "batch system unreachable since")
		})
	get := socketGet(sock)
	if _, body, _ := get(api.PathStatus); !strings.Contains(body, "garbage from a broken slurm") {
		t.Errorf("/status does not say why the batch system is unreachable:\n%s", body)
	}
	if code, _, err := get("/v1/healthz"); err != nil || code != http.StatusOK {
		t.Errorf("queue health while the batch system is down: %d %v", code, err)
	}
	code, body, _ := get(api.PathMetrics)
	if code != http.StatusOK || !strings.Contains(body, "\nharvest_batch_system_up 0\n") ||
		strings.Contains(body, "\nharvest_batch_system_unreachable_since_timestamp_seconds 0\n") {
		t.Errorf("/metrics does not show the batch system down: %d\n%s", code, body)
	}
	if err := stop(); err != nil {
		t.Errorf("agent stopped while waiting for the batch system: %v, want a clean stop", err)
	}
}
