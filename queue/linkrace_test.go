package queue_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/harvest-hpc/harvest/pilotproto"
	"github.com/harvest-hpc/harvest/queue"
	"github.com/harvest-hpc/harvest/queue/api"
	"github.com/harvest-hpc/harvest/queue/queuetest"
	"github.com/harvest-hpc/harvest/worker"
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

// linkedDataset makes a dataset of one plain entry and one entry, "ln",
// that is a link to target, and returns its path.
func linkedDataset(t *testing.T, e *queuetest.Env, name, target string) string {
	t.Helper()
	ds := e.Dataset(name, 1)
	if err := os.Symlink(target, filepath.Join(ds, "ln")); err != nil {
		t.Fatal(err)
	}
	return ds
}

// dirWith makes the directory dir holding a file "data" with text.
func dirWith(t *testing.T, dir, text string) string {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "data"), []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

// A dataset entry that is a link follows the allowed-roots rule
// (docs/queue.md): one leading inside the roots is recorded as the link
// (the task's input is the entry's own path, so the rule is applied again
// to what it leads to when the task runs), one leading outside is refused
// and nothing is stored. Re-pointed outside between listing and running,
// the entry the queue hands out is refused by the worker, which resolves
// it again, and the task never reads what it now leads to.
func TestADatasetEntryLinkIsRecordedInsideTheRootsAndRefusedOutside(t *testing.T) {
	e := queuetest.New(t)
	ctx := context.Background()
	dirWith(t, filepath.Join(e.Data, "shared", "in"), "inside\n")
	outside := dirWith(t, filepath.Join(e.Dir, "outside", "secret"), "outside secret\n")

	before := e.Snapshot(t)
	if _, err := e.Q.Submit(ctx, "alice", api.JobSpec{Dataset: linkedDataset(t, e, "out", outside), Command: []string{"/bin/true"}, BatchSize: 1}); !errors.Is(err, api.ErrInvalid) || !strings.Contains(err.Error(), "entry ln") {
		t.Fatalf("an entry linked outside the roots: %v, want refused naming the entry", err)
	}
	if after := e.Snapshot(t); after != before {
		t.Fatalf("the refused submission changed stored state:\n%s", after)
	}

	ds := linkedDataset(t, e, "in", "../shared/in") // relative: resolved from the entry's directory
	cmd := []string{"/bin/sh", "-c", `cat "$1/data" > "$2"`, "sh", "{input}", "{output}"}
	j, err := e.Q.Submit(ctx, "alice", api.JobSpec{Dataset: ds, Command: cmd, BatchSize: 1})
	if err != nil {
		t.Fatalf("an entry linked inside the roots: %v", err)
	}
	if j.Tasks.Total != 2 {
		t.Fatalf("%d tasks, want 2 (the plain entry and the link)", j.Tasks.Total)
	}
	l, err := e.Q.Lease(ctx, pilotproto.LeaseRequest{PilotID: "p1"})
	if err != nil || !l.Granted {
		t.Fatalf("lease: %+v %v", l, err)
	}
	p, err := e.Q.Pull(ctx, pilotproto.PullRequest{Epoch: l.Epoch, Max: 2})
	if err != nil || len(p.Tasks) != 2 {
		t.Fatalf("pulled %d tasks: %v", len(p.Tasks), err)
	}
	var task pilotproto.Task
	for _, tk := range p.Tasks {
		if tk.Name == "ln" {
			task = tk
		}
	}
	if task.Input != filepath.Join(ds, "ln") {
		t.Fatalf("the linked entry's input is %q, want the link itself, %s", task.Input, filepath.Join(ds, "ln"))
	}
	run := func() (string, string, string) {
		r := worker.DefaultExecRunner()
		r.Roots, r.LookupAccount = e.Cfg.AllowedRoots, queuetest.TestAccount
		defer r.Close()
		os.Remove(task.Output)
		o := r.Run(ctx, task)
		got, _ := os.ReadFile(task.Output)
		return o.Status, o.ErrorTail, string(got)
	}
	if st, tail, got := run(); st != pilotproto.StatusDone || got != "inside\n" {
		t.Fatalf("the link inside the roots ran %s (%q), read %q", st, tail, got)
	}
	// Re-pointed outside the roots after the listing, before the run.
	if err := os.Remove(filepath.Join(ds, "ln")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(ds, "ln")); err != nil {
		t.Fatal(err)
	}
	st, tail, got := run()
	if st != pilotproto.StatusFailed || !strings.Contains(tail, "input") {
		t.Errorf("the link re-pointed outside the roots ran %s (%q), want a failure naming the input", st, tail)
	}
	if strings.Contains(got, "secret") {
		t.Errorf("the task read what the re-pointed link leads to: %q", got)
	}
}

// The entries of the directory listed are judged, not those of whatever
// is at its path meanwhile: the dataset directory swapped, once opened,
// for a decoy whose "ln" leads inside the roots, while the listed one's
// leads outside, is refused. (Entry links were resolved by their path,
// through the decoy.)
func TestADatasetEntryIsJudgedInTheDirectoryListed(t *testing.T) {
	e := queuetest.New(t)
	inside := dirWith(t, filepath.Join(e.Data, "shared", "in"), "inside\n")
	outside := dirWith(t, filepath.Join(e.Dir, "outside", "secret"), "outside secret\n")
	ds := linkedDataset(t, e, "swapped", outside)
	before := e.Snapshot(t)
	queue.SetBeforeWrite(e.Q, func(op string) {
		if op == "list-opened" {
			if err := os.Rename(ds, ds+".listed"); err != nil {
				t.Error(err)
			}
			if err := os.Mkdir(ds, 0o755); err != nil {
				t.Error(err)
			}
			if err := os.Symlink(inside, filepath.Join(ds, "ln")); err != nil {
				t.Error(err)
			}
		}
	})
	j, err := e.Q.Submit(context.Background(), "alice", api.JobSpec{Dataset: ds, Command: []string{"/bin/true"}, BatchSize: 1})
	queue.SetBeforeWrite(e.Q, nil)
	if err == nil {
		t.Fatalf("a listed entry linked outside the roots was accepted (job %d): judged through the decoy", j.ID)
	}
	if !errors.Is(err, api.ErrInvalid) || !strings.Contains(err.Error(), "outside the allowed roots") {
		t.Fatalf("submit: %v, want refused as outside the roots", err)
	}
	if after := e.Snapshot(t); after != before {
		t.Fatalf("the refused submission changed stored state:\n%s", after)
	}
}
