package slurm

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/harvest-hpc/harvest/adapters"
)

// fakeBin writes shell scripts named after SLURM commands into a
// directory and returns an adapter that runs them for real (BinDir).
// In the scripts, $DIR is that directory.
func fakeBin(t *testing.T, scripts map[string]string, mod func(*Config)) (*Adapter, string) {
	t.Helper()
	dir := t.TempDir()
	for name, body := range scripts {
		body = strings.ReplaceAll(body, "$DIR", dir)
		if err := os.WriteFile(filepath.Join(dir, name), []byte("#!/bin/sh\n"+body+"\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	cfg := DefaultConfig()
	cfg.User = "root"
	cfg.BinDir = dir
	cfg.Timeout = 5 * time.Second
	if mod != nil {
		mod(&cfg)
	}
	a, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return a, dir
}

// waitExited waits until the process whose pid a script wrote to file has
// exited (its pidfd becomes readable), at most d.
func waitExited(t *testing.T, file string, d time.Duration) {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatalf("pid file %q", b)
	}
	fd, err := unix.PidfdOpen(pid, 0)
	if errors.Is(err, unix.ESRCH) {
		return
	}
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	n, err := unix.Poll([]unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}, int(d/time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	if n == 0 {
		_ = unix.Kill(pid, unix.SIGKILL)
		t.Fatalf("process %d (started by the command) still runs %s after the adapter gave up", pid, d)
	}
}

func submitSpec() adapters.PilotSpec {
	return adapters.PilotSpec{TimeLimit: 600, Command: []string{"harvest", "pilot"}}
}

// An sbatch that exits 0 but leaves a child holding its stdout (a site's
// wrapper script) has submitted the job: reporting it unreachable would
// make the agent submit it again.
func TestSubmitWhenSbatchLeavesAChildHoldingItsOutput(t *testing.T) {
	a, dir := fakeBin(t, map[string]string{
		"sbatch": `cat >/dev/null; echo 42; sleep 60 & echo $! > $DIR/child; exit 0`,
	}, nil)
	id, err := a.Submit(context.Background(), submitSpec())
	if errors.Is(err, adapters.ErrUnreachable) {
		t.Fatalf("reported unreachable (a retry submits twice): %v", err)
	}
	if err != nil && !errors.Is(err, adapters.ErrOutcomeUnknown) {
		t.Fatalf("err = %v, want the id or ErrOutcomeUnknown", err)
	}
	if err == nil && id != "42" {
		t.Errorf("id = %q, want 42", id)
	}
	waitExited(t, filepath.Join(dir, "child"), 5*time.Second)
}

func TestSubmitOutcomes(t *testing.T) {
	tests := []struct {
		name   string
		sbatch string
		want   error // nil: a plain rejection
	}{
		{"an sbatch killed by a signal may have submitted", `cat >/dev/null; kill -9 $$`, adapters.ErrOutcomeUnknown},
		{"an sbatch terminated after printing nothing may have submitted", `cat >/dev/null; kill -TERM $$`, adapters.ErrOutcomeUnknown},
		{"an id cut before its newline is not an id", `cat >/dev/null; printf 4`, adapters.ErrOutcomeUnknown},
		{"a failure without an error message may have submitted", `cat >/dev/null; exit 1`, adapters.ErrOutcomeUnknown},
		{"a crash after a partial reply may have submitted", `cat >/dev/null; printf 'sbatch: error: Batch job submission failed: Socket timed out on send/recv operation\n' >&2; exit 1`, adapters.ErrOutcomeUnknown},
		{"a missing controller submitted nothing", `cat >/dev/null; printf 'sbatch: error: Batch job submission failed: Unable to contact slurm controller (connect failure)\n' >&2; exit 1`, adapters.ErrUnreachable},
		{"SLURM's refusal submitted nothing", `cat >/dev/null; printf 'sbatch: error: Batch job submission failed: Invalid partition name specified\n' >&2; exit 1`, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			a, _ := fakeBin(t, map[string]string{"sbatch": tc.sbatch}, nil)
			id, err := a.Submit(context.Background(), submitSpec())
			if err == nil {
				t.Fatalf("submitted %q", id)
			}
			if tc.want != nil && !errors.Is(err, tc.want) {
				t.Errorf("err = %v, want %v", err, tc.want)
			}
			if tc.want == nil && (errors.Is(err, adapters.ErrOutcomeUnknown) || errors.Is(err, adapters.ErrUnreachable)) {
				t.Errorf("a refusal reads as %v", err)
			}
		})
	}
}

func TestSubmitOfABinaryThatDoesNotExistSubmittedNothing(t *testing.T) {
	a, _ := fakeBin(t, nil, nil)
	if _, err := a.Submit(context.Background(), submitSpec()); !errors.Is(err, adapters.ErrUnreachable) {
		t.Errorf("err = %v, want ErrUnreachable", err)
	}
}

// A timeout kills the command's whole process group: a wrapper's child
// would otherwise run on (and hold the controller's connections).
func TestATimeoutKillsTheCommandsChildren(t *testing.T) {
	a, dir := fakeBin(t, map[string]string{
		"squeue": `sleep 60 >/dev/null 2>&1 & echo $! > $DIR/child; wait`,
	}, func(c *Config) { c.Timeout = 300 * time.Millisecond })
	_, err := a.query(context.Background(), filepath.Join(dir, "squeue"), nil)
	if !errors.Is(err, adapters.ErrUnreachable) {
		t.Fatalf("err = %v, want ErrUnreachable", err)
	}
	waitExited(t, filepath.Join(dir, "child"), 5*time.Second)
}

// Issue 35 item 10: an scancel that exits 0 but leaves a child holding its
// output (a site's wrapper) has cancelled: it was reported as a failed
// cancel. The child is killed.
func TestCancelWhenScancelLeavesAChildHoldingItsOutput(t *testing.T) {
	a, dir := fakeBin(t, map[string]string{
		"squeue":  `echo '42|root|RUNNING|harvest-pilot'`,
		"scancel": `sleep 60 & echo $! > $DIR/child; exit 0`,
	}, nil)
	if err := a.Cancel(context.Background(), "42"); err != nil {
		t.Errorf("scancel exited 0 with a leftover child: %v, want a successful cancel", err)
	}
	waitExited(t, filepath.Join(dir, "child"), 5*time.Second)
}

// Issue 35 item 6: a huge sbatch answer is not kept whole (a 50 MB one
// took the agent to 1.26 GB): its head is, and the outcome is unknown.
func TestAHugeSbatchAnswerIsAnUnknownOutcome(t *testing.T) {
	a, _ := fakeBin(t, map[string]string{
		"sbatch": `cat >/dev/null; head -c 3000000 /dev/zero | tr '\0' '7'; echo`,
	}, nil)
	_, err := a.Submit(context.Background(), submitSpec())
	if !errors.Is(err, adapters.ErrOutcomeUnknown) || !strings.Contains(err.Error(), "printed 3000001 bytes") {
		t.Errorf("err = %v, want an unknown outcome saying how much sbatch printed", err)
	}
}

// Issue 35 item 6: a job or node list longer than MaxJobs or MaxNodes
// fails the snapshot while it is read, naming the option to raise.
func TestListsPastTheirBoundFailTheSnapshot(t *testing.T) {
	a := bigCluster(t, func(c *Config) { c.MaxJobs = bigJobs - 1 })
	if _, err := a.Snapshot(context.Background()); !errors.Is(err, ErrParse) || !strings.Contains(err.Error(), "max_jobs") {
		t.Errorf("%d jobs with max_jobs %d: %v", bigJobs, bigJobs-1, err)
	}
	a = bigCluster(t, func(c *Config) { c.MaxNodes = bigNodes - 1 })
	if _, err := a.Snapshot(context.Background()); !errors.Is(err, ErrParse) || !strings.Contains(err.Error(), "max_nodes") {
		t.Errorf("%d nodes with max_nodes %d: %v", bigNodes, bigNodes-1, err)
	}
	a = bigCluster(t, func(c *Config) { c.MaxJobs, c.MaxNodes = bigJobs, bigNodes })
	if _, err := a.Snapshot(context.Background()); err != nil {
		t.Errorf("at the bounds: %v", err)
	}
}
