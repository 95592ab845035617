package slurm_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/harvest-hpc/harvest/internal/slurmtest"
)

// TestRealSLURMPreemptionFacts checks, on the real 22.05 mini-cluster, the
// scheduler behaviour that harvest's give-back modes rely on (docs/slurm.md,
// "Give-back modes"), so that a SLURM upgrade that changes one of them
// fails here rather than in production:
//   - a foreign job preempts pilots in a lower PriorityTier partition at
//     once, through the main scheduler and through backfill, and with
//     GraceTime=0 the pilot gets SIGTERM at once (as from scancel);
//   - with GraceTime > 0 the batch script gets no signal at preemption
//     unless SlurmctldParameters=preempt_send_user_signal and the job was
//     submitted with --signal=B:TERM@N;
//   - in 22.05 backfill sets a --time-min job's limit TO its TimeMin, even
//     in a longer hole (fixed in 25.11: SchedMD commit dedc92b367);
//   - a job's owner can pull its EndTime in to the second, not push it out;
//     another user cannot touch it.
func TestRealSLURMPreemptionFacts(t *testing.T) {
	t.Run("preemption with GraceTime=0", func(t *testing.T) {
		c := slurmtest.RequireWith(t, nodes, slurmtest.Options{Preempt: true})
		c.Script(t, "users")
		dir := sigDir(t)

		// Main scheduler: every node holds a pilot; a 2-node job arrives.
		pilots := make([]string, nodes)
		for i := range pilots {
			pilots[i] = sigPilot(t, c, dir, "-p", slurmtest.PreemptPartition, "-t", "30")
		}
		waitJobs(t, c, pilots, "RUNNING", 20*time.Second)
		submitted := time.Now()
		f := c.Sbatch(t, "alice", "sleep 600", "-N2", "-t", "5")
		waitJobs(t, c, []string{f}, "RUNNING", 10*time.Second)
		started := time.Now()
		if d := started.Sub(submitted); d > 3*time.Second {
			t.Errorf("the 2-node job started %v after its submission; want preemption at once", d)
		}
		preempted := statesOf(t, c, pilots)["PREEMPTED"]
		if len(preempted) != 2 {
			t.Fatalf("want 2 pilots PREEMPTED, got %v", statesOf(t, c, pilots))
		}
		for _, p := range preempted {
			if term := sigTime(t, dir, p, "TERM"); term.IsZero() {
				t.Errorf("preempted pilot %s got no SIGTERM", p)
			}
		}
		t.Logf("FIGURES main-scheduler preemption: submit -> foreign job running %v", started.Sub(submitted).Round(time.Millisecond))
		c.CancelAll(t)

		// Backfill: A holds 4 nodes for 5 min, B waits for all 8, pilots
		// hold the other 4; C (1 node, 2 min) ends before B can start, so
		// only backfill may start it, and it does by preempting a pilot.
		a := c.Sbatch(t, "alice", "sleep 600", "-N4", "-t", "5")
		waitJobs(t, c, []string{a}, "RUNNING", 10*time.Second)
		pilots = pilots[:0]
		for i := 0; i < nodes-4; i++ {
			pilots = append(pilots, sigPilot(t, c, dir, "-p", slurmtest.PreemptPartition, "-t", "30"))
		}
		waitJobs(t, c, pilots, "RUNNING", 20*time.Second)
		b := c.Sbatch(t, "alice", "sleep 60", "-N8", "-t", "5")
		waitReason(t, c, b, "Resources", 10*time.Second)
		submitted = time.Now()
		cj := c.Sbatch(t, "bob", "sleep 600", "-N1", "-t", "2")
		waitJobs(t, c, []string{cj}, "RUNNING", 10*time.Second)
		started = time.Now()
		if s := c.JobField(t, cj, "Scheduler"); s != "Backfill" {
			t.Errorf("job C was started by %q, want Backfill", s)
		}
		if n := len(statesOf(t, c, pilots)["PREEMPTED"]); n != 1 {
			t.Errorf("want 1 pilot preempted for C, got %v", statesOf(t, c, pilots))
		}
		if d := started.Sub(submitted); d > 4*time.Second {
			t.Errorf("C started %v after its submission; want within two backfill cycles", d)
		}
		t.Logf("FIGURES backfill preemption: submit -> foreign job running %v", started.Sub(submitted).Round(time.Millisecond))
		c.CancelAll(t)

		// --time-min: A leaves a 10-minute hole before B; a pilot asking
		// for 30 min with a 2-minute minimum gets exactly 2 minutes.
		a = c.Sbatch(t, "alice", "sleep 600", "-N7", "-t", "10")
		waitJobs(t, c, []string{a}, "RUNNING", 10*time.Second)
		b = c.Sbatch(t, "alice", "sleep 60", "-N8", "-t", "5")
		waitReason(t, c, b, "Resources", 10*time.Second)
		p := c.Sbatch(t, "bob", "sleep 600", "-N1", "-t", "30", "--time-min=2")
		waitJobs(t, c, []string{p}, "RUNNING", 10*time.Second)
		if lim, min := c.JobField(t, p, "TimeLimit"), c.JobField(t, p, "TimeMin"); lim != "00:02:00" || min != "00:02:00" {
			t.Errorf("22.05 backfill: want TimeLimit=TimeMin=00:02:00 in a 10-minute hole, got TimeLimit=%s TimeMin=%s", lim, min)
		}

		// EndTime: bob pulls his job's end in to now+45 s; extending and
		// alice's update are refused.
		now := time.Now().Unix()
		if out, err := scontrolUpdate(c, "bob", p, now+3600); err == nil {
			t.Errorf("the owner extended the end time: %s", out)
		}
		if out, err := scontrolUpdate(c, "alice", p, now+45); err == nil {
			t.Errorf("another user moved the end time: %s", out)
		}
		if out, err := scontrolUpdate(c, "bob", p, now+45); err != nil {
			t.Fatalf("the owner could not pull the end time in: %v: %s", err, out)
		}
		if e := endTime(t, c, p); e != now+45 {
			t.Errorf("EndTime %d after the update, want %d (to the second)", e, now+45)
		}
	})

	t.Run("GraceTime=30 without preempt_send_user_signal", func(t *testing.T) {
		c := slurmtest.RequireWith(t, nodes, slurmtest.Options{Preempt: true, GraceTime: 30})
		dir := sigDir(t)
		pilots := make([]string, nodes)
		for i := range pilots {
			pilots[i] = sigPilot(t, c, dir, "-p", slurmtest.PreemptPartition, "-t", "30", "--signal=B:TERM@60")
		}
		waitJobs(t, c, pilots, "RUNNING", 20*time.Second)
		submitted := time.Now().Unix()
		f := c.Sbatch(t, "alice", "sleep 600", "-N1", "-t", "5")
		// The victim's end is moved to preemption + grace; it gets no signal.
		victim := waitVictim(t, c, pilots, submitted+30, 10*time.Second)
		time.Sleep(3 * time.Second) // a signal would have arrived by now
		if term := sigTime(t, dir, victim, "TERM"); !term.IsZero() {
			t.Errorf("pilot %s got SIGTERM at preemption without preempt_send_user_signal", victim)
		}
		if s := c.JobState(t, f); s != "PENDING" {
			t.Errorf("the foreign job is %s during the victim's grace time, want PENDING", s)
		}
	})

	t.Run("GraceTime=30 with preempt_send_user_signal", func(t *testing.T) {
		c := slurmtest.RequireWith(t, nodes, slurmtest.Options{Preempt: true, GraceTime: 30,
			Extra: "SlurmctldParameters=preempt_send_user_signal"})
		dir := sigDir(t)
		pilots := make([]string, nodes)
		for i := range pilots {
			pilots[i] = sigPilot(t, c, dir, "-p", slurmtest.PreemptPartition, "-t", "30", "--signal=B:TERM@60")
		}
		waitJobs(t, c, pilots, "RUNNING", 20*time.Second)
		submitted := time.Now()
		f := c.Sbatch(t, "alice", "sleep 600", "-N1", "-t", "5")
		waitJobs(t, c, []string{f}, "RUNNING", 10*time.Second)
		if d := time.Since(submitted); d > 4*time.Second {
			t.Errorf("the foreign job started %v after its submission; the pilot exits on SIGTERM, so want it at once", d)
		}
		t.Logf("FIGURES GraceTime=30 + preempt_send_user_signal: submit -> foreign job running %v", time.Since(submitted).Round(time.Millisecond))
	})
}

// sigDir is a directory every test user can write, for the signal logs.
func sigDir(t *testing.T) string {
	t.Helper()
	dir := filepath.Join(slurmtest.Lab(), "shared", fmt.Sprintf("facts-%d", time.Now().UnixNano()))
	if err := os.MkdirAll(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	os.Chmod(dir, 0o777|os.ModeSticky)
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// sigPilot submits, as bob, a stand-in pilot that logs the signals it gets
// to dir/JOBID and exits on SIGTERM, as harvest pilot does.
func sigPilot(t *testing.T, c *slurmtest.Cluster, dir string, args ...string) string {
	t.Helper()
	script := fmt.Sprintf(`f=%s/$SLURM_JOB_ID; trap 'echo TERM $(date +%%s.%%N) >>$f; exit 0' TERM; echo start $(date +%%s.%%N) >>$f; while :; do sleep 0.1; done`, dir)
	return c.Sbatch(t, "bob", script, append([]string{"-N1"}, args...)...)
}

// sigTime is when job id logged signal sig (zero if it did not).
func sigTime(t *testing.T, dir, id, sig string) time.Time {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, id))
	if err != nil {
		return time.Time{}
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) == 2 && f[0] == sig {
			s, err := strconv.ParseFloat(f[1], 64)
			if err != nil {
				t.Fatalf("signal log %s: %q", id, line)
			}
			return time.Unix(0, int64(s*1e9))
		}
	}
	return time.Time{}
}

// statesOf groups jobs by their state.
func statesOf(t *testing.T, c *slurmtest.Cluster, ids []string) map[string][]string {
	t.Helper()
	m := map[string][]string{}
	for _, id := range ids {
		s := c.JobState(t, id)
		m[s] = append(m[s], id)
	}
	return m
}

// waitJobs waits until every job is in state.
func waitJobs(t *testing.T, c *slurmtest.Cluster, ids []string, state string, d time.Duration) {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		m := statesOf(t, c, ids)
		if len(m[state]) == len(ids) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("jobs not all %s after %v: %v", state, d, m)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// waitReason waits until pending job id shows reason.
func waitReason(t *testing.T, c *slurmtest.Cluster, id, reason string, d time.Duration) {
	t.Helper()
	deadline := time.Now().Add(d)
	for c.JobField(t, id, "Reason") != reason {
		if time.Now().After(deadline) {
			t.Fatalf("job %s: reason %q after %v, want %q", id, c.JobField(t, id, "Reason"), d, reason)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// waitVictim waits for a pilot whose end was moved to about end (its
// preemption plus the grace time) and returns it.
func waitVictim(t *testing.T, c *slurmtest.Cluster, pilots []string, end int64, d time.Duration) string {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		for _, p := range pilots {
			if e := endTime(t, c, p); e >= end && e <= end+int64(d/time.Second) {
				return p
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no pilot had its end moved to preemption + grace (about %d) within %v", end, d)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// endTime is squeue's %e of a job, Unix seconds.
func endTime(t *testing.T, c *slurmtest.Cluster, id string) int64 {
	t.Helper()
	t.Setenv("SLURM_TIME_FORMAT", "%s")
	out := c.Run(t, "", "squeue", "-h", "-j", id, "-o", "%e")
	e, err := strconv.ParseInt(out, 10, 64)
	if err != nil {
		t.Fatalf("squeue %%e of job %s: %q", id, out)
	}
	return e
}

// scontrolUpdate moves job id's EndTime as user, in UTC as the adapter does.
func scontrolUpdate(c *slurmtest.Cluster, user, id string, end int64) (string, error) {
	stamp := time.Unix(end, 0).UTC().Format("2006-01-02T15:04:05")
	return c.Try(user, "env", "TZ=UTC", "scontrol", "update", "JobId="+id, "EndTime="+stamp)
}
