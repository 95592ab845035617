package agent_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/harvest-hpc/harvest/internal/slurmtest"
)

// buildHarvest builds the harvest binary for tests that run it for real.
func buildHarvest(t *testing.T, root string) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "harvest")
	cmd := exec.Command("go", "build", "-o", bin, "./cmd/harvest")
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

type squeueJob struct {
	id, name, state string
	limit           time.Duration
	start           time.Time
}

// pilots lists the jobs named harvest-pilot.
func pilots(t *testing.T) []squeueJob {
	t.Helper()
	cmd := exec.Command("squeue", "-h", "-n", "harvest-pilot", "-o", "%i|%j|%T|%l|%S")
	cmd.Env = append(os.Environ(), "SLURM_TIME_FORMAT=%s")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("squeue: %v", err)
	}
	var jobs []squeueJob
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		f := strings.Split(sc.Text(), "|")
		if len(f) != 5 {
			t.Fatalf("squeue line %q", sc.Text())
		}
		j := squeueJob{id: f[0], name: f[1], state: f[2]}
		j.limit = parseLimit(f[3])
		if s, err := strconv.ParseInt(f[4], 10, 64); err == nil && s > 0 {
			j.start = time.Unix(s, 0)
		}
		jobs = append(jobs, j)
	}
	return jobs
}

func waitFor(t *testing.T, what string, d time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		if cond() {
			return
		}
		time.Sleep(250 * time.Millisecond)
	}
	t.Fatalf("timed out after %v waiting for %s", d, what)
}

// The scenario of issue 3 on a real 8-node SLURM cluster: the agent fills
// the idle nodes with pilots that end before the big pending job's
// expected start; when a running job ends early it releases pilots so the
// big job starts within one poll interval plus a few seconds.
func TestAgentHarvestsAHoleAndGivesItBackOnRealSLURM(t *testing.T) {
	c := slurmtest.Require(t, 8)
	bin := buildHarvest(t, c.Root)
	const poll = 2 * time.Second
	const slack = 5 * time.Second

	// 3 + 2 of 8 nodes busy; the big job needs 6, so it waits for r1 (limit
	// 3 min, but it ends after 45 s); 3 nodes are a hole until then.
	r1 := c.Sbatch(t, "alice", "sleep 45", "-N3", "-t", "3", "-J", "r1")
	r2 := c.Sbatch(t, "bob", "sleep 600", "-N2", "-t", "10", "-J", "r2")
	waitFor(t, "r1 and r2 running", 20*time.Second, func() bool {
		return c.JobState(t, r1) == "RUNNING" && c.JobState(t, r2) == "RUNNING"
	})
	r1Start := c.StartTime(t, r1)
	big := c.Sbatch(t, "alice", "sleep 20", "-N6", "-t", "2", "-J", "big")

	dumps := t.TempDir()
	// --idle-margin 0: this is the hole of DESIGN.md's example, every idle
	// node a pilot (the default margin of one idle node while a job waits
	// is pinned by TestRealSLURMGiveBackModes).
	agent := exec.Command(bin, "agent", "--no-queue", "--poll", poll.String(), "--margin", "30s", "--mini-time", "10s",
		"--idle-margin", "0", "--pilot-command", "sleep 3600", "--dump-snapshots", dumps, "--log-level", "debug")
	var logs bytes.Buffer
	agent.Stdout, agent.Stderr = &logs, &logs
	if err := agent.Start(); err != nil {
		t.Fatal(err)
	}
	stopped := false
	stop := func() {
		if stopped {
			return
		}
		stopped = true
		agent.Process.Signal(syscall.SIGTERM)
		done := make(chan error, 1)
		go func() { done <- agent.Wait() }()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("agent exited with %v after SIGTERM", err)
			}
		case <-time.After(15 * time.Second):
			agent.Process.Kill()
			t.Errorf("agent did not stop within 15 s of SIGTERM")
		}
	}
	defer func() {
		stop()
		if t.Failed() {
			t.Logf("agent log:\n%s", logs.String())
		}
	}()

	// The hole is filled: 3 running pilots whose limits end before r1's
	// limit, i.e. before the big job's reservation.
	waitFor(t, "3 running pilots", 30*time.Second, func() bool {
		n := 0
		for _, p := range pilots(t) {
			if p.state == "RUNNING" {
				n++
			}
		}
		return n == 3
	})
	reservation := r1Start.Add(3 * time.Minute)
	for _, p := range pilots(t) {
		if p.limit <= 0 {
			t.Fatalf("pilot %s has limit %v, want a finite limit before the big job's start", p.id, p.limit)
		}
		if end := p.start.Add(p.limit); end.After(reservation.Add(-30 * time.Second)) {
			t.Fatalf("pilot %s ends at %v, after the big job's reservation %v minus the margin", p.id, end, reservation)
		}
	}
	if got := len(pilots(t)); got != 3 {
		t.Fatalf("%d pilots, want exactly 3 (one per idle node, none double-submitted)", got)
	}
	if s := c.JobState(t, big); s != "PENDING" {
		t.Fatalf("big job is %s before r1 ended, want PENDING", s)
	}

	// r1 ends early; the agent must give the nodes back at once.
	waitFor(t, "r1 to end", 90*time.Second, func() bool { return c.JobState(t, r1) != "RUNNING" })
	r1End := parseSlurmTime(t, c.JobField(t, r1, "EndTime"))
	waitFor(t, "big job to start", 30*time.Second, func() bool { return c.JobState(t, big) != "PENDING" })
	bigStart := c.StartTime(t, big)
	delay := bigStart.Sub(r1End)
	t.Logf("r1 ended %v, big job started %v: delay %v (bound %v)", r1End.Format(time.TimeOnly), bigStart.Format(time.TimeOnly), delay, poll+slack)
	if delay > poll+slack {
		t.Fatalf("big job delayed %v by the harvest, more than one poll (%v) plus %v", delay, poll, slack)
	}
	if r2Start := c.StartTime(t, r2); r2Start.Sub(r1Start) > slack {
		t.Fatalf("r2 started %v after r1", r2Start.Sub(r1Start))
	}
	stop()

	// Every decision can be replayed offline.
	files, _ := filepath.Glob(filepath.Join(dumps, "snapshot-*[0-9].json"))
	if len(files) == 0 {
		t.Fatal("no snapshots dumped")
	}
	for _, f := range files[:min(len(files), 5)] {
		stem := strings.TrimSuffix(f, ".json")
		out, err := exec.Command(bin, "decide", "--snapshot", f, "--context", stem+".context.json").Output()
		if err != nil {
			t.Fatalf("harvest decide %s: %v", f, err)
		}
		want, err := os.ReadFile(stem + ".decision.json")
		if err != nil {
			t.Fatal(err)
		}
		var a, b map[string]any
		json.Unmarshal(out, &a)
		json.Unmarshal(want, &b)
		if !jsonEqual(a["submit"], b["submit"]) || !jsonEqual(a["release"], b["release"]) {
			t.Fatalf("replaying %s gives %s, the agent decided %s", f, out, want)
		}
	}
}

func jsonEqual(a, b any) bool {
	x, _ := json.Marshal(a)
	y, _ := json.Marshal(b)
	return bytes.Equal(x, y)
}

func parseSlurmTime(t *testing.T, v string) time.Time {
	t.Helper()
	ts, err := time.ParseInLocation("2006-01-02T15:04:05", v, time.Local)
	if err != nil {
		t.Fatalf("time %q: %v", v, err)
	}
	return ts
}

// parseLimit reads squeue's %l: [D-]HH:MM:SS, MM:SS or UNLIMITED (-1).
func parseLimit(v string) time.Duration {
	if v == "UNLIMITED" || v == "" {
		return -1
	}
	var days int
	if d, rest, ok := strings.Cut(v, "-"); ok {
		days, _ = strconv.Atoi(d)
		v = rest
	}
	parts := strings.Split(v, ":")
	secs := 0
	for _, p := range parts {
		n, _ := strconv.Atoi(p)
		secs = secs*60 + n
	}
	return time.Duration(days)*24*time.Hour + time.Duration(secs)*time.Second
}
