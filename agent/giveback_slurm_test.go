package agent_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/harvest-hpc/harvest/agent"
	"github.com/harvest-hpc/harvest/internal/slurmtest"
)

// The give-back modes measured on the real 8-node mini-cluster (issue 11,
// item 7). Every scenario runs without harvesting (baseline), then with
// the agent in each mode, real pilots running real tasks; for the foreign
// job the scenario is about, the time from the event that makes it
// startable (its submission, or the end of the job it waits for) to its
// start is read from slurmctld's log (milliseconds), and the mode's delay
// is that time minus the baseline's. Lost task time is the agent's
// harvest_lost_task_seconds_total. scripts/giveback-report.sh prints the
// FIGURES lines as a table.

const (
	gbPoll       = 2 * time.Second
	gbTaskTime   = 3 // seconds per harvest task
	gbPreemptMax = 2 * time.Second
	gbPollSlack  = 5 * time.Second
)

// gbMode is one way to run a scenario.
type gbMode struct {
	name  string
	flags []string // agent flags; nil = no agent (baseline)
	optIn bool     // run only in the scenarios whose modes name it
}

var gbModes = []gbMode{
	{name: "baseline"},
	{name: "polling", flags: []string{"--give-back", "polling"}},
	{name: "preemption", flags: []string{"--give-back", "preemption"}},
	// --min-pilot-time asks for --time-min sizing; SLURM 22.05 does not
	// size with it (docs/slurm.md), so the agent says so and keeps its own
	// arithmetic: the run checks the warning and counts the shrinks.
	{name: "preemption+time-min+shrink", flags: []string{"--give-back", "preemption", "--shrink", "--min-pilot-time", "1m"}},
	// The default poll (10 s, 2 s fast) with the job-event check (sdiag
	// every second, the default): a job that arrives onto pilots waits
	// for a check, not a poll. Only in the scenarios that name it.
	{name: gbEventMode, flags: []string{"--give-back", "polling", "--poll", "10s", "--fast-poll", "2s", "--event-check", "1s"}, optIn: true},
}

// gbEventMode is the default poll with the event check; its bound is
// issue 33's target, one poll (10 s) plus 2 s. Measured: the burst's last
// job 6.9 s later than the baseline (11.1 and 17.4 s while the check could
// not reach the plugin or pushed the round back).
const gbEventMode = "polling, 10 s poll + event check"

// gbScenario is a scene on the 8-node cluster. setup submits the foreign
// jobs already there (and returns how many nodes pilots should hold);
// event makes the measured job startable and returns its id and the
// reference time (Unix ms) its start is measured from.
type gbScenario struct {
	name  string
	setup func(s *gbRun) (pilots int)
	event func(s *gbRun) (job string, ref func() int64)
	// modes, when set, are the only modes run (besides the baseline).
	modes []string
	// pollBound, when set, is polling's bound on the delay instead of one
	// poll plus gbPollSlack.
	pollBound time.Duration
	// waits: a foreign job waits when the pilots take the nodes, so a
	// polling agent leaves its idle margin free (idle-margin, default 1).
	waits bool
}

// gbRun is one scenario run in one mode.
type gbRun struct {
	t    *testing.T
	c    *slurmtest.Cluster
	dir  string // shared work directory of the run
	log  *ctldLog
	flag string // touched to end the "blocker" job
	// ledger is where the harvest tasks note their attempts: in their
	// job's output directory, the only place confined tasks may write.
	ledger string
	addr   string // the agent's HTTP address, read back from its log
	job    int64  // the harvest job's id
	shrink bool   // the agent runs with --shrink
}

func TestRealSLURMGiveBackModes(t *testing.T) {
	c := slurmtest.RequireWith(t, 8, slurmtest.Options{Preempt: true})
	bin := sharedHarvest(t, c)
	scenarios := []gbScenario{
		{
			// A hole: r1 (3 nodes) and r2 (2 nodes) run, big (6 nodes)
			// waits for r1; pilots take the 3 idle nodes (2 when polling:
			// the idle margin). r1 ends early.
			name:  "hole, running job ends early",
			waits: true,
			setup: func(s *gbRun) int {
				s.sbatch("alice", s.blocker(), "-N3", "-t", "3", "-J", "r1")
				s.sbatch("bob", "sleep 600", "-N2", "-t", "10", "-J", "r2")
				s.waitRunning("r1", "r2")
				s.sbatch("alice", "sleep 20", "-N6", "-t", "2", "-J", "big")
				s.waitReason("big", "Resources")
				return 3
			},
			event: func(s *gbRun) (string, func() int64) {
				r1 := s.id("r1")
				s.release()
				return s.id("big"), func() int64 { return s.log.wait(s.t, "end", r1) }
			},
		},
		{
			// Pilots hold every node but r2's; a 4-node job arrives at the
			// top of the queue.
			name:  "new top-priority job",
			modes: []string{"polling", "preemption", "preemption+time-min+shrink", gbEventMode},
			setup: func(s *gbRun) int {
				s.sbatch("bob", "sleep 600", "-N2", "-t", "10", "-J", "r2")
				s.waitRunning("r2")
				return 6
			},
			event: func(s *gbRun) (string, func() int64) {
				id := s.sbatch("alice", "sleep 10", "-N4", "-t", "2", "-J", "top")
				return id, func() int64 { return s.log.wait(s.t, "submit", id) }
			},
		},
		{
			// r1 (4 nodes) runs for minutes, big (8 nodes) waits for it;
			// pilots take the other 4 (3 when polling). A short 2-node job arrives that
			// ends before big can start: only backfill may start it.
			name:  "backfillable job",
			waits: true,
			setup: func(s *gbRun) int {
				s.sbatch("alice", s.blocker(), "-N4", "-t", "5", "-J", "r1")
				s.waitRunning("r1")
				s.sbatch("alice", "sleep 20", "-N8", "-t", "2", "-J", "big")
				s.waitReason("big", "Resources")
				return 4
			},
			event: func(s *gbRun) (string, func() int64) {
				id := s.sbatch("bob", "sleep 10", "-N2", "-t", "1", "-J", "short")
				return id, func() int64 { return s.log.wait(s.t, "submit", id) }
			},
		},
		{
			// Every node holds a pilot; an 8-node job arrives.
			name:  "wide job, every node a pilot",
			setup: func(s *gbRun) int { return 8 },
			event: func(s *gbRun) (string, func() int64) {
				id := s.sbatch("alice", "sleep 10", "-N8", "-t", "2", "-J", "wide")
				return id, func() int64 { return s.log.wait(s.t, "submit", id) }
			},
		},
		{
			// Issue 33: pilots hold every node and six 1-node jobs arrive
			// together. The agent releases for all six in one round, not
			// one per round. The measured job is the burst's last to start
			// (job ids joined by commas), from the burst's first submission.
			name:      "burst of 6 jobs, every node a pilot",
			modes:     []string{"polling", gbEventMode},
			pollBound: gbPoll + 2*time.Second,
			setup:     func(s *gbRun) int { return 8 },
			event: func(s *gbRun) (string, func() int64) {
				var ids []string
				for i, u := range []string{"alice", "bob", "carol", "alice", "bob", "carol"} {
					ids = append(ids, s.sbatch(u, "sleep 10", "-N1", "-t", "2", "-J", fmt.Sprintf("burst%d", i)))
				}
				return strings.Join(ids, ","), func() int64 { return s.log.wait(s.t, "submit", ids[0]) }
			},
		},
		{
			// Item 4: r1 (2 nodes, 3 min) runs, unlimited pilots hold the
			// other 6; an 8-node job arrives and must wait for r1. With
			// --shrink the agent pulls the pilots' ends in before r1's
			// limit, and every shrunk pilot must hear of its new end (its
			// master passes it on at the next heartbeat). Then r1 ends
			// early and the 8-node job starts.
			name:  "wide job behind a running job, pilots shrunk",
			modes: []string{"preemption+time-min+shrink"},
			setup: func(s *gbRun) int {
				s.sbatch("bob", s.blocker(), "-N2", "-t", "3", "-J", "r1")
				s.waitRunning("r1")
				return 6
			},
			event: func(s *gbRun) (string, func() int64) {
				r1 := s.id("r1")
				s.sbatch("alice", "sleep 10", "-N8", "-t", "2", "-J", "wide")
				if s.shrink {
					s.waitShrunkPilotsTold()
				}
				s.release()
				return s.id("wide"), func() int64 { return s.log.wait(s.t, "end", r1) }
			},
		},
	}
	for _, sc := range scenarios {
		t.Run(sc.name, func(t *testing.T) {
			var base time.Duration
			var baseEach []time.Duration
			for _, m := range gbModes {
				if m.flags != nil && (sc.modes != nil && !slices.Contains(sc.modes, m.name) || sc.modes == nil && m.optIn) {
					continue
				}
				r := gbOnce(t, c, bin, sc, m)
				latency := r.latency
				if m.flags == nil {
					base, baseEach = latency, r.each
					t.Logf("FIGURES scenario=%q mode=%s latency_s=%.3f", sc.name, m.name, latency.Seconds())
					continue
				}
				delay := latency - base
				// Late job-seconds: every measured job's delay against the
				// baseline's, job by job (issue 33 item 3).
				var late time.Duration
				for i, d := range r.each {
					if i < len(baseEach) {
						late += max(0, d-baseEach[i])
					}
				}
				t.Logf("FIGURES scenario=%q mode=%s latency_s=%.3f delay_s=%.3f late_s=%.3f lost_task_s=%.1f preempted=%d shrunk=%d",
					sc.name, m.name, latency.Seconds(), delay.Seconds(), late.Seconds(), r.lost, r.preempted, r.shrunk)
				bound := gbPreemptMax
				switch m.name {
				case gbEventMode:
					bound = 12 * time.Second
				case "polling":
					bound = gbPoll + gbPollSlack
					if sc.pollBound > 0 {
						bound = sc.pollBound
					}
				}
				if delay > bound {
					t.Errorf("%s: the foreign job started %.3f s later than without harvesting; the bound is %v", m.name, delay.Seconds(), bound)
				}
			}
		})
	}
}

// sharedHarvest creates the test users and builds the harvest binary
// where they can run it: the harvest submit of a test user must reach it.
func sharedHarvest(t *testing.T, c *slurmtest.Cluster) string {
	t.Helper()
	c.Script(t, "users", "alice", "bob", "carol")
	bin := filepath.Join(c.Lab, "shared", fmt.Sprintf("giveback-bin-%d", os.Getpid()), "harvest")
	if err := os.MkdirAll(filepath.Dir(bin), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(filepath.Dir(bin)) })
	if err := os.Rename(buildHarvest(t, c.Root), bin); err != nil {
		t.Fatal(err)
	}
	os.Chmod(bin, 0o755)
	return bin
}

// newGBRun cancels every job on the cluster and makes the run's shared
// work directory.
func newGBRun(t *testing.T, c *slurmtest.Cluster) *gbRun {
	t.Helper()
	c.CancelAll(t)
	dir := filepath.Join(c.Lab, "shared", fmt.Sprintf("giveback-%d", time.Now().UnixNano()))
	for _, d := range []string{"", "agent", "state", "pilots", "data"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	os.Chmod(dir, 0o777|os.ModeSticky)
	if os.Getenv("HARVEST_GIVEBACK_KEEP") == "" {
		t.Cleanup(func() { os.RemoveAll(dir) })
	}
	return &gbRun{t: t, c: c, dir: dir, log: openCtldLog(t, c), flag: filepath.Join(dir, "release")}
}

// gbResult is what one run measured.
type gbResult struct {
	latency time.Duration // the measured job's reference to start
	// each is every measured job's reference to start, in the event's
	// order (one job but in a burst): late job-seconds sum them.
	each      []time.Duration
	lost      float64 // task seconds lost, from the tasks' ledger
	preempted int     // pilots SLURM preempted
	shrunk    int     // pilot ends the agent pulled in
}

// gbOnce runs scenario sc in mode m. Besides the figures it checks what
// issue 11 promises of an agent run: no task was charged an attempt for
// the give-back (the harvest job allows one attempt), and every pilot
// read its end from SLURM when it started.
func gbOnce(t *testing.T, c *slurmtest.Cluster, bin string, sc gbScenario, m gbMode) gbResult {
	t.Helper()
	s := newGBRun(t, c)
	s.shrink = slices.Contains(m.flags, "--shrink")
	pilots := sc.setup(s)
	if sc.waits && slices.Contains(m.flags, "polling") {
		pilots -= agent.DefaultConfig().Policy.IdleMargin
	}

	var agent *exec.Cmd
	if m.flags != nil {
		agent = s.startAgent(bin, m.flags)
		defer s.stopAgent(agent)
		s.submitHarvest(bin)
		s.waitPilots(pilots)
	}
	job, ref := sc.event(s)
	// A burst (ids joined by commas) is measured by its last start.
	start := int64(0)
	var starts []int64
	for _, id := range strings.Split(job, ",") {
		starts = append(starts, s.log.wait(t, "start", id))
		start = max(start, starts[len(starts)-1])
	}
	r0 := ref()
	latency := time.Duration(start-r0) * time.Millisecond
	r := gbResult{latency: latency}
	for _, st := range starts {
		r.each = append(r.each, time.Duration(st-r0)*time.Millisecond)
	}
	reported := 0.0
	if agent != nil {
		r.preempted = s.preempted()
		r.lost = s.lostByLedger(start)
		reported = s.lostTaskSeconds(m.name, r.lost)
		if f := s.failedTasks(bin); f != 0 {
			t.Errorf("%s: %d harvest tasks failed: an interrupted attempt was charged (max_attempts 1)", m.name, f)
		}
		agentLog := s.agentLog()
		r.shrunk = strings.Count(agentLog, `msg="pulled in a pilot's end"`)
		if slices.Contains(m.flags, "--min-pilot-time") && !strings.Contains(agentLog, "the minimum pilot limit is not used") &&
			!strings.Contains(agentLog, "pilots sized by the batch system") {
			t.Errorf("%s: the agent neither used nor refused --min-pilot-time", m.name)
		}
		// SLURM's answer (squeue, or none for an unlimited pilot), never
		// a limit the agent would have had to guess.
		sources := s.deadlineSources()
		if len(sources) == 0 {
			t.Errorf("%s: no pilot logged where it read its end", m.name)
		}
		for src, n := range sources {
			if src != "squeue" && src != "SLURM_JOB_END_TIME" && src != "none" {
				t.Errorf("%s: %d pilots took their end from %s, not from SLURM", m.name, n, src)
			}
		}
		t.Logf("%s: pilots' ends read from %v", m.name, sources)
	}
	s.release()
	t.Logf("%s: job %s started %.3f s after its event; %d pilots preempted; %d ends pulled in; task time lost %.1f s (the queue heard of %.1f s)",
		m.name, job, latency.Seconds(), r.preempted, r.shrunk, r.lost, reported)
	return r
}

// gbEndPulledRE finds a pilot's end the agent pulled in, in its log.
var gbEndPulledRE = regexp.MustCompile(`msg="pulled in a pilot's end" pilot=(\d+)`)

// waitShrunkPilotsTold waits for the agent to pull pilots' ends in, then
// for each of those pilots to log its new end, and logs how long that took.
func (s *gbRun) waitShrunkPilotsTold() {
	s.t.Helper()
	var shrunk [][][]byte
	slurmtest.WaitFor(s.t, "the agent to pull pilots' ends in", 30*time.Second, func() bool {
		shrunk = gbEndPulledRE.FindAllSubmatch([]byte(s.agentLog()), -1)
		return len(shrunk) > 0
	})
	at := time.Now()
	slurmtest.WaitFor(s.t, "the shrunk pilots to hear of their new ends", 15*time.Second, func() bool {
		for _, m := range shrunk {
			b, _ := os.ReadFile(filepath.Join(s.dir, "pilots", "pilot-"+string(m[1])+".out"))
			if !bytes.Contains(b, []byte(`msg="pilot end pulled in"`)) {
				return false
			}
		}
		return true
	})
	s.t.Logf("%d pilot ends pulled in; every one of those pilots logged its new end within %v of the agent's log line being seen",
		len(shrunk), time.Since(at).Round(100*time.Millisecond))
}

// agentLog is the agent's log so far.
func (s *gbRun) agentLog() string {
	b, err := os.ReadFile(filepath.Join(s.dir, "agent.log"))
	if err != nil {
		s.t.Fatal(err)
	}
	return string(b)
}

// gbDeadlineRE finds where a pilot took its end from (harvest pilot logs it at start).
var gbDeadlineRE = regexp.MustCompile(`msg="pilot deadline" deadline=\S+ source=(\S+)`)

// deadlineSources counts the pilots of the run by where they read their end.
func (s *gbRun) deadlineSources() map[string]int {
	files, _ := filepath.Glob(filepath.Join(s.dir, "pilots", "pilot-*.out"))
	n := map[string]int{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			s.t.Fatal(err)
		}
		if m := gbDeadlineRE.FindSubmatch(b); m != nil {
			n[string(m[1])]++
		}
	}
	return n
}

// failedTasks is how many tasks of the harvest job failed, as its owner sees it.
func (s *gbRun) failedTasks(bin string) int {
	s.t.Helper()
	out := s.c.Run(s.t, "carol", bin, "status", strconv.FormatInt(s.job, 10), "--json", "--queue", "unix://"+s.socket())
	var j struct {
		Tasks struct {
			Failed int `json:"failed"`
		} `json:"tasks"`
	}
	if err := json.Unmarshal([]byte(out), &j); err != nil {
		s.t.Fatalf("harvest status --json said %q: %v", out, err)
	}
	return j.Tasks.Failed
}

// blocker is a job script that runs until release is called.
func (s *gbRun) blocker() string {
	return fmt.Sprintf("while [ ! -e %s ]; do sleep 0.1; done", s.flag)
}

// release ends the blocker jobs.
func (s *gbRun) release() {
	if err := os.WriteFile(s.flag, nil, 0o644); err != nil {
		s.t.Fatal(err)
	}
}

func (s *gbRun) sbatch(user, script string, args ...string) string {
	s.t.Helper()
	return s.c.Sbatch(s.t, user, script, args...)
}

// id is the id of the job named name (the last one submitted).
func (s *gbRun) id(name string) string {
	s.t.Helper()
	out := s.c.Run(s.t, "", "squeue", "-h", "-n", name, "-o", "%i")
	f := strings.Fields(out)
	if len(f) == 0 {
		s.t.Fatalf("no job named %s", name)
	}
	return f[len(f)-1]
}

func (s *gbRun) waitRunning(names ...string) {
	s.t.Helper()
	slurmtest.WaitFor(s.t, strings.Join(names, ", ")+" running", 20*time.Second, func() bool {
		for _, n := range names {
			if s.c.JobState(s.t, s.id(n)) != "RUNNING" {
				return false
			}
		}
		return true
	})
}

func (s *gbRun) waitReason(name, reason string) {
	s.t.Helper()
	slurmtest.WaitFor(s.t, name+" pending for "+reason, 20*time.Second, func() bool {
		return s.c.JobField(s.t, s.id(name), "Reason") == reason
	})
}

func (s *gbRun) startAgent(bin string, flags []string) *exec.Cmd {
	s.t.Helper()
	pilot := fmt.Sprintf("%s pilot --heartbeat 1s --master-grace 10s --reconnect-grace 10s --worker-timeout 15s --safety-margin 10s", bin)
	args := append([]string{"agent",
		"--state-dir", filepath.Join(s.dir, "agent"), "--shared-dir", filepath.Join(s.dir, "state"),
		"--listen", "127.0.0.1:0", "--socket", s.socket(), "--allowed-root", s.dir,
		"--poll", gbPoll.String(), "--margin", "30s", "--mini-time", "10s", "--metrics-anonymous",
		"--pilot-command", pilot, "--pilot-output", filepath.Join(s.dir, "pilots", "pilot-%j.out"),
		"--log-level", "info"}, flags...)
	a := exec.Command(bin, args...)
	f, err := os.Create(filepath.Join(s.dir, "agent.log"))
	if err != nil {
		s.t.Fatal(err)
	}
	a.Stdout, a.Stderr = f, f
	if err := a.Start(); err != nil {
		s.t.Fatal(err)
	}
	// Port 0: a busy fixed port would fail the test for nothing. The
	// agent logs the address it got.
	slurmtest.WaitFor(s.t, "the agent's socket and address", 15*time.Second, func() bool {
		b, _ := os.ReadFile(filepath.Join(s.dir, "agent.log"))
		if m := gbAdvertiseRE.FindSubmatch(b); m != nil {
			s.addr = string(m[1])
		}
		_, err := os.Stat(s.socket())
		return err == nil && s.addr != ""
	})
	return a
}

// gbAdvertiseRE finds the queue's TCP address in the agent's log.
var gbAdvertiseRE = regexp.MustCompile(`msg="queue API listening" component=queue addr=(127\.0\.0\.1:\d+)`)

func (s *gbRun) stopAgent(a *exec.Cmd) {
	a.Process.Signal(syscall.SIGTERM)
	done := make(chan error, 1)
	go func() { done <- a.Wait() }()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		a.Process.Kill()
		<-done
		s.t.Errorf("the agent did not stop within 20 s of SIGTERM")
	}
	if s.t.Failed() {
		b, _ := os.ReadFile(filepath.Join(s.dir, "agent.log"))
		s.t.Logf("agent log:\n%s", tailLines(string(b), 40))
	}
}

// socket lies outside the agent's private (0700) state directory, where users can reach it.
func (s *gbRun) socket() string { return filepath.Join(s.dir, "run", "q.sock") }

// submitHarvest submits, as carol, a harvest job of 3-second tasks, more
// than the run can finish.
func (s *gbRun) submitHarvest(bin string) {
	s.t.Helper()
	data := filepath.Join(s.dir, "data")
	for i := range 400 {
		if err := os.MkdirAll(filepath.Join(data, fmt.Sprintf("t%03d", i)), 0o755); err != nil {
			s.t.Fatal(err)
		}
	}
	if out, err := exec.Command("chown", "-R", "carol", data).CombinedOutput(); err != nil {
		s.t.Fatalf("chown: %v %s", err, out)
	}
	// Each attempt writes its start and, if it is not stopped, its end.
	task := fmt.Sprintf(`l="$(dirname {output})/.ledger"; echo "S {task} $HARVEST_PILOT_ID $(date +%%s.%%N)" >> "$l"; sleep %[1]d; echo "D {task} $HARVEST_PILOT_ID $(date +%%s.%%N)" >> "$l"; echo done > {output}`,
		gbTaskTime)
	// One attempt per task: a give-back that charged one would fail it.
	out := s.c.Run(s.t, "carol", bin, "submit", "--queue", "unix://"+s.socket(), "--json", "--batch-size", "1", "--max-attempts", "1",
		data, "--", "/bin/sh", "-c", task)
	var j struct {
		ID        int64  `json:"id"`
		OutputDir string `json:"output_dir"`
	}
	if err := json.Unmarshal([]byte(out), &j); err != nil || j.OutputDir == "" {
		s.t.Fatalf("harvest submit --json said %q: %v", out, err)
	}
	s.ledger, s.job = filepath.Join(j.OutputDir, ".ledger"), j.ID
}

// lostByLedger sums, over the attempts that started before the foreign
// job (at start, Unix ms) on a pilot that no longer runs and never
// finished, the time they had run when it started: the work the give-back
// threw away, as the tasks themselves recorded it. Attempts on pilots
// still running are not lost, finished or not.
func (s *gbRun) lostByLedger(start int64) float64 {
	s.t.Helper()
	alive := map[string]bool{}
	for _, id := range strings.Fields(s.c.Run(s.t, "", "squeue", "-h", "-n", "harvest-pilot", "-t", "RUNNING", "-o", "%i")) {
		alive[id] = true
	}
	// waitPilots saw tasks run, so the ledger exists: an error here means
	// the tasks could not write it and the figure would be a silent 0.
	b, err := os.ReadFile(s.ledger)
	if err != nil {
		s.t.Fatalf("the tasks' ledger: %v", err)
	}
	type attempt struct {
		pilot string
		at    float64
	}
	open := map[string]attempt{} // task -> its unfinished attempt
	for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		// A short line would make the figure a silent 0: "S|D TASK PILOT TIME".
		f := strings.Fields(l)
		at, err := 0.0, error(nil)
		if len(f) == 4 {
			at, err = strconv.ParseFloat(f[3], 64)
		}
		if len(f) != 4 || err != nil {
			s.t.Fatalf("the tasks' ledger %s: line %q is not \"S|D TASK PILOT TIME\"", s.ledger, l)
		}
		switch f[0] {
		case "S":
			if at*1000 < float64(start) {
				open[f[1]] = attempt{f[2], at}
			}
		case "D":
			delete(open, f[1])
		}
	}
	lost := 0.0
	for _, a := range open {
		if !alive[a.pilot] {
			lost += float64(start)/1000 - a.at
		}
	}
	return lost
}

// waitPilots waits until n pilots run and have run a task (so they are
// busy when the event comes).
func (s *gbRun) waitPilots(n int) {
	s.t.Helper()
	slurmtest.WaitFor(s.t, fmt.Sprintf("%d pilots running tasks", n), 60*time.Second, func() bool {
		out := s.c.Run(s.t, "", "squeue", "-h", "-n", "harvest-pilot", "-t", "RUNNING", "-o", "%i")
		return len(strings.Fields(out)) >= n && s.metric("harvest_pilots", `state="busy"`) >= float64(n)
	})
}

// preempted counts the jobs SLURM preempted in this run (only pilots can
// be: they alone run in the preemptible partition).
func (s *gbRun) preempted() int {
	return s.log.count(regexp.MustCompile(`preempted JobId=\d+ has been killed`))
}

// lostTaskSeconds reads the agent's harvest_lost_task_seconds_total. When
// the tasks' own ledger says they lost work (more than 1 s), the counter
// must hear of it: the test waits for that, within a few heartbeats, and
// fails otherwise.
func (s *gbRun) lostTaskSeconds(mode string, ledger float64) float64 {
	s.t.Helper()
	read := func() float64 { return s.metric("harvest_lost_task_seconds_total", "") }
	if ledger > 1 {
		slurmtest.WaitFor(s.t, fmt.Sprintf("%s: harvest_lost_task_seconds_total to count the %.1f s the tasks' ledger lost", mode, ledger),
			15*time.Second, func() bool { return read() > 0 })
	}
	return read()
}

// metric reads one series of the agent's /metrics (0 if absent).
func (s *gbRun) metric(name, label string) float64 {
	resp, err := http.Get("http://" + s.addr + "/metrics")
	if err != nil {
		return 0
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		l := sc.Text()
		if !strings.HasPrefix(l, name) || strings.HasPrefix(l, "#") || !strings.Contains(l, label) {
			continue
		}
		f := strings.Fields(l)
		if v, err := strconv.ParseFloat(f[len(f)-1], 64); err == nil {
			return v
		}
	}
	return 0
}

// ctldLog reads slurmctld's log from where it was when the run began:
// submissions, starts and ends to the millisecond.
type ctldLog struct {
	path string
	from int64
}

func openCtldLog(t *testing.T, c *slurmtest.Cluster) *ctldLog {
	p := filepath.Join(c.Lab, "run", "log", "slurmctld.log")
	fi, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	return &ctldLog{path: p, from: fi.Size()}
}

var ctldLine = regexp.MustCompile(`^\[(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3})\] (.*)$`)

// wait returns when (Unix ms) job id was submitted, started or ended,
// waiting for it up to 60 s.
func (l *ctldLog) wait(t *testing.T, what, id string) int64 {
	t.Helper()
	var pat *regexp.Regexp
	switch what {
	case "submit":
		pat = regexp.MustCompile(`_slurm_rpc_submit_batch_job: JobId=` + id + ` `)
	case "start":
		pat = regexp.MustCompile(`(sched: Allocate JobId=` + id + ` |_start_job: Started JobId=` + id + ` )`)
	case "end":
		pat = regexp.MustCompile(`_job_complete: JobId=` + id + ` done`)
	}
	var at int64
	slurmtest.WaitFor(t, fmt.Sprintf("job %s's %s in slurmctld's log", id, what), 60*time.Second, func() bool {
		at = l.find(pat)
		return at > 0
	})
	return at
}

// count counts the lines matching pat.
func (l *ctldLog) count(pat *regexp.Regexp) int {
	n := 0
	l.scan(func(_ time.Time, msg string) bool {
		if pat.MatchString(msg) {
			n++
		}
		return true
	})
	return n
}

// find returns when (Unix ms) the first line matching pat was logged, or 0.
func (l *ctldLog) find(pat *regexp.Regexp) int64 {
	var at int64
	l.scan(func(ts time.Time, msg string) bool {
		if pat.MatchString(msg) {
			at = ts.UnixMilli()
			return false
		}
		return true
	})
	return at
}

// scan calls f for each line logged since the run began, until f says stop.
func (l *ctldLog) scan(f func(ts time.Time, msg string) bool) {
	file, err := os.Open(l.path)
	if err != nil {
		return
	}
	defer file.Close()
	file.Seek(l.from, io.SeekStart)
	sc := bufio.NewScanner(file)
	for sc.Scan() {
		m := ctldLine.FindStringSubmatch(sc.Text())
		if m == nil {
			continue
		}
		ts, err := time.ParseInLocation("2006-01-02T15:04:05.000", m[1], time.Local)
		if err == nil && !f(ts, m[2]) {
			return
		}
	}
}

func tailLines(s string, n int) string {
	ls := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(ls) > n {
		ls = ls[len(ls)-n:]
	}
	return strings.Join(ls, "\n")
}
