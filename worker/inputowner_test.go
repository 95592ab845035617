package worker_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/harvest-hpc/harvest/internal/unixacct"
	"github.com/harvest-hpc/harvest/pilotproto"
	"github.com/harvest-hpc/harvest/worker"
)

// testAccounts: alice is the test's own uid (its files are hers), bob a
// uid that owns nothing here (as queuetest.TestUIDs).
func testAccounts(name string) (unixacct.Account, error) {
	switch name {
	case "alice":
		return unixacct.Account{UID: uint32(os.Getuid())}, nil
	case "bob":
		return unixacct.Account{UID: uint32(os.Getuid()) + 4242}, nil
	}
	return unixacct.Account{}, fmt.Errorf("no Unix account %q", name)
}

// TestALinkRepointedAfterSubmissionIsCheckedAgain: the queue checked at
// submission that bob's linked entry led to a file bob may read; bob then
// re-pointed the link to alice's private file (or replaced a plain entry
// with such a link). The worker, which reads every user's data, resolves
// the entry when the task starts: it checks the submitter's read rights
// on what the entry leads to now, and refuses, naming the entry.
func TestALinkRepointedAfterSubmissionIsCheckedAgain(t *testing.T) {
	dir := t.TempDir()
	for _, d := range []string{filepath.Dir(dir), dir} { // t.TempDir's are 0700: bob reaches the data as on a shared file system
		os.Chmod(d, 0o755)
	}
	root := filepath.Join(dir, "data")
	ds := filepath.Join(root, "bob", "ds")
	os.MkdirAll(ds, 0o755)
	os.MkdirAll(filepath.Join(root, "alice"), 0o700)
	secret := filepath.Join(root, "alice", "secret")
	os.WriteFile(secret, []byte("alice's secret\n"), 0o600)
	public := filepath.Join(root, "bob", "public")
	os.WriteFile(public, []byte("public\n"), 0o644)
	for _, c := range []struct {
		owner, target string
		refused       bool
	}{
		{"bob", public, false},
		{"bob", secret, true},
		{"alice", secret, false}, // her own file
		{"carol", secret, false}, // no Unix account: trusted as at submission
	} {
		t.Run(c.owner+"->"+filepath.Base(c.target), func(t *testing.T) {
			out := filepath.Join(dir, "out-"+c.owner+"-"+filepath.Base(c.target))
			entry := filepath.Join(ds, "e1")
			os.Remove(entry)
			if err := os.Symlink(c.target, entry); err != nil {
				t.Fatal(err)
			}
			task := pilotproto.Task{ID: 1, Attempt: 1, JobID: 1, Owner: c.owner, Name: "e1", Input: entry,
				OutputDir: out, Output: filepath.Join(out, "e1"),
				Command: []string{"sh", "-c", `cat "$1" > "$2"`, "sh", "{input}", "{output}"}}
			r := worker.DefaultExecRunner()
			r.Roots, r.LookupAccount = []string{root}, testAccounts
			defer r.Close()
			o := r.Run(context.Background(), task)
			got, _ := os.ReadFile(task.Output)
			if !c.refused {
				if o.Status != pilotproto.StatusDone {
					t.Fatalf("status %s %q, want done", o.Status, o.ErrorTail)
				}
				return
			}
			if o.Status != pilotproto.StatusFailed || !strings.Contains(o.ErrorTail, "input") || !strings.Contains(o.ErrorTail, "may not read") {
				t.Fatalf("status %s %q, want a failure naming the input and the refusal", o.Status, o.ErrorTail)
			}
			if strings.Contains(string(got), "secret") {
				t.Fatalf("the task read alice's file: %q", got)
			}
		})
	}
}
