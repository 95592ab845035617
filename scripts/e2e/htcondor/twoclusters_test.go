package htcondor

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/harvest-hpc/harvest/internal/condortest"
	"github.com/harvest-hpc/harvest/internal/slurmtest"
	"github.com/harvest-hpc/harvest/queue/api"
)

// One queue, two batch systems: the SLURM mini-cluster's agent (site
// "slurm") hosts the queue, the HTCondor pool's agent (site "condor")
// uses it with an agent token, and one job of carol's runs on both. Every
// task runs exactly once (counted by the tasks themselves), and the queue
// says where each ran as the tasks do.
func TestOneJobRunsOnSLURMAndHTCondorBehindOneQueue(t *testing.T) {
	if !condortest.Enabled() || !slurmtest.Enabled() {
		t.Skipf("needs the SLURM mini-cluster and the HTCondor pool: set %s=1 and %s=1", slurmtest.Env, condortest.Env)
	}
	c := slurmtest.Require(t, 8) // the shared cluster, locked first (the order every such test takes)
	p := condortest.Require(t, nodes)
	r := &e2e{t: t, p: p}
	r.work = filepath.Join(p.Shared, fmt.Sprintf("two-%d", time.Now().UnixNano()))
	t.Cleanup(func() {
		if !t.Failed() {
			os.RemoveAll(r.work)
		} else {
			t.Logf("work directory kept: %s", r.work)
		}
	})
	for _, d := range []string{"data", "slurm/shared", "slurm/pilots", "condor/shared", "condor/pilots"} {
		if err := os.MkdirAll(filepath.Join(r.work, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	// HTCondor's pilots run as the submitter account; SLURM's, submitted
	// by root, switch to it (runuser), so both sites' tasks write the
	// job's output directory (its ledger, its logs) as one account.
	var own []string
	for _, d := range []string{"slurm/shared", "slurm/pilots", "condor/shared", "condor/pilots"} {
		own = append(own, filepath.Join(r.work, d))
	}
	p.Run(t, "", "chown", append([]string{condortest.Submitter}, own...)...)
	r.installHarvest()

	const n = 40
	ds := filepath.Join(r.work, "data", "two")
	for i := 0; i < n; i++ {
		sub := filepath.Join(ds, fmt.Sprintf("sub%04d", i))
		if err := os.MkdirAll(sub, 0o755); err != nil {
			t.Fatal(err)
		}
		os.WriteFile(filepath.Join(sub, "data.txt"), []byte(fmt.Sprintf("%d\n", i)), 0o644)
	}
	p.Run(t, "", "chown", "-R", harvester, ds)
	out := filepath.Join(r.work, "data", "out")
	os.Mkdir(out, 0o755)
	p.Run(t, "", "chown", harvester+":"+condortest.Submitter, out)
	p.Run(t, "", "chmod", "2770", out)

	pilot := fmt.Sprintf("%s pilot --heartbeat 1s --master-grace 10s --reconnect-grace 10s --worker-timeout 15s", r.harvest)
	common := []string{"--poll", poll.String(), "--margin", "30s", "--mini-time", "10s", "--log-level", "info"}
	socket := filepath.Join(r.work, "q.sock")
	slurmLog := filepath.Join(r.work, "slurm", "agent.log")
	hosting := append([]string{"agent", "--site", "slurm", "--adapter", "slurm", "--adapter-opt", "slurm_conf=" + c.Conf,
		"--state-dir", filepath.Join(r.work, "slurm", "state"), "--shared-dir", filepath.Join(r.work, "slurm", "shared"),
		"--pilot-output", filepath.Join(r.work, "slurm", "pilots", "pilot-%j.out"),
		"--listen", "127.0.0.1:0", "--socket", socket, "--allowed-root", filepath.Join(r.work, "data"), "--lease-ttl", "8s",
		"--pilot-command", "runuser -u " + condortest.Submitter + " -- " + pilot}, common...)
	stopA := startLogged(t, r.harvest, hosting, slurmLog, "SLURM_CONF="+c.Conf)
	defer stopA()
	var url string
	condortest.WaitFor(t, "the hosted queue", 30*time.Second, func() bool {
		b, _ := os.ReadFile(slurmLog)
		m := advertiseRE.FindSubmatch(b)
		if m == nil {
			return false
		}
		url = string(m[1])
		_, err := os.Stat(socket)
		return err == nil
	})
	tok := p.Run(t, "", r.harvest, "admin", "site", "add", "condor", "--queue", "unix://"+socket)
	tf := filepath.Join(r.work, "condor", "agent.token")
	if err := os.WriteFile(tf, []byte(strings.TrimSpace(tok)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	remote := append([]string{"agent", "--adapter", "htcondor", "--adapter-opt", "submit_user=" + condortest.Submitter, "--adapter-opt", "max_lifetime=30m",
		"--queue", url, "--agent-token-file", tf,
		"--state-dir", filepath.Join(r.work, "condor", "state"), "--shared-dir", filepath.Join(r.work, "condor", "shared"),
		"--pilot-workdir", filepath.Join(r.work, "condor", "pilots"),
		"--pilot-output", filepath.Join(r.work, "condor", "pilots", "pilot-$(Cluster).out"), "--pilot-command", pilot}, common...)
	stopB := startLogged(t, r.harvest, remote, filepath.Join(r.work, "condor", "agent.log"))
	defer stopB()

	t0 := time.Now()
	script := `sleep 1; cat {input}/data.txt > {output}; echo "{task} site:$HARVEST_SITE" >> "$(dirname {output})/` + ledger + `"`
	sub := p.Run(t, harvester, r.harvest, "submit", "--queue", "unix://"+socket, "--json", "--batch-size", "1",
		"--output", out, ds, "--", "/bin/sh", "-c", script)
	var j api.Job
	if err := json.Unmarshal([]byte(sub), &j); err != nil {
		t.Fatalf("submit answered %q: %v", sub, err)
	}
	condortest.WaitFor(t, "the job final", 5*time.Minute, func() bool {
		o, err := p.Try("", r.harvest, "status", "--json", strconv.FormatInt(j.ID, 10), "--queue", "unix://"+socket)
		return err == nil && json.Unmarshal([]byte(o), &j) == nil && isFinal(string(j.State))
	})
	took := time.Since(t0)

	b, _ := os.ReadFile(filepath.Join(out, ledger))
	runs, perSite := map[string]int{}, map[string]int{}
	for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		if f := strings.Fields(l); len(f) == 2 {
			runs[f[0]]++
			perSite[strings.TrimPrefix(f[1], "site:")]++
		}
	}
	lost, twice := 0, 0
	for i := 0; i < n; i++ {
		if b, err := os.ReadFile(filepath.Join(out, fmt.Sprintf("sub%04d", i))); err != nil || string(b) != fmt.Sprintf("%d\n", i) {
			lost++
		}
	}
	for _, k := range runs {
		if k > 1 {
			twice++
		}
	}
	t.Logf("FIGURES: one queue, SLURM mini-cluster (8 nodes, site slurm) + HTCondor pool (%d nodes, site condor): %d tasks of 1 s in %v, ran at %v, job %s %d/%d done, %d lost, %d run twice",
		nodes, n, took.Round(100*time.Millisecond), perSite, j.State, j.Tasks.Done, j.Tasks.Total, lost, twice)
	if j.State != "DONE" || j.Tasks.Done != n || lost != 0 || twice != 0 || len(runs) != n {
		t.Fatalf("job %s with %d of %d done, %d lost, %d run twice, %d tasks in the ledger", j.State, j.Tasks.Done, n, lost, twice, len(runs))
	}
	if perSite["slurm"] == 0 || perSite["condor"] == 0 {
		t.Errorf("the job ran at %v: want both the SLURM and the HTCondor site", perSite)
	}
	for _, js := range j.Sites {
		if js.Done != perSite[js.Site] {
			t.Errorf("the queue says %s ran %d, the tasks say %d", js.Site, js.Done, perSite[js.Site])
		}
	}
}

// startLogged starts an agent with its output in logPath and returns what
// stops it (SIGTERM, then SIGKILL after 30 s), logging its tail if t failed.
func startLogged(t *testing.T, bin string, args []string, logPath string, env ...string) func() {
	t.Helper()
	f, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	return func() {
		cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			cmd.Process.Kill()
			<-done
		}
		if t.Failed() {
			b, _ := os.ReadFile(logPath)
			lines := strings.Split(string(b), "\n")
			t.Logf("%s (last 30 lines):\n%s", logPath, strings.Join(lines[max(0, len(lines)-30):], "\n"))
		}
	}
}
