package queue_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/harvest-hpc/harvest/internal/tinyfs"
	"github.com/harvest-hpc/harvest/queue"
	"github.com/harvest-hpc/harvest/queue/api"
	"github.com/harvest-hpc/harvest/queue/queuetest"
)

// TestAQueueOnAFullDiskSaysWhatToFree: the queue did not start on a full
// disk, with "disk I/O error: no space left on device" (SQLite in WAL mode
// cannot even read its database without making its shared-memory index
// and write-ahead log). It now refuses to start with a message naming the
// full file system, what is free and what to do; nothing is lost: once
// room is made, it starts with its jobs.
func TestAQueueOnAFullDiskSaysWhatToFree(t *testing.T) {
	state := tinyfs.Mount(t, "2m")
	dir := queuetest.SharedDir(t)
	os.MkdirAll(filepath.Join(dir, "data", "ds", "e1"), 0o755)
	cfg := queuetest.Config(dir, queuetest.NewClock())
	cfg.DBPath = filepath.Join(state, "queue.db")
	q, err := queue.Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	j, err := q.Submit(t.Context(), "alice", api.JobSpec{Dataset: filepath.Join(dir, "data", "ds"), Command: []string{"p"}, BatchSize: 1})
	if err != nil {
		t.Fatal(err)
	}
	q.Close()
	free := tinyfs.Fill(t, state)
	if q, err = queue.Open(cfg); err == nil {
		q.Close()
		t.Fatal("the queue started on a full disk")
	}
	for _, want := range []string{cfg.DBPath, "is full", "free space there", "start the queue again"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
	free()
	q, err = queue.Open(cfg)
	if err != nil {
		t.Fatalf("once room is made: %v", err)
	}
	defer q.Close()
	if got, err := q.Job(t.Context(), "alice", false, j.ID); err != nil || got.ID != j.ID {
		t.Fatalf("job %d after the restart: %+v %v", j.ID, got, err)
	}
}
