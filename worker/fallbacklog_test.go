package worker_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/harvest-hpc/harvest/pilotproto"
	"github.com/harvest-hpc/harvest/worker"
)

// A task without an output directory logs under the runner's fallback
// directory (/tmp/harvest-logs by default), which any local user can make
// first in a world-writable /tmp. The worker opened it and its logs
// following links: a link planted there by another user made a pilot
// write into a file of the pilot's user. Now the directory is the
// pilot's own and private (0700, made so, or refused with an error that
// names it), and no link in it or in its place is followed.
func TestFallbackLogsFollowNoLinkAndNoOtherUsersDirectory(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to make a directory of another user")
	}
	const nobody = 65534
	task := func(dir string) pilotproto.Task {
		tk := execTask(dir, 0, "sh", "-c", "echo out; echo err >&2")
		tk.Output, tk.OutputDir = "", ""
		return tk
	}
	run := func(fallback string, tk pilotproto.Task) worker.Outcome {
		r := worker.DefaultExecRunner()
		r.FallbackLog = fallback
		defer r.Close()
		return r.Run(context.Background(), tk)
	}
	precious := func(dir string) string {
		p := filepath.Join(dir, "precious")
		os.WriteFile(p, []byte("keep"), 0o600)
		return p
	}
	kept := func(t *testing.T, p string) {
		t.Helper()
		if b, _ := os.ReadFile(p); string(b) != "keep" {
			t.Fatalf("written through a link: %q", b)
		}
	}
	failed := func(t *testing.T, o worker.Outcome, sub string) {
		t.Helper()
		if o.Status != pilotproto.StatusFailed || !strings.Contains(o.ErrorTail, sub) {
			t.Fatalf("status %s (%q), want a failure saying %q", o.Status, o.ErrorTail, sub)
		}
	}

	t.Run("the directory is a link", func(t *testing.T) {
		dir := t.TempDir()
		victim := filepath.Join(dir, "victim")
		os.Mkdir(victim, 0o700)
		fallback := filepath.Join(dir, "harvest-logs")
		os.Symlink(victim, fallback)
		failed(t, run(fallback, task(dir)), "log directory")
		if entries, _ := os.ReadDir(victim); len(entries) != 0 {
			t.Fatalf("logs written through the link: %v", entries)
		}
	})
	t.Run("another user's directory holding a link", func(t *testing.T) {
		dir := t.TempDir()
		p := precious(dir)
		fallback := filepath.Join(dir, "harvest-logs")
		os.Mkdir(fallback, 0o777)
		os.Symlink(p, filepath.Join(fallback, "3.2.err"))
		os.Lchown(filepath.Join(fallback, "3.2.err"), nobody, nobody)
		os.Chown(fallback, nobody, nobody)
		failed(t, run(fallback, task(dir)), "owned by uid 65534")
		kept(t, p)
	})
	t.Run("a link in the pilot's own directory", func(t *testing.T) {
		dir := t.TempDir()
		p := precious(dir)
		fallback := filepath.Join(dir, "harvest-logs")
		os.Mkdir(fallback, 0o700)
		os.Symlink(p, filepath.Join(fallback, "3.2.out"))
		failed(t, run(fallback, task(dir)), "stdout file")
		kept(t, p)
	})
	t.Run("made private, and the logs in it", func(t *testing.T) {
		dir := t.TempDir()
		fallback := filepath.Join(dir, "harvest-logs")
		os.Mkdir(fallback, 0o755) // the pilot's own, too open: closed
		if o := run(fallback, task(dir)); o.Status != pilotproto.StatusDone {
			t.Fatalf("status %s (%q), want done", o.Status, o.ErrorTail)
		}
		for name, want := range map[string]os.FileMode{"": 0o700, "3.2.out": 0o600, "3.2.err": 0o600} {
			fi, err := os.Lstat(filepath.Join(fallback, name))
			if err != nil {
				t.Fatal(err)
			}
			if fi.Mode().Perm() != want || fi.Sys().(*syscall.Stat_t).Uid != uint32(os.Geteuid()) {
				t.Errorf("%s: mode %v uid %d, want %v and the pilot's", filepath.Join(fallback, name), fi.Mode().Perm(), fi.Sys().(*syscall.Stat_t).Uid, want)
			}
		}
		if b, _ := os.ReadFile(filepath.Join(fallback, "3.2.out")); string(b) != "out\n" {
			t.Errorf("stdout %q", b)
		}
	})
}
