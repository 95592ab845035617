package pilot_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/harvest-hpc/harvest/pilotproto"
	"github.com/harvest-hpc/harvest/queue"
	"github.com/harvest-hpc/harvest/queue/api"
)

// buildHarvest builds the harvest binary once for the subprocess tests.
func buildHarvest(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("builds and runs pilot processes")
	}
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go toolchain to build harvest")
	}
	bin := filepath.Join(t.TempDir(), "harvest")
	out, err := exec.Command(goBin, "build", "-o", bin, "github.com/harvest-hpc/harvest/cmd/harvest").CombinedOutput()
	if err != nil {
		t.Fatalf("build harvest: %v\n%s", err, out)
	}
	return bin
}

func startPilotProcess(t *testing.T, bin string, r *realQueue, id string, extra ...string) *exec.Cmd {
	t.Helper()
	args := []string{"pilot", "--queue", r.url, "--state-dir", r.state, "--pilot-id", id, "--slots", "2",
		"--listen", "127.0.0.1:0", "--advertise", "127.0.0.1", "--safety-margin", "0",
		"--master-grace", "500ms", "--worker-timeout", "2s", "--reconnect-grace", "2s", "--heartbeat", "200ms",
		"--log-level", "warn"}
	cmd := exec.Command(bin, append(args, extra...)...)
	cmd.Env = append(os.Environ(), "HARVEST_PILOT_TOKEN="+pilotToken)
	logf, _ := os.Create(filepath.Join(r.state, "pilot-"+id+".log"))
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM)
		cmd.Wait()
		logf.Close()
	})
	return cmd
}

// TestKillDashNineOfMasterAndWorkerLosesNoTask is issue 5's failover check
// with real processes: kill -9 of the master's pilot and of a worker's
// pilot mid-run; the job completes, every task done once in the queue and
// every output present.
func TestKillDashNineOfMasterAndWorkerLosesNoTask(t *testing.T) {
	bin := buildHarvest(t)
	r := startQueue(t)
	const n = 120
	j := r.submit(t, n, 2, `sleep 0.1; echo "$3" >> "$2"`)
	procs := map[string]*exec.Cmd{}
	for i := 1; i <= 4; i++ {
		id := fmt.Sprintf("%d", 300+i)
		procs[id] = startPilotProcess(t, bin, r, id)
		if i == 1 {
			r.waitMaster(t, "301")
		}
	}
	r.waitDone(t, j.ID, 20*time.Second, "30 tasks done", func(j api.Job) bool { return j.Tasks.Done >= 30 })
	l, err := r.pilot.Lease(context.Background(), pilotproto.LeaseRequest{PilotID: "observer"})
	if err != nil || l.Granted {
		t.Fatalf("lease query: %+v %v", l, err)
	}
	masterProc := procs[l.Holder]
	if masterProc == nil {
		t.Fatalf("lease held by unknown pilot %q", l.Holder)
	}
	before, _ := r.user.Job(context.Background(), j.ID)
	killedAt := time.Now()
	masterProc.Process.Signal(syscall.SIGKILL)
	for id, p := range procs {
		if id != l.Holder {
			p.Process.Signal(syscall.SIGKILL) // and one worker
			break
		}
	}
	// Failover time: until the queue sees results again (the survivors'
	// results wait for the new master). Lease TTL 1 s + grace 0.5 s here.
	r.waitDone(t, j.ID, 15*time.Second, "a result after the master was killed", func(jj api.Job) bool {
		return jj.Tasks.Done > before.Tasks.Done || jj.State == api.JobDone
	})
	t.Logf("failover: results flow again %s after kill -9 of the master", time.Since(killedAt).Round(time.Millisecond))
	got := r.waitJob(t, j.ID, 60*time.Second)
	if got.State != api.JobDone || got.Tasks.Done != n {
		t.Fatalf("job ended %s with %+v", got.State, got.Tasks)
	}
	reruns := outputsOnce(t, got.OutputDir, n)
	t.Logf("tasks re-run after the kills (their first run was lost with the killed pilots): %d", reruns)
}

// TestKillDashNineOfTheMasterResumesDispatchWithinTheLeaseTTL is issue 13
// item 12 with real pilot processes: the master's pilot is killed with
// SIGKILL while workers wait on it. Their master grace is a minute, so
// only the refused connection can send them back to the lease; the lease
// (3 s TTL, renewed every second) runs out, a survivor becomes master and
// results flow again within the TTL and a moment, not after the grace.
// Every task ends done once in the queue, every output exists.
func TestKillDashNineOfTheMasterResumesDispatchWithinTheLeaseTTL(t *testing.T) {
	const ttl = 3 * time.Second
	bin := buildHarvest(t)
	r := startQueue(t, func(c *queue.Config) { c.LeaseTTL = ttl })
	const n = 200
	j := r.submit(t, n, 2, `sleep 0.05; echo "$3" >> "$2"`)
	procs := map[string]*exec.Cmd{}
	procs["401"] = startPilotProcess(t, bin, r, "401", "--master-grace", "1m", "--heartbeat", "1s")
	r.waitDone(t, j.ID, 20*time.Second, "the first pilot runs tasks", func(j api.Job) bool { return j.Tasks.Done > 0 })
	for _, id := range []string{"402", "403"} {
		procs[id] = startPilotProcess(t, bin, r, id, "--master-grace", "1m", "--heartbeat", "1s")
	}
	before := r.waitDone(t, j.ID, 20*time.Second, "50 tasks done", func(j api.Job) bool { return j.Tasks.Done >= 50 })
	l, err := r.pilot.Lease(context.Background(), pilotproto.LeaseRequest{PilotID: "observer"})
	if err != nil || l.Granted || l.Holder != "401" {
		t.Fatalf("lease query: %+v %v, want 401 master", l, err)
	}
	if before.Tasks.Done == n {
		t.Fatal("the job ended before the kill: the test proves nothing")
	}
	killedAt := time.Now()
	procs["401"].Process.Signal(syscall.SIGKILL)
	resumed := r.waitDone(t, j.ID, ttl+10*time.Second, "results flow again after the kill",
		func(j api.Job) bool { return j.Tasks.Done > before.Tasks.Done })
	stall := time.Since(killedAt)
	t.Logf("kill -9 of the master: results reach the queue again after %s (lease TTL %s; %d -> %d done)",
		stall.Round(time.Millisecond), ttl, before.Tasks.Done, resumed.Tasks.Done)
	if stall > ttl+3*time.Second {
		t.Errorf("dispatch stalled %s after kill -9 of the master; want within the lease TTL (%s) and a moment", stall, ttl)
	}
	got := r.waitDone(t, j.ID, 60*time.Second, "the job ends", func(j api.Job) bool { return j.State == api.JobDone || j.State == api.JobFailed })
	if got.State != api.JobDone || got.Tasks.Done != n {
		t.Fatalf("job ended %s with %+v", got.State, got.Tasks)
	}
	t.Logf("tasks run again (their first run died with the master's pilot): %d", outputsOnce(t, got.OutputDir, n))
}

// TestAKilledWorkersTasksRunAgainUnderANewAttempt is issue 35 item 4:
// kill -9 of a worker's pilot mid-batch. The master finds the worker
// lost and its tasks go back to the queue; a task that runs again gets a
// new attempt number (the logs and HARVEST_ATTEMPT name the run), never
// the one its first run had, and the job still ends done with every task
// once.
func TestAKilledWorkersTasksRunAgainUnderANewAttempt(t *testing.T) {
	bin := buildHarvest(t)
	r := startQueue(t)
	const n = 40
	// Each run appends its task and attempt to runs.log beside the
	// outputs as it starts (a killed run's output is not kept): a line
	// twice is two runs under one attempt number.
	j := r.submit(t, n, 2, `echo "$3 $HARVEST_ATTEMPT $HARVEST_PILOT_ID" >> "$(dirname "$2")/runs.log"; sleep 1; echo "$3" > "$2"`)
	procs := map[string]*exec.Cmd{}
	procs["501"] = startPilotProcess(t, bin, r, "501")
	r.waitMaster(t, "501")
	for _, id := range []string{"502", "503"} {
		procs[id] = startPilotProcess(t, bin, r, id)
	}
	// Kill 502 as soon as it has started a task (of 1 s): mid-batch.
	log := filepath.Join(j.OutputDir, "runs.log")
	started := func() bool {
		b, _ := os.ReadFile(log)
		return strings.Contains(string(b), " 502\n")
	}
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for deadline := time.After(30 * time.Second); !started(); {
		select {
		case <-tick.C:
		case <-deadline:
			t.Fatal("pilot 502 never started a task")
		}
	}
	procs["502"].Process.Signal(syscall.SIGKILL)
	got := r.waitJob(t, j.ID, 60*time.Second)
	if got.State != api.JobDone || got.Tasks.Done != n {
		t.Fatalf("job ended %s with %+v", got.State, got.Tasks)
	}
	b, err := os.ReadFile(log)
	if err != nil {
		t.Fatal(err)
	}
	runs := map[string]int{} // task -> runs
	seen := map[string]bool{}
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		f := strings.Fields(line)
		if seen[f[0]+" "+f[1]] {
			t.Errorf("task %s ran twice under attempt %s", f[0], f[1])
		}
		seen[f[0]+" "+f[1]] = true
		runs[f[0]]++
	}
	again := 0
	for _, k := range runs {
		if k > 1 {
			again++
		}
	}
	if len(runs) != n {
		t.Errorf("%d tasks ran, want %d", len(runs), n)
	}
	if again == 0 {
		t.Fatal("no task ran twice: the kill did not cut a batch, the test proves nothing")
	}
	t.Logf("%d tasks ran again after the kill, each under a new attempt", again)
}
