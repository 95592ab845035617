package htcondor_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/harvest-hpc/harvest/adapters"
	"github.com/harvest-hpc/harvest/adapters/adaptertest"
	"github.com/harvest-hpc/harvest/adapters/htcondor"
	"github.com/harvest-hpc/harvest/cluster"
	"github.com/harvest-hpc/harvest/internal/condortest"
)

// The real-HTCondor tests run on the personal pool of scripts/minipool.sh
// when HARVEST_HTCONDOR_TESTS=1 (then a pool that cannot be started fails
// the test, it is never skipped). One test holds the pool lock for all
// scenarios, so they run in the order written.

const poolNodes = 4

// realAdapter is the adapter as a root agent runs it on the pool:
// pilots submitted as the harvest account.
func realAdapter(t *testing.T, mod func(*htcondor.Config)) *htcondor.Adapter {
	t.Helper()
	cfg := htcondor.DefaultConfig()
	cfg.SubmitUser = condortest.Submitter
	if mod != nil {
		mod(&cfg)
	}
	a, err := htcondor.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

var sleeper = []string{"/bin/sleep", "600"}

func TestRealHTCondor(t *testing.T) {
	p := condortest.Require(t, poolNodes)

	conformance := func(wrap func(testing.TB, adapters.Adapter) adapters.Adapter) adaptertest.Harness {
		return adaptertest.Harness{
			New: func(t *testing.T) adapters.Adapter {
				return wrap(t, realAdapter(t, func(c *htcondor.Config) { c.Tag = "harvest-conformance" }))
			},
			Settle:  func(*testing.T) { time.Sleep(500 * time.Millisecond) },
			Tries:   60,
			Command: sleeper,
			Unreachable: func(t *testing.T) adapters.Adapter {
				// A collector and schedd address where nothing listens.
				return wrap(t, realAdapter(t, func(c *htcondor.Config) { c.Pool = "127.0.0.1:9"; c.CommandTimeout = 5 * time.Second }))
			},
			Cleanup: func(t *testing.T, a adapters.Adapter) { adaptertest.CancelPilots(t, a, 30*time.Second) },
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
	p.RemoveAll(t)

	a := realAdapter(t, nil)
	info, err := a.Info(t.Context())
	if err != nil || info.Version != "25.14.0" {
		t.Fatalf("Info = %+v, %v; want version 25.14.0 of the build", info, err)
	}
	capture := os.Getenv("HARVEST_HTCONDOR_CAPTURE") // a directory: save the tools' outputs there

	// The scene: bob's B runs on one node, two pilots on two others, one
	// node is idle.
	B := p.Submit(t, "bob", "sleep 300", "batch_name = bob-analysis")
	adaptertest.WaitSnap(t, a, "bob's job running", 30*time.Second, adaptertest.Running(B))
	var pilots []adapters.PilotID
	for i := 0; i < 2; i++ {
		id, err := a.Submit(t.Context(), adapters.PilotSpec{TimeLimit: 10 * 60, Command: sleeper})
		if err != nil {
			t.Fatalf("Submit: %v", err)
		}
		pilots = append(pilots, id)
	}
	// Running with its machine named: the schedd sets JobStatus a moment
	// before RemoteHost.
	placed := func(s cluster.Snapshot, id adapters.PilotID) bool {
		j, ok := adaptertest.Find(s, string(id))
		return ok && j.State == cluster.Running && j.NodeList != ""
	}
	s := adaptertest.WaitSnap(t, a, "both pilots running on their nodes", 30*time.Second, func(s cluster.Snapshot) bool {
		return placed(s, pilots[0]) && placed(s, pilots[1])
	})
	t.Run("a snapshot shows the nodes, the foreign job and the pilots as the pool runs them", func(t *testing.T) {
		if s.TotalNodes != poolNodes || s.IdleNodes != 1 || s.DrainedNodes != 0 {
			t.Errorf("nodes %d total, %d idle, %d drained; want %d, 1, 0: %+v", s.TotalNodes, s.IdleNodes, s.DrainedNodes, poolNodes, s.Nodes)
		}
		names := map[string]bool{}
		for _, n := range s.Nodes {
			names[n.Name] = true
			if n.CPUs != 1 || !strings.HasPrefix(n.Name, "n") {
				t.Errorf("node %+v, want one CPU and the name nX.<pool>", n)
			}
		}
		b, ok := adaptertest.Find(s, B)
		if !ok || b.User != "bob" || b.Pilot || b.Name != "bob-analysis" || b.Nodes != 1 || !names[b.NodeList] || b.StartTime <= 0 || b.RunTime < 0 || b.RunTime > 120 || !b.TimeLimit.IsUnlimited() {
			t.Errorf("bob's job = %+v, want running, unlimited, on one of the nodes %v", b, names)
		}
		for _, id := range pilots {
			j, _ := adaptertest.Find(s, string(id))
			if !j.Pilot || j.User != condortest.Submitter || j.Name != "harvest-pilot" || j.TimeLimit != 600 || !names[j.NodeList] || j.NodeList == b.NodeList {
				t.Errorf("pilot = %+v, want a running 10-minute pilot of %s on its own node", j, condortest.Submitter)
			}
		}
		if s.Now < time.Now().Unix()-60 || s.Now > time.Now().Unix()+60 {
			t.Errorf("snapshot time %d is not the schedd's clock (now %d)", s.Now, time.Now().Unix())
		}
	})
	if capture != "" {
		for _, c := range [][]string{
			{"condor_q_pool.json", "condor_q", "-allusers", "-json"},
			{"condor_q_pool.long", "condor_q", "-allusers", "-long"},
			{"condor_status_pool_real.json", "condor_status", "-json"},
			{"condor_status_pool_real.long", "condor_status", "-long"},
			{"condor_version_25.14.0.txt", "condor_version"},
		} {
			out, err := p.Command(c[1], c[2:]...).Output() // as printed: -long ends in a blank line
			if err != nil {
				t.Fatalf("%s: %v", c[1], err)
			}
			if err := os.WriteFile(filepath.Join(capture, c[0]), out, 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}

	t.Run("the owners' idle jobs are seen, and a released pilot's node goes to them", func(t *testing.T) {
		// alice's two jobs: one takes the idle node, one waits.
		A1 := p.Submit(t, "alice", "sleep 300")
		A2 := p.Submit(t, "alice", "sleep 300")
		s := adaptertest.WaitSnap(t, a, "one of alice's jobs running, the other idle", 30*time.Second, func(s cluster.Snapshot) bool {
			j1, ok1 := adaptertest.Find(s, A1)
			j2, ok2 := adaptertest.Find(s, A2)
			return ok1 && ok2 && (j1.State == cluster.Running) != (j2.State == cluster.Running)
		})
		waiting := A2
		if j, _ := adaptertest.Find(s, A2); j.State == cluster.Running {
			waiting = A1
		}
		w, _ := adaptertest.Find(s, waiting)
		if w.State != cluster.Pending || w.User != "alice" || w.Pilot || s.IdleNodes != 0 {
			t.Fatalf("alice's waiting job = %+v, idle nodes %d; want pending with no idle node", w, s.IdleNodes)
		}
		t0 := time.Now()
		if err := a.Cancel(t.Context(), pilots[0]); err != nil {
			t.Fatalf("Cancel: %v", err)
		}
		adaptertest.WaitSnap(t, a, "alice's waiting job running on the released node", 60*time.Second, adaptertest.Running(waiting))
		t.Logf("FIGURES: pilot released (condor_rm) -> the owner's waiting job running: %v (negotiator cycle 2 s, polled every 300 ms)", time.Since(t0).Round(100*time.Millisecond))
	})

	t.Run("a foreign job is never cancelled, even one named like the tag", func(t *testing.T) {
		fake := p.Submit(t, "carol", "sleep 300", "batch_name = harvest-pilot")
		s := adaptertest.Snap(t, a)
		if j, ok := adaptertest.Find(s, fake); !ok || j.Pilot {
			t.Errorf("carol's job named harvest-pilot = %+v (listed %v), want a foreign job", j, ok)
		}
		for _, id := range []string{B, fake} {
			if err := a.Cancel(t.Context(), adapters.PilotID(id)); !errors.Is(err, adapters.ErrNotPilot) {
				t.Errorf("Cancel(%s) = %v, want ErrNotPilot", id, err)
			}
			if st := p.Attr(t, id, "JobStatus"); st != "1" && st != "2" {
				t.Errorf("job %s has JobStatus %q after a refused cancel", id, st)
			}
		}
	})

	t.Run("pilots are found again by their tag after the adapter is recreated", func(t *testing.T) {
		s := adaptertest.Snap(t, realAdapter(t, nil))
		if got := s.Pilots(); len(got) != 1 || got[0].ID != string(pilots[1]) {
			t.Errorf("pilots %+v, want only %s", got, pilots[1])
		}
		if got := adaptertest.Snap(t, realAdapter(t, func(c *htcondor.Config) { c.Tag = "another-pool" })).Pilots(); len(got) != 0 {
			t.Errorf("an adapter with another tag claims %+v", got)
		}
	})
	p.RemoveAll(t)

	t.Run("a pilot gets its id and lifetime, and the schedd removes it at its lifetime", func(t *testing.T) {
		envFile := filepath.Join(p.Shared, "pilot-env")
		os.Remove(envFile)
		id, err := a.Submit(t.Context(), adapters.PilotSpec{
			TimeLimit: 8,
			Command:   []string{"/bin/sh", "-c", "env > " + envFile + ".tmp && mv " + envFile + ".tmp " + envFile + "; exec sleep 600"},
			Env:       map[string]string{"HARVEST_TEST": "a,b c 'q'"},
		})
		if err != nil {
			t.Fatalf("Submit: %v", err)
		}
		condortest.WaitFor(t, "the pilot's environment", 30*time.Second, func() bool { _, err := os.Stat(envFile); return err == nil })
		b, _ := os.ReadFile(envFile)
		for _, want := range []string{"HARVEST_PILOT_ID=" + string(id), "HARVEST_TIME_LIMIT=8s", "HARVEST_TEST=a,b c 'q'"} {
			if !strings.Contains(string(b), want+"\n") {
				t.Errorf("pilot environment lacks %q:\n%s", want, b)
			}
		}
		// periodic_remove: 8 s after the start, checked every
		// PERIODIC_EXPR_INTERVAL (5 s in the pool).
		t0 := time.Now()
		adaptertest.WaitSnap(t, a, "the pilot removed by the schedd", 60*time.Second, func(s cluster.Snapshot) bool {
			_, ok := adaptertest.Find(s, string(id))
			return !ok
		})
		t.Logf("FIGURES: an 8 s pilot left the queue %v after its environment was written", time.Since(t0).Round(100*time.Millisecond))
	})
}
