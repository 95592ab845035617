package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/urfave/cli/v2"
)

// TestTheAgentsStateIsItsOwn is issue 13 item 8: the agent made its state
// directory 0755 and the queue database 0644, so any local user could
// copy the database and read every job and command.
func TestTheAgentsStateIsItsOwn(t *testing.T) {
	dir := t.TempDir()
	state := filepath.Join(dir, "state")
	data := filepath.Join(dir, "data")
	os.MkdirAll(data, 0o755)
	app := newApp()
	var out, errOut bytes.Buffer
	app.Writer, app.ErrWriter = &out, &errOut
	app.ExitErrHandler = func(*cli.Context, error) {}
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- app.RunContext(ctx, []string{"harvest", "agent", "--state-dir", state, "--allowed-root", data,
			"--socket", filepath.Join(dir, "q.sock"), "--listen", "127.0.0.1:0", "--adapter", "sim", "--adapter-in-process",
			"--adapter-opt", "nodes=2", "--poll", "50ms", "--pilot-command", "/bin/true"})
	}()
	db := filepath.Join(state, "queue.db")
	deadline := time.NewTimer(20 * time.Second)
	defer deadline.Stop()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		if _, err := os.Stat(db + "-wal"); err == nil {
			break
		}
		select {
		case err := <-done:
			t.Fatalf("agent ended: %v\n%s", err, errOut.String())
		case <-deadline.C:
			t.Fatalf("no database after 20 s\n%s", errOut.String())
		case <-tick.C:
		}
	}
	stop()
	<-done
	for _, p := range []string{state, db, db + "-wal", filepath.Join(state, "pilot.token")} {
		fi, err := os.Stat(p)
		if os.IsNotExist(err) && p == db+"-wal" {
			continue // a clean stop folds the WAL into the database
		}
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm()&0o077 != 0 {
			t.Errorf("%s is %v: other users can read it", p, fi.Mode().Perm())
		}
	}
}

// A --state-dir another local user made first in a shared place (here a
// link to a directory of the system's) is refused before anything is
// written in it or its mode changed: the agent running as root chmodded
// the link's target 0700 and put its pilot token and database there.
func TestTheAgentRefusesAStateDirAnotherUserPrepared(t *testing.T) {
	dir := t.TempDir()
	victim := filepath.Join(dir, "etc")
	os.Mkdir(victim, 0o755)
	os.Chmod(victim, 0o755)
	state := filepath.Join(dir, "state")
	if err := os.Symlink(victim, state); err != nil {
		t.Fatal(err)
	}
	data := filepath.Join(dir, "data")
	os.MkdirAll(data, 0o755)
	for _, args := range [][]string{
		{"agent", "--state-dir", state, "--allowed-root", data, "--socket", filepath.Join(dir, "q.sock"), "--listen", "127.0.0.1:0",
			"--adapter", "sim", "--adapter-in-process", "--adapter-opt", "nodes=2", "--poll", "50ms", "--pilot-command", "/bin/true"},
		{"admin", "token", "rotate", "--pilot", "--state-dir", state},
	} {
		_, msg, code := runHarvest(t, "", args...)
		if code == 0 || !strings.Contains(msg, "--state-dir") || !strings.Contains(msg, "symbolic link") {
			t.Errorf("%s: exit %d, %q", args[0], code, msg)
		}
	}
	if fi, err := os.Stat(victim); err != nil || fi.Mode().Perm() != 0o755 {
		t.Errorf("the link's target: %v %v, want 0755 as it was", fi.Mode(), err)
	}
	if ents, _ := os.ReadDir(victim); len(ents) != 0 {
		t.Errorf("written in the link's target: %v", ents)
	}
}

// The dump directory receives files the agent creates by name: one in a
// directory any user may write (here made first by someone else) is
// refused before the agent starts, and nothing is made in it.
func TestTheAgentRefusesADumpDirOthersMayWrite(t *testing.T) {
	dir := t.TempDir()
	open := filepath.Join(dir, "open")
	os.Mkdir(open, 0o777)
	os.Chmod(open, 0o777)
	for _, d := range []string{open, filepath.Join(open, "dumps")} {
		_, msg, code := runHarvest(t, "", "agent", "--state-dir", filepath.Join(dir, "state"), "--no-queue", "--adapter", "sim",
			"--adapter-in-process", "--dump-snapshots", d)
		if code != 2 || !strings.Contains(msg, "--dump-snapshots") || !strings.Contains(msg, "writable by others (mode 0777) without the sticky bit") {
			t.Errorf("%s: exit %d, %q", d, code, msg)
		}
	}
	if ents, _ := os.ReadDir(open); len(ents) != 0 {
		t.Errorf("made in the open directory: %v", ents)
	}
}
