package queue_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/harvest-hpc/harvest/queue"
	"github.com/harvest-hpc/harvest/queue/api"
	"github.com/harvest-hpc/harvest/queue/queuetest"
)

// A dataset checked inside the allowed roots and then replaced by a link
// to a directory outside them, before the queue lists it, must not have
// the outside directory's entries listed as tasks: the submission is
// refused and nothing is stored. The queue listed the checked path again,
// following the link (the race was one os.Open wide).
func TestADatasetSwappedForALinkBeforeItIsListedIsRefused(t *testing.T) {
	e := queuetest.New(t)
	ctx := context.Background()
	ds := e.Dataset("swapped", 2)
	outside := filepath.Join(e.Dir, "outside")
	for _, d := range []string{"secret1", "secret2", "secret3"} {
		if err := os.MkdirAll(filepath.Join(outside, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	before := e.Snapshot(t)
	queue.SetBeforeWrite(e.Q, func(op string) {
		if op == "list" { // after the checks, before the listing
			if err := os.Rename(ds, ds+".away"); err != nil {
				t.Error(err)
			}
			if err := os.Symlink(outside, ds); err != nil {
				t.Error(err)
			}
		}
	})
	j, err := e.Q.Submit(ctx, "alice", api.JobSpec{Dataset: ds, Command: []string{"/bin/prog", "{input}"}, BatchSize: 1})
	queue.SetBeforeWrite(e.Q, nil)
	if err == nil {
		t.Fatalf("the swapped dataset was submitted: job %d of %d tasks, listed from %s", j.ID, j.Tasks.Total, outside)
	}
	if !errors.Is(err, api.ErrInvalid) {
		t.Fatalf("submit: %v, want an invalid-request error", err)
	}
	t.Logf("refused: %v", err)
	if after := e.Snapshot(t); after != before {
		t.Fatalf("the refused submission changed stored state:\n%s", after)
	}
}
