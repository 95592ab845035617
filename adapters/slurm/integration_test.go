package slurm_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/harvest-hpc/harvest/adapters"
	"github.com/harvest-hpc/harvest/adapters/adaptertest"
	"github.com/harvest-hpc/harvest/adapters/slurm"
	"github.com/harvest-hpc/harvest/cluster"
	"github.com/harvest-hpc/harvest/internal/slurmtest"
)

// The real-SLURM tests run on the mini-cluster of scripts/minicluster.sh
// when HARVEST_SLURM_TESTS=1 (then a cluster that cannot be started fails
// the test, it is never skipped). One test holds the cluster lock for all
// scenarios, so they run in the order written.

const (
	nodes   = 8
	pilotCm = "sleep"
)

func newAdapter(t *testing.T, mod func(*slurm.Config)) *slurm.Adapter {
	t.Helper()
	cfg := slurm.DefaultConfig()
	cfg.Timeout = 5 * time.Second
	cfg.OutputDir = slurmtest.Lab() + "/shared"
	if mod != nil {
		mod(&cfg)
	}
	a, err := slurm.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func bg(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func snap(t *testing.T, a adapters.Adapter) cluster.Snapshot {
	t.Helper()
	s, err := a.Snapshot(bg(t))
	if err != nil {
		t.Fatalf("Snapshot: %v", err)
	}
	if err := s.Validate(); err != nil {
		t.Fatalf("snapshot does not validate: %v", err)
	}
	return s
}

func job(s cluster.Snapshot, id string) (cluster.Job, bool) {
	for _, j := range s.Jobs {
		if j.ID == id {
			return j, true
		}
	}
	return cluster.Job{}, false
}

func waitSnap(t *testing.T, a adapters.Adapter, what string, d time.Duration, cond func(cluster.Snapshot) bool) cluster.Snapshot {
	t.Helper()
	deadline := time.Now().Add(d)
	var s cluster.Snapshot
	for {
		s = snap(t, a)
		if cond(s) {
			return s
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s; last snapshot: %+v", d, what, s)
		}
		time.Sleep(300 * time.Millisecond)
	}
}

func pilotSpec(limit cluster.Limit) adapters.PilotSpec {
	return adapters.PilotSpec{TimeLimit: limit, Command: []string{pilotCm, "600"}, Env: map[string]string{"HARVEST_TEST": "a,b c"}}
}

// cancelPilots cancels every pilot of a and waits until none is listed.
func cancelPilots(t *testing.T, a adapters.Adapter) {
	t.Helper()
	for _, p := range snap(t, a).Pilots() {
		if err := a.Cancel(bg(t), adapters.PilotID(p.ID)); err != nil {
			t.Errorf("cancel pilot %s: %v", p.ID, err)
		}
	}
	waitSnap(t, a, "no pilots left", 20*time.Second, func(s cluster.Snapshot) bool { return len(s.Pilots()) == 0 })
}

// deadControllerConf writes a copy of the cluster's slurm.conf that points
// the clients at a port where no slurmctld listens.
func deadControllerConf(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(slurmtest.Conf())
	if err != nil {
		t.Fatal(err)
	}
	// Any cluster's port (CTLD_PORT differs between mini-clusters).
	conf := regexp.MustCompile(`(?m)^SlurmctldPort=\d+$`).ReplaceAllString(string(b), "SlurmctldPort=6999")
	if conf == string(b) {
		t.Fatal("slurm.conf has no SlurmctldPort line")
	}
	p := filepath.Join(t.TempDir(), "slurm.conf")
	if err := os.WriteFile(p, []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestRealSLURM(t *testing.T) {
	c := slurmtest.Require(t, nodes)
	c.Script(t, "users")

	conformance := func(wrap func(testing.TB, adapters.Adapter) adapters.Adapter) adaptertest.Harness {
		return adaptertest.Harness{
			New: func(t *testing.T) adapters.Adapter {
				return wrap(t, newAdapter(t, func(c *slurm.Config) { c.Tag = "harvest-conformance" }))
			},
			Settle:  func(*testing.T) { time.Sleep(500 * time.Millisecond) },
			Tries:   40,
			Command: []string{pilotCm, "600"},
			Unreachable: func(t *testing.T) adapters.Adapter {
				conf := deadControllerConf(t)
				return wrap(t, newAdapter(t, func(c *slurm.Config) { c.SlurmConf = conf; c.Timeout = 3 * time.Second }))
			},
			Cleanup: func(t *testing.T, a adapters.Adapter) { cancelPilots(t, a) },
		}
	}
	t.Run("the conformance suite passes in process", func(t *testing.T) {
		adaptertest.Run(t, conformance(func(_ testing.TB, a adapters.Adapter) adapters.Adapter { return a }))
	})
	t.Run("the conformance suite passes across the plugin boundary", func(t *testing.T) {
		adaptertest.Run(t, conformance(adaptertest.OverPlugin))
	})
	if t.Failed() {
		return
	}
	c.CancelAll(t)

	a := newAdapter(t, nil)
	t.Run("figures: snapshot, submit and start latency on the idle cluster", func(t *testing.T) {
		const n = 20
		start := time.Now()
		for i := 0; i < n; i++ {
			snap(t, a)
		}
		snapD := time.Since(start) / n
		var submitD, runD time.Duration
		for i := 0; i < 5; i++ {
			t0 := time.Now()
			id, err := a.Submit(bg(t), pilotSpec(5*60))
			if err != nil {
				t.Fatal(err)
			}
			submitD += time.Since(t0)
			waitSnap(t, a, "pilot running", 15*time.Second, func(s cluster.Snapshot) bool {
				j, ok := job(s, string(id))
				return ok && j.State == cluster.Running
			})
			runD += time.Since(t0)
		}
		t.Logf("FIGURES: Snapshot %s (mean of %d, %d nodes); Submit %s; submit to RUNNING %s (means of 5, polled every 300 ms)",
			snapD.Round(100*time.Microsecond), n, nodes, (submitD / 5).Round(100*time.Microsecond), (runD / 5).Round(10*time.Millisecond))
		cancelPilots(t, a)
	})
	info, err := a.Info(bg(t))
	if err != nil || info.Version != "22.05.8" && !strings.HasPrefix(info.Version, "2") {
		t.Fatalf("Info = %+v, %v", info, err)
	}

	// The scene: alice's A holds 7 of 8 nodes for 5 minutes. Alice's D
	// (unlimited) and bob's B need all 8 nodes, bob's C needs 2, so nothing
	// pending fits on the free node: it is a hole until A ends. D is raised
	// above B by the admin, so the scheduler's order is D, B, C and D's
	// reservation (all 8 nodes when A ends) bounds the hole. (With a
	// smaller top job the free node would not be reserved at all, and any
	// pilot would fit.)
	A := c.Sbatch(t, "alice", "sleep 290", "-N7", "-t", "5", "-J", "A_run7", "-D", "/tmp")
	waitSnap(t, a, "A running", 20*time.Second, func(s cluster.Snapshot) bool {
		j, ok := job(s, A)
		return ok && j.State == cluster.Running
	})
	B := c.Sbatch(t, "bob", "sleep 60", "-N8", "-t", "2", "-J", "B_big8", "-D", "/tmp")
	C := c.Sbatch(t, "bob", "sleep 60", "-N2", "-t", "10", "-J", "C_two", "-D", "/tmp")
	D := c.Sbatch(t, "alice", "sleep 60", "-N8", "-J", "D_unlimited", "-D", "/tmp")
	bPrio := c.Run(t, "", "squeue", "-h", "-j", B, "-o", "%Q")
	prio, err := strconv.ParseInt(bPrio, 10, 64)
	if err != nil {
		t.Fatalf("priority of B %q: %v", bPrio, err)
	}
	c.Run(t, "", "scontrol", "update", "jobid="+D, "priority="+strconv.FormatInt(prio+10, 10))

	var scene cluster.Snapshot
	t.Run("a snapshot shows running and pending foreign jobs with their limits, run times and order", func(t *testing.T) {
		// Wait for a backfill pass to re-plan after the priority change. The
		// reason turns to Resources at once, but the expected start is the
		// last pass's: one that ran before the change planned D after B and
		// C, 12 minutes after A's end (seen in CI).
		scene = waitSnap(t, a, "D planned first, to start when A ends", 15*time.Second, func(s cluster.Snapshot) bool {
			d, ok := job(s, D)
			a0, okA := job(s, A)
			end := a0.StartTime + 300
			return ok && okA && d.Reason == "Resources" && d.ExpectedStart >= end-5 && d.ExpectedStart <= end+5
		})
		s := scene
		// The free node is idle, or planned when backfill reserved it for D.
		if s.TotalNodes != nodes || s.IdleNodes != 1 || s.PlannedNodes > 1 || s.DrainedNodes != 0 || s.MaxTime != nil || s.Partition != "batch" {
			t.Errorf("node counts %d/%d idle/%d planned/%d drained, MaxTime %v, partition %q",
				s.TotalNodes, s.IdleNodes, s.PlannedNodes, s.DrainedNodes, s.MaxTime, s.Partition)
		}
		var order []string
		for _, j := range s.Jobs {
			if j.State == cluster.Pending {
				order = append(order, j.ID)
			}
		}
		if strings.Join(order, ",") != strings.Join([]string{D, B, C}, ",") {
			t.Errorf("pending order %v, want D,B,C = %s,%s,%s", order, D, B, C)
		}
		a0, _ := job(s, A)
		if a0.User != "alice" || a0.Nodes != 7 || a0.TimeLimit != 300 || a0.Pilot {
			t.Errorf("A = %+v", a0)
		}
		if want := s.Now - a0.StartTime; a0.RunTime != want || a0.RunTime < 0 || a0.RunTime > 60 {
			t.Errorf("A run time %d, want now-start = %d", a0.RunTime, want)
		}
		d, _ := job(s, D)
		if !d.TimeLimit.IsUnlimited() || d.Nodes != 8 || d.User != "alice" {
			t.Errorf("D = %+v", d)
		}
		// SLURM expects D to start when A ends.
		if end := a0.StartTime + 300; d.ExpectedStart < end-5 || d.ExpectedStart > end+5 {
			t.Errorf("D expected start %d, A ends at %d", d.ExpectedStart, end)
		}
		b, _ := job(s, B)
		c2, _ := job(s, C)
		if b.Reason != "Priority" || c2.Reason != "Priority" || b.TimeLimit != 120 || c2.TimeLimit != 600 || b.Nodes != 8 || c2.User != "bob" {
			t.Errorf("B = %+v\nC = %+v", b, c2)
		}
		if len(s.Pilots()) != 0 {
			t.Errorf("pilots before any submit: %+v", s.Pilots())
		}
	})
	if t.Failed() {
		return
	}

	var fits, tooLong adapters.PilotID
	t.Run("a pilot that fits the hole is backfilled while one that does not fit stays pending", func(t *testing.T) {
		var err error
		// 2 min ends before A's end (about 5 min away); 10 min does not.
		if tooLong, err = a.Submit(bg(t), pilotSpec(10*60)); err != nil {
			t.Fatalf("Submit: %v", err)
		}
		if fits, err = a.Submit(bg(t), pilotSpec(2*60+59)); err != nil {
			t.Fatalf("Submit: %v", err)
		}
		waitSnap(t, a, "the fitting pilot running", 15*time.Second, func(s cluster.Snapshot) bool {
			j, ok := job(s, string(fits))
			return ok && j.State == cluster.Running
		})
		time.Sleep(3 * time.Second) // three more backfill passes
		s := snap(t, a)
		f, _ := job(s, string(fits))
		l, ok := job(s, string(tooLong))
		if !ok || l.State != cluster.Pending || !l.Pilot || l.TimeLimit != 600 {
			t.Errorf("the 10-minute pilot = %+v (listed %v), want pending", l, ok)
		}
		if !f.Pilot || f.Name != "harvest-pilot" || f.TimeLimit != 120 || f.Nodes != 1 || f.User != "root" {
			t.Errorf("the fitting pilot = %+v, want a 2-minute one-node pilot", f)
		}
		if s.IdleNodes != 0 {
			t.Errorf("idle nodes %d with the hole filled", s.IdleNodes)
		}
		if a0, _ := job(s, A); a0.State != cluster.Running {
			t.Errorf("A = %+v", a0)
		}
	})

	t.Run("a foreign job is never cancelled", func(t *testing.T) {
		for _, id := range []string{A, B, D} {
			if err := a.Cancel(bg(t), adapters.PilotID(id)); !errors.Is(err, adapters.ErrNotPilot) {
				t.Errorf("Cancel(%s) = %v, want ErrNotPilot", id, err)
			}
		}
		// alice's job named like the tag is hers, not a pilot.
		fake := c.Sbatch(t, "alice", "sleep 60", "-N1", "-t", "1", "-J", "harvest-pilot", "-D", "/tmp")
		s := snap(t, a)
		if j, ok := job(s, fake); !ok || j.Pilot {
			t.Errorf("alice's job named harvest-pilot = %+v (listed %v), want a foreign job", j, ok)
		}
		if err := a.Cancel(bg(t), adapters.PilotID(fake)); !errors.Is(err, adapters.ErrNotPilot) {
			t.Errorf("Cancel(alice's harvest-pilot) = %v, want ErrNotPilot", err)
		}
		for _, id := range []string{A, B, D, fake} {
			if st := c.JobState(t, id); st != "RUNNING" && st != "PENDING" {
				t.Errorf("job %s is %s after a refused cancel", id, st)
			}
		}
		c.Run(t, "", "scancel", fake)
	})

	t.Run("pilots are found again by their tag after the adapter is recreated", func(t *testing.T) {
		again := newAdapter(t, nil)
		s := snap(t, again)
		var ids []string
		for _, p := range s.Pilots() {
			ids = append(ids, p.ID)
		}
		if strings.Join(ids, ",") != string(fits)+","+string(tooLong) {
			t.Errorf("pilots %v, want the running %s then the pending %s", ids, fits, tooLong)
		}
		other := newAdapter(t, func(c *slurm.Config) { c.Tag = "another-pool" })
		if p := snap(t, other).Pilots(); len(p) != 0 {
			t.Errorf("an adapter with another tag claims %+v", p)
		}
	})

	t.Run("cancel frees the node and is idempotent", func(t *testing.T) {
		if err := a.Cancel(bg(t), fits); err != nil {
			t.Fatalf("Cancel: %v", err)
		}
		s := waitSnap(t, a, "the node free again", 10*time.Second, func(s cluster.Snapshot) bool {
			_, listed := job(s, string(fits))
			return !listed && s.IdleNodes == 1
		})
		if n, ok := job(s, D); !ok || n.State != cluster.Pending {
			t.Errorf("D = %+v (listed %v), want still pending", n, ok)
		}
		if err := a.Cancel(bg(t), fits); err != nil {
			t.Errorf("second Cancel: %v", err)
		}
		if err := a.Cancel(bg(t), tooLong); err != nil {
			t.Errorf("Cancel of a pending pilot: %v", err)
		}
		waitSnap(t, a, "no pilots", 10*time.Second, func(s cluster.Snapshot) bool { return len(s.Pilots()) == 0 })
	})

	t.Run("a pilot runs its exact argv with its environment and writes to the output dir", func(t *testing.T) {
		arg := `it's "quoted" $HOME ; a,b`
		spec := adapters.PilotSpec{
			TimeLimit: 60,
			Command:   []string{"/bin/sh", "-c", `printf '%s|%s|%s\n' "$1" "$HARVEST_TEST" "$HOME"`, "sh", arg},
			Env:       map[string]string{"HARVEST_TEST": "x=1,y=2 'z'"},
		}
		id, err := a.Submit(bg(t), spec)
		if err != nil {
			t.Fatalf("Submit: %v", err)
		}
		out := filepath.Join(slurmtest.Lab(), "shared", "harvest-pilot-"+string(id)+".out")
		deadline := time.Now().Add(20 * time.Second)
		var b []byte
		for time.Now().Before(deadline) {
			if b, err = os.ReadFile(out); err == nil && len(b) > 0 {
				break
			}
			time.Sleep(300 * time.Millisecond)
		}
		want := arg + "|x=1,y=2 'z'|/root\n"
		if string(b) != want {
			t.Errorf("pilot output %q (err %v), want %q", b, err, want)
		}
		os.Remove(out)
	})

	t.Run("with slurmctld stopped, snapshots and submits fail as unreachable", func(t *testing.T) {
		c.Script(t, "stop-ctld")
		restarted := false
		restart := func() {
			if !restarted {
				restarted = true
				c.Script(t, "start-ctld")
			}
		}
		defer restart()
		down := newAdapter(t, func(c *slurm.Config) { c.Timeout = 3 * time.Second })
		start := time.Now()
		s, err := down.Snapshot(bg(t))
		if !errors.Is(err, adapters.ErrUnreachable) {
			t.Fatalf("Snapshot = %+v, %v; want ErrUnreachable", s, err)
		}
		d := time.Since(start)
		if d > 8*time.Second {
			t.Errorf("Snapshot took %s to fail, timeout is 3 s", d)
		}
		t.Logf("FIGURES: Snapshot with slurmctld stopped failed after %s: %v", d.Round(10*time.Millisecond), err)
		if _, err := down.Submit(bg(t), pilotSpec(120)); !errors.Is(err, adapters.ErrUnreachable) && !errors.Is(err, adapters.ErrOutcomeUnknown) {
			t.Errorf("Submit = %v, want ErrUnreachable or ErrOutcomeUnknown", err)
		}
		restart()
		// slurmctld recovers its jobs from its state: the scene is back.
		s = waitSnap(t, a, "the controller back", 20*time.Second, func(s cluster.Snapshot) bool { return s.TotalNodes == nodes })
		if j, ok := job(s, A); !ok || j.State != cluster.Running {
			t.Errorf("A after the restart = %+v (listed %v)", j, ok)
		}
	})
}
