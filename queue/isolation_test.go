package queue_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/harvest-hpc/harvest/internal/unixacct"
	"github.com/harvest-hpc/harvest/queue"
	"github.com/harvest-hpc/harvest/queue/api"
	"github.com/harvest-hpc/harvest/queue/queuetest"
)

// TestAJobsOutputDirectoryIsItsOwners is issue 13 item 5: a default output
// directory is made fresh for the job at submission (not through a link a
// user planted), and a named one must belong to the submitter.
func TestAJobsOutputDirectoryIsItsOwners(t *testing.T) {
	e := queuetest.New(t)
	ctx := context.Background()
	ds := e.Dataset("ds", 2)
	j, err := e.Q.Submit(ctx, "alice", api.JobSpec{Dataset: ds, Command: []string{"p"}, BatchSize: 1})
	if err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Lstat(j.OutputDir); err != nil || !fi.IsDir() || fi.Mode().Perm() != 0o755 {
		t.Fatalf("default output %s not made at submission: %v %v", j.OutputDir, fi, err)
	}
	// bob plants a link where his next job's directory will be made.
	elsewhere := filepath.Join(e.Dir, "elsewhere")
	os.Mkdir(elsewhere, 0o700)
	if err := os.Symlink(elsewhere, filepath.Join(e.Data, "out", "bob")); err != nil {
		t.Fatal(err)
	}
	if _, err := e.Q.Submit(ctx, "bob", api.JobSpec{Dataset: ds, Command: []string{"p"}, BatchSize: 1}); !errors.Is(err, api.ErrInvalid) {
		t.Fatalf("submission through a planted link: %v, want refused", err)
	}
	if entries, _ := os.ReadDir(elsewhere); len(entries) != 0 {
		t.Fatalf("a directory was made through the link: %v", entries)
	}
	// A named output of the submitter's own is accepted and made.
	mine := filepath.Join(e.Data, "alice-results", "run1")
	j2, err := e.Q.Submit(ctx, "alice", api.JobSpec{Dataset: ds, Command: []string{"p"}, BatchSize: 1, Output: mine})
	if err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(j2.OutputDir); err != nil || !fi.IsDir() {
		t.Fatalf("named output %s not made: %v", j2.OutputDir, err)
	}
	// Nor may bob name it (it is alice's, by uid).
	if _, err := e.Q.Submit(ctx, "bob", api.JobSpec{Dataset: ds, Command: []string{"p"}, BatchSize: 1, Output: mine}); !errors.Is(err, api.ErrForbidden) {
		t.Fatalf("bob naming alice's output: %v, want forbidden", err)
	}
}

// TestTheQueueDatabaseIsTheOwnersOnly is issue 13 item 8: the database
// was 0644 (every job and command readable by any local user).
func TestTheQueueDatabaseIsTheOwnersOnly(t *testing.T) {
	e := queuetest.New(t, func(c *queue.Config) { c.DBPath = filepath.Join(t.TempDir(), "state", "queue.db") })
	if _, err := e.Q.Submit(context.Background(), "alice", api.JobSpec{Dataset: e.Dataset("ds", 1), Command: []string{"p"}, BatchSize: 1}); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{e.Cfg.DBPath, e.Cfg.DBPath + "-wal", e.Cfg.DBPath + "-shm"} {
		fi, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm()&0o077 != 0 {
			t.Errorf("%s is %v: others can read it", p, fi.Mode().Perm())
		}
	}
	if fi, _ := os.Stat(filepath.Dir(e.Cfg.DBPath)); fi.Mode().Perm()&0o077 != 0 {
		t.Errorf("the database's directory is %v", fi.Mode().Perm())
	}
}

// TestADatasetMustBeReadableByItsSubmitter: the queue (and the harvest
// account that runs the tasks) may read every user's data, so a dataset
// bob's own account cannot read was a way for him to read alice's private
// files: submitted as his job, its entries went through his command into
// his outputs and his error tails. The submitter's account must be able
// to reach and read the dataset itself, by the mode bits.
func TestADatasetMustBeReadableByItsSubmitter(t *testing.T) {
	var bobGroups []uint32
	e := queuetest.New(t, func(c *queue.Config) {
		c.LookupAccount = func(name string) (unixacct.Account, error) {
			a, err := queuetest.TestAccount(name)
			if name == "bob" {
				a.GIDs = bobGroups
			}
			return a, err
		}
	})
	ctx := context.Background()
	private := filepath.Join(e.Data, "alice-private")
	ds := filepath.Join(private, "ds")
	if err := os.MkdirAll(filepath.Join(ds, "e1"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(private, 0o700); err != nil {
		t.Fatal(err)
	}
	before := e.Snapshot(t)
	spec := api.JobSpec{Dataset: ds, Command: []string{"/bin/cat", "{input}"}, BatchSize: 1}
	if _, err := e.Q.Submit(ctx, "bob", spec); !errors.Is(err, api.ErrForbidden) {
		t.Fatalf("bob submitting a dataset under alice's 0700 directory: %v, want forbidden", err)
	}
	// Nor through a link of his own that leads there.
	link := filepath.Join(e.Data, "bobs-link")
	if err := os.Symlink(ds, link); err != nil {
		t.Fatal(err)
	}
	if _, err := e.Q.Submit(ctx, "bob", api.JobSpec{Dataset: link, Command: spec.Command, BatchSize: 1}); !errors.Is(err, api.ErrForbidden) {
		t.Fatalf("bob submitting alice's dataset through a link: %v, want forbidden", err)
	}
	// A dataset he can list but not read is no better.
	if err := os.Chmod(private, 0o711); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(ds, 0o711); err != nil {
		t.Fatal(err)
	}
	if _, err := e.Q.Submit(ctx, "bob", spec); !errors.Is(err, api.ErrForbidden) {
		t.Fatalf("bob submitting a dataset he cannot list: %v, want forbidden", err)
	}
	if after := e.Snapshot(t); after != before {
		t.Fatalf("a refused submission changed the database:\n%s\n---\n%s", before, after)
	}
	// alice, its owner, may.
	if _, err := e.Q.Submit(ctx, "alice", spec); err != nil {
		t.Fatalf("alice submitting her own dataset: %v", err)
	}
	// bob may when the group he is in may read it.
	if err := os.Chmod(private, 0o750); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(ds, 0o750); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(ds)
	if err != nil {
		t.Fatal(err)
	}
	bobGroups = []uint32{fi.Sys().(*syscall.Stat_t).Gid}
	if _, err := e.Q.Submit(ctx, "bob", spec); err != nil {
		t.Fatalf("bob submitting a dataset his group may read: %v", err)
	}
}

// An entry of a readable dataset that links to another user's private
// file (or directory) would hand it to the submitter's command as its
// input: the link's target must be readable by the submitter too, and a
// refused submission changes nothing.
func TestADatasetEntryMustNotLinkToWhatItsSubmitterMayNotRead(t *testing.T) {
	e := queuetest.New(t)
	ctx := context.Background()
	private := filepath.Join(e.Data, "alice-private")
	if err := os.MkdirAll(filepath.Join(private, "dir"), 0o755); err != nil {
		t.Fatal(err)
	}
	secret := filepath.Join(private, "secret")
	if err := os.WriteFile(secret, []byte("alice's"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(private, 0o700); err != nil {
		t.Fatal(err)
	}
	open := filepath.Join(e.Data, "open")
	if err := os.WriteFile(open, []byte("anyone's"), 0o644); err != nil {
		t.Fatal(err)
	}
	spec := func(ds string) api.JobSpec {
		return api.JobSpec{Dataset: ds, Command: []string{"/bin/cat", "{input}"}, BatchSize: 1}
	}
	for i, target := range []string{secret, filepath.Join(private, "dir")} {
		ds := filepath.Join(e.Data, fmt.Sprintf("bobs-ds-%d", i))
		if err := os.MkdirAll(filepath.Join(ds, "e1"), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(target, filepath.Join(ds, "e2")); err != nil {
			t.Fatal(err)
		}
		before := e.Snapshot(t)
		if _, err := e.Q.Submit(ctx, "bob", spec(ds)); !errors.Is(err, api.ErrForbidden) || !strings.Contains(err.Error(), "entry e2 links to") {
			t.Fatalf("bob's entry linking to %s: %v, want forbidden naming the entry", target, err)
		}
		if after := e.Snapshot(t); after != before {
			t.Fatalf("a refused submission changed the database:\n%s\n---\n%s", before, after)
		}
	}
	// A link to what bob may read is an entry like any other.
	ds := filepath.Join(e.Data, "bobs-ds-open")
	if err := os.MkdirAll(filepath.Join(ds, "e1"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(open, filepath.Join(ds, "e2")); err != nil {
		t.Fatal(err)
	}
	if j, err := e.Q.Submit(ctx, "bob", spec(ds)); err != nil || j.Tasks.Total != 2 {
		t.Fatalf("bob's entry linking to a file he may read: %+v %v", j, err)
	}
}
