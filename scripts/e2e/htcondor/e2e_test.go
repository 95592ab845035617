// Package htcondor is the end-to-end harvest on the real HTCondor pool of
// scripts/minipool.sh (HARVEST_HTCONDOR_TESTS=1): the pool's own users
// run a scripted workload once without harvest and once with an agent
// harvesting a user's dataset on the idle slots (pilots are real
// HTCondor jobs running `harvest pilot`), and the test checks that no
// task was lost or done twice and that the foreign jobs did not wait
// longer than one poll plus a slack for it.
package htcondor

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/harvest-hpc/harvest/internal/condortest"
)

const (
	nodes = 4
	// enough work to outlast the foreign workload
	tasks     = 100
	taskTime  = 2 * time.Second
	batchSize = 2
	poll      = 2 * time.Second
	// slack is what a foreign job may wait beyond one poll for harvest:
	// the pilot's removal (condor_rm, the starter's SIGTERM), the slot's
	// next ad and a negotiation cycle (2 s intervals in the pool), with
	// room for a loaded CI machine. Without the give-back the owners'
	// jobs would wait for the harvest job's end, a minute or more.
	slack = 20 * time.Second
	// harvester is the user whose dataset is harvested.
	harvester = "carol"
	ledger    = ".ledger"
)

// foreignJob is one job of the pool's own users, at an offset from the
// start of the workload.
type foreignJob struct {
	at   time.Duration
	user string
	run  int // seconds
}

// workload: alice and bob fill the pool, then more of alice's jobs wait
// for slots, the same in both runs.
var workload = []foreignJob{
	{0, "alice", 20}, {0, "alice", 20},
	{5 * time.Second, "bob", 15}, {5 * time.Second, "bob", 15},
	{15 * time.Second, "alice", 10}, {15 * time.Second, "alice", 10}, {15 * time.Second, "alice", 10},
	{30 * time.Second, "bob", 5},
}

type e2e struct {
	t        *testing.T
	p        *condortest.Pool
	work     string
	harvest  string
	agent    *exec.Cmd
	agentLog string
}

func TestHarvestOnTheRealHTCondorPool(t *testing.T) {
	p := condortest.Require(t, nodes)
	r := &e2e{t: t, p: p}
	r.work = filepath.Join(p.Shared, fmt.Sprintf("e2e-%d", time.Now().UnixNano()))
	for _, d := range []string{"agent", "state", "data", "pilots", "dumps"} {
		if err := os.MkdirAll(filepath.Join(r.work, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		if !t.Failed() {
			os.RemoveAll(r.work)
		} else {
			t.Logf("work directory kept: %s", r.work)
		}
	})
	// Pilots run as the submitter account: they write their logs there,
	// and the master's checkpoint in the shared state directory.
	p.Run(t, "", "chown", condortest.Submitter, filepath.Join(r.work, "pilots"), filepath.Join(r.work, "state"))
	r.installHarvest()

	t0 := time.Now()
	base := r.runWorkload("without harvest")
	baseTime := time.Since(t0)

	// The dataset: one entry per task, read by the task, owned by the
	// harvester; the outputs go where the pilots' account may write.
	ds := filepath.Join(r.work, "data", harvester)
	for i := 0; i < tasks; i++ {
		sub := filepath.Join(ds, fmt.Sprintf("sub%04d", i))
		if err := os.MkdirAll(sub, 0o755); err != nil {
			t.Fatal(err)
		}
		os.WriteFile(filepath.Join(sub, "data.txt"), []byte(fmt.Sprintf("%s %d\n", harvester, i)), 0o644)
	}
	p.Run(t, "", "chown", "-R", harvester, ds)
	// The output directory is the harvester's (the queue checks), and
	// the pilots' account writes it through its group: on HTCondor every
	// pilot runs as the submitter account.
	out := filepath.Join(r.work, "data", "out")
	os.Mkdir(out, 0o755)
	p.Run(t, "", "chown", harvester+":"+condortest.Submitter, out)
	p.Run(t, "", "chmod", "2770", out)

	r.startAgent()
	defer r.stopAgent()
	cmd := fmt.Sprintf(`l="$(dirname {output})/%[3]s"; sleep %.3[1]f; cat {input}/data.txt > {output}; echo "%[2]s {task} $(date +%%s.%%N)" >> "$l"`,
		taskTime.Seconds(), harvester, ledger)
	sub := p.Run(t, harvester, r.harvest, "submit", "--queue", "unix://"+r.socket(), "--json", "--batch-size", strconv.Itoa(batchSize),
		"--output", out, ds, "--", "/bin/sh", "-c", cmd)
	var job struct {
		ID int64 `json:"id"`
	}
	if err := json.Unmarshal([]byte(sub), &job); err != nil {
		t.Fatalf("submit output %q: %v", sub, err)
	}
	// The harvest holds the idle pool before the owners come back.
	harvestStart := time.Now()
	condortest.WaitFor(t, "pilots on every node and tasks done", 120*time.Second, func() bool {
		return r.pilotsRunning() == nodes && r.status(job.ID).Tasks.Done > 0
	})
	t.Logf("pilots on all %d nodes, tasks running, %v after the submit", nodes, time.Since(harvestStart).Round(100*time.Millisecond))
	with := r.runWorkload("with harvest")
	var final jobStatus
	condortest.WaitFor(t, "the harvest job final", 5*time.Minute, func() bool {
		final = r.status(job.ID)
		return isFinal(final.State)
	})
	harvestTime := time.Since(harvestStart)

	// Every task's output exists, once, with its entry's content.
	lost := 0
	for i := 0; i < tasks; i++ {
		b, err := os.ReadFile(filepath.Join(out, fmt.Sprintf("sub%04d", i)))
		if err != nil || string(b) != fmt.Sprintf("%s %d\n", harvester, i) {
			lost++
		}
	}
	outs, _ := filepath.Glob(filepath.Join(out, "sub*"))
	runs := ledgerRuns(filepath.Join(out, ledger))
	reexec := 0
	for _, n := range runs {
		reexec += n - 1
	}
	if final.State != "DONE" || final.Tasks.Done != tasks || final.Tasks.Total != tasks {
		t.Errorf("harvest job %s, %d/%d done, want DONE %d/%d", final.State, final.Tasks.Done, final.Tasks.Total, tasks, tasks)
	}
	if lost != 0 || len(outs) != tasks || len(runs) != tasks {
		t.Errorf("%d tasks lost, %d outputs, %d tasks in the ledger; want 0, %d, %d", lost, len(outs), len(runs), tasks, tasks)
	}

	var extra []float64
	for i := range workload {
		extra = append(extra, with[i]-base[i])
	}
	maxExtra, meanExtra := 0.0, 0.0
	for _, e := range extra {
		maxExtra = math.Max(maxExtra, e)
		meanExtra += e / float64(len(extra))
	}
	t.Logf("FIGURES: HTCondor 25.14 pool, %d nodes (one 1-CPU partitionable slot each), poll %v: %d tasks of %v (batch %d) done by pilots in %v "+
		"(harvest job %s, %d/%d done, %d lost, %d outputs, %d re-executions after pilot releases); %d foreign jobs: start waits without harvest %v s, with harvest %v s; "+
		"delay by harvest mean %.1f s, max %.1f s (bound poll + %v); workload alone %v",
		nodes, poll, tasks, taskTime, batchSize, harvestTime.Round(100*time.Millisecond), final.State, final.Tasks.Done, final.Tasks.Total, lost, len(outs), reexec,
		len(workload), base, with, meanExtra, maxExtra, slack, baseTime.Round(100*time.Millisecond))
	if maxExtra > (poll + slack).Seconds() {
		t.Errorf("a foreign job waited %.1f s longer with harvest than without (bound %v)", maxExtra, poll+slack)
	}
}

// runWorkload submits the foreign workload at its offsets, waits until
// every job has run, and returns each job's wait (start - submit, s).
func (r *e2e) runWorkload(what string) []float64 {
	t := r.t
	t0 := time.Now()
	ids := make([]string, len(workload))
	for i, f := range workload {
		time.Sleep(time.Until(t0.Add(f.at)))
		ids[i] = r.p.Submit(t, f.user, fmt.Sprintf("sleep %d", f.run), "batch_name = bg-"+f.user)
	}
	waits := make([]float64, len(ids))
	condortest.WaitFor(t, "the foreign workload done ("+what+")", 4*time.Minute, func() bool {
		for i, id := range ids {
			if waits[i] != 0 {
				continue
			}
			out, err := r.p.Try("", "condor_history", id, "-af", "QDate", "JobStartDate", "JobStatus")
			f := strings.Fields(out)
			if err != nil || len(f) != 3 || f[2] != "4" {
				return false
			}
			q, _ := strconv.ParseFloat(f[0], 64)
			s, _ := strconv.ParseFloat(f[1], 64)
			waits[i] = math.Max(s-q, 1e-9)
		}
		return true
	})
	for i := range waits {
		waits[i] = math.Round(waits[i])
	}
	t.Logf("foreign workload %s: waits %v s, %v", what, waits, time.Since(t0).Round(100*time.Millisecond))
	return waits
}

func (r *e2e) installHarvest() {
	t := r.t
	src := os.Getenv("HARVEST_BIN")
	if src == "" {
		if p, err := exec.LookPath("harvest"); err == nil {
			src = p
		}
	}
	r.harvest = filepath.Join(r.work, "harvest")
	if src == "" {
		t.Logf("building harvest (set HARVEST_BIN or put it in PATH to skip this)")
		build := exec.Command("go", "build", "-o", r.harvest, "./cmd/harvest")
		build.Dir = r.p.Root
		if out, err := build.CombinedOutput(); err != nil {
			t.Fatalf("go build: %v\n%s", err, out)
		}
		return
	}
	// A copy the pilots' account can execute, wherever the build lies.
	in, err := os.Open(src)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	dst, err := os.OpenFile(r.harvest, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o755)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(dst, in); err != nil {
		t.Fatal(err)
	}
	if err := dst.Close(); err != nil {
		t.Fatal(err)
	}
}

func (r *e2e) socket() string { return filepath.Join(r.work, "queue.sock") }

// advertiseRE finds the queue's TCP address in the agent's log.
var advertiseRE = regexp.MustCompile(`msg="queue started" advertise=(\S+)`)

func (r *e2e) startAgent() {
	t := r.t
	r.agentLog = filepath.Join(r.work, "agent.log")
	f, err := os.Create(r.agentLog)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	pilot := fmt.Sprintf("%s pilot --heartbeat 1s --master-grace 10s --reconnect-grace 10s --worker-timeout 15s", r.harvest)
	r.agent = exec.Command(r.harvest, "agent", "--adapter", "htcondor",
		"--adapter-opt", "submit_user="+condortest.Submitter, "--adapter-opt", "max_lifetime=30m",
		"--state-dir", filepath.Join(r.work, "agent"), "--shared-dir", filepath.Join(r.work, "state"),
		"--listen", "127.0.0.1:0", "--socket", r.socket(), "--allowed-root", filepath.Join(r.work, "data"),
		"--poll", poll.String(), "--margin", "30s", "--mini-time", "10s",
		"--pilot-command", pilot, "--pilot-workdir", filepath.Join(r.work, "pilots"),
		"--pilot-output", filepath.Join(r.work, "pilots", "pilot-$(Cluster).out"),
		"--dump-snapshots", filepath.Join(r.work, "dumps"), "--log-level", "info")
	r.agent.Env = os.Environ()                                             // the pool's (condortest.Require set it)
	r.agent.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM} // not left behind by a killed test
	r.agent.Stdout, r.agent.Stderr = f, f
	if err := r.agent.Start(); err != nil {
		t.Fatal(err)
	}
	condortest.WaitFor(t, "the agent's socket and listener", 30*time.Second, func() bool {
		_, err := os.Stat(r.socket())
		b, _ := os.ReadFile(r.agentLog)
		return err == nil && advertiseRE.Match(b)
	})
}

func (r *e2e) stopAgent() {
	if r.agent == nil {
		return
	}
	r.agent.Process.Signal(syscall.SIGTERM)
	done := make(chan error, 1)
	go func() { done <- r.agent.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			r.t.Errorf("agent exited with %v after SIGTERM", err)
		}
	case <-time.After(30 * time.Second):
		r.agent.Process.Kill()
		r.t.Errorf("agent did not stop within 30 s of SIGTERM")
	}
	if r.t.Failed() {
		b, _ := os.ReadFile(r.agentLog)
		lines := strings.Split(string(b), "\n")
		r.t.Logf("agent log (last 40 lines):\n%s", strings.Join(lines[max(0, len(lines)-40):], "\n"))
	}
	r.agent = nil
}

// pilotsRunning counts the running pilots (the adapter's tag).
func (r *e2e) pilotsRunning() int {
	out, err := r.p.Try("", "condor_q", "-allusers", "-constraint", `HarvestPilot =?= "harvest-pilot" && JobStatus == 2`, "-af", "ClusterId")
	if err != nil || out == "" {
		return 0
	}
	return len(strings.Split(out, "\n"))
}

type jobStatus struct {
	State string `json:"state"`
	Tasks struct {
		Total int `json:"total"`
		Done  int `json:"done"`
	} `json:"tasks"`
}

func (r *e2e) status(id int64) jobStatus {
	var s jobStatus
	out, err := r.p.Try(harvester, r.harvest, "status", "--queue", "unix://"+r.socket(), "--json", strconv.FormatInt(id, 10))
	if err == nil {
		json.Unmarshal([]byte(out), &s)
	}
	return s
}

func isFinal(state string) bool {
	switch state {
	case "DONE", "DONE_WARN", "FAILED", "KILLED", "ERROR_EW":
		return true
	}
	return false
}

// ledgerRuns counts the completed runs of each task in the ledger.
func ledgerRuns(path string) map[string]int {
	b, _ := os.ReadFile(path)
	runs := map[string]int{}
	for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		if f := strings.Fields(l); len(f) == 3 {
			runs[f[1]]++
		}
	}
	return runs
}
