package replay

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/harvest-hpc/harvest/internal/slurmtest"
)

// A replay stopped by SIGTERM in a harvest run cancels its jobs and
// pilots and stops its agent. Before, `harvest replay` had no signal
// handler: killed, it left its agent running, and the agent kept
// submitting pilots into the cluster.
func TestAReplayStoppedBySIGTERMLeavesNothingRunning(t *testing.T) {
	c := slurmtest.RequireWith(t, 8, slurmtest.Options{JobComp: true, Preempt: true})
	c.Script(t, "users", "alice", "bob", "carol")
	work, err := os.MkdirTemp(filepath.Join(c.Lab, "shared"), "replay-stop-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(work) })
	if err := os.Chmod(work, 0o755); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(work, "harvest")
	build := exec.Command("go", "build", "-o", bin, "./cmd/harvest")
	build.Dir = c.Root
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build harvest: %v\n%s", err, out)
	}
	// Six 2-node jobs of 60 s, one every 20 s: the run lasts minutes.
	var swf strings.Builder
	swf.WriteString("; MaxNodes: 8\n; MaxProcs: 8\n")
	for i := range 6 {
		fmt.Fprintf(&swf, "%d %d -1 60 2 -1 -1 2 120 -1 1 %d 1 -1 -1 -1 -1 -1\n", i+1, i*20, i%3+1)
	}
	trace := filepath.Join(work, "trace.swf")
	if err := os.WriteFile(trace, []byte(swf.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "replay", "--workload", trace, "--from", "0", "--to", "200", "--nodes", "8",
		"--scale", "1", "--runs", "polling", "--work-dir", work, "--out", filepath.Join(work, "out"))
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		// On failure the agent and jobs may outlive the replay: leave the
		// shared cluster clean for the next test.
		cmd.Process.Kill()
		exec.Command("pkill", "-f", "^"+bin+" agent").Run()
		exec.Command("scancel", "--name", "harvest-pilot").Run()
		for _, u := range []string{"alice", "bob", "carol"} {
			exec.Command("scancel", "-u", u).Run()
		}
	})
	var log strings.Builder
	up := make(chan struct{})
	go func() {
		s := bufio.NewScanner(stderr)
		once := false
		for s.Scan() {
			log.WriteString(s.Text() + "\n")
			if !once && strings.Contains(s.Text(), "submitting") {
				once = true
				close(up)
			}
		}
	}()
	select {
	case <-up:
	case <-time.After(3 * time.Minute):
		t.Fatalf("the replay did not start submitting within 3 min:\n%s", log.String())
	}
	// Pilots are running or on their way: the agent is up.
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		for deadline := time.Now().Add(90 * time.Second); time.Now().Before(deadline); time.Sleep(250 * time.Millisecond) {
			if cond() {
				return
			}
		}
		t.Fatalf("timed out waiting for %s; replay's log:\n%s", what, log.String())
	}
	agentAlive := func() bool {
		out, _ := exec.Command("pgrep", "-f", "^"+bin+" agent").Output()
		return strings.TrimSpace(string(out)) != ""
	}
	queued := func() string {
		out, _ := exec.Command("squeue", "-h", "-o", "%i %j %u").Output()
		return strings.TrimSpace(string(out))
	}
	waitFor("the replay's agent and a job in the queue", func() bool { return agentAlive() && queued() != "" })
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err == nil {
			t.Errorf("the stopped replay exited 0")
		}
	case <-time.After(90 * time.Second):
		t.Fatalf("the replay did not exit within 90 s of SIGTERM:\n%s", log.String())
	}
	if agentAlive() {
		t.Errorf("the replay's agent outlived it")
	}
	var left string
	for deadline := time.Now().Add(90 * time.Second); time.Now().Before(deadline); time.Sleep(250 * time.Millisecond) {
		if left = queued(); left == "" {
			return
		}
	}
	out, _ := exec.Command("squeue", "-h", "-o", "%i %j %u %T %M %R").Output()
	t.Fatalf("timed out waiting for an empty queue; left:\n%s\nreplay's log:\n%s", out, log.String())
}
