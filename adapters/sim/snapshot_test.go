package sim

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/harvest-hpc/harvest/adapters"
	"github.com/harvest-hpc/harvest/cluster"
)

// TestReusedSnapshotsEqualFullOnes drives clusters that reuse their
// snapshots (ReuseSnapshots: the running jobs' part kept from one
// snapshot to the next, only what changed written again) through random
// runs (foreign jobs on shared cores, pilots submitted, cancelled, shrunk
// and preempted, harvest work, multifactor priority) and compares, at
// random points, each snapshot with one built whole.
func TestReusedSnapshotsEqualFullOnes(t *testing.T) {
	ctx := context.Background()
	for seed := range uint64(8) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			r := rand.New(rand.NewPCG(seed, 34))
			cfg := DefaultConfig()
			cfg.Nodes, cfg.CoresPerNode, cfg.Latency = 6+r.IntN(20), 1+r.IntN(4), r.Int64N(3)
			cfg.Preemption = seed%2 == 1
			if seed%4 == 1 {
				cfg.GraceTime = 30 + r.Int64N(120) // preempted pilots run on, idle
			}
			cfg.TimeMinSizing = seed%3 == 0
			if seed%4 == 2 {
				m := DefaultMultifactor()
				cfg.Multifactor = &m
			}
			c, err := New(cfg)
			if err != nil {
				t.Fatal(err)
			}
			c.ReuseSnapshots()
			showBusy := seed%4 != 3
			if showBusy {
				c.ShowBusy()
			}
			if err := c.AddWork(Work{ID: "w", Submit: 0, NodeSeconds: 1 << 40, TaskSeconds: 60 + r.Int64N(300)}); err != nil {
				t.Fatal(err)
			}
			for i := range 400 { // short tasks later: idle pilots take them
				if err := c.AddWork(Work{ID: fmt.Sprint("s", i), Submit: r.Int64N(40000), NodeSeconds: 1 + r.Int64N(300), TaskSeconds: 1 + r.Int64N(30)}); err != nil {
					t.Fatal(err)
				}
			}
			for i := range 300 {
				cores := 1 + r.IntN(cfg.Nodes*cfg.cores()/2)
				if _, err := c.AddJob(JobSpec{Name: fmt.Sprint(i), User: fmt.Sprint("u", r.IntN(4)), Cores: cores, Nodes: (cores + cfg.cores() - 1) / cfg.cores(),
					TimeLimit: cluster.Limit(60 + r.Int64N(7200)), RunTime: r.Int64N(7200), Submit: r.Int64N(40000)}); err != nil {
					t.Fatal(err)
				}
			}
			compared, reused := 0, 0
			for now := int64(0); now < 40000; now += 1 + r.Int64N(120) {
				if err := c.AdvanceTo(now); err != nil {
					t.Fatal(err)
				}
				reused += c.reusable()
				got, err := c.Snapshot(ctx)
				if err != nil {
					t.Fatal(err)
				}
				c.mu.Lock()
				c.reuseSnap = false
				c.mu.Unlock()
				want, err := c.Snapshot(ctx)
				if err != nil {
					t.Fatal(err)
				}
				c.mu.Lock()
				c.reuseSnap = true
				c.mu.Unlock()
				if !slices.Equal(got.Jobs, want.Jobs) {
					for i := range max(len(got.Jobs), len(want.Jobs)) {
						if i >= len(got.Jobs) || i >= len(want.Jobs) || got.Jobs[i] != want.Jobs[i] {
							t.Fatalf("at %d, job %d: reused %+v, whole %+v", now, i, at(got.Jobs, i), at(want.Jobs, i))
						}
					}
				}
				// InProcess: the agent checks only the figures of what the
				// cluster checked entry by entry; the whole check must pass.
				if err := got.Validate(); err != nil {
					t.Fatalf("at %d: a reused snapshot fails the agent's whole check: %v", now, err)
				}
				compared++
				// What the agent does to a snapshot (enrich): marks the
				// master, and the busy pilots when the cluster does not
				// (a Busy map); the next one must not show it.
				var pilots []string
				for i := range got.Jobs {
					if j := &got.Jobs[i]; j.Pilot {
						pilots = append(pilots, j.ID)
						j.Master = r.IntN(3) == 0
						if !showBusy {
							j.Busy = r.IntN(2) == 0
						}
					}
				}
				switch k := r.IntN(10); {
				case k < 4:
					for range 1 + r.IntN(4) {
						if _, err := c.Submit(ctx, adapters.PilotSpec{TimeLimit: cluster.Limit(600 + r.Int64N(20000)), MinTimeLimit: 300, Preemptible: r.IntN(2) == 0, Command: []string{"x"}}); err != nil {
							t.Fatal(err)
						}
					}
				case k < 6 && len(pilots) > 0:
					if err := c.Cancel(ctx, adapters.PilotID(pilots[r.IntN(len(pilots))])); err != nil {
						t.Fatal(err)
					}
				case k < 7 && len(pilots) > 0:
					_ = c.Shrink(ctx, adapters.PilotID(pilots[r.IntN(len(pilots))]), now+60+r.Int64N(600)) // refused when not running: fine
				}
			}
			if compared < 100 || reused == 0 {
				t.Fatalf("compared %d snapshots, %d running jobs reused: the test reused nothing", compared, reused)
			}
		})
	}
}

// reusable counts the running jobs the next snapshot finds in the last
// one.
func (c *Cluster) reusable() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, j := range c.running {
		if _, ok := slices.BinarySearch(c.snapSeq, j.seq); ok {
			n++
		}
	}
	return n
}

func at(jobs []cluster.Job, i int) any {
	if i < len(jobs) {
		return jobs[i]
	}
	return "none"
}

// TestAReusedSnapshotShowsAnIdlePilotGoingBusy: a pilot shown idle (its
// next task would not finish before its limit) takes a short task that
// arrives later; the reused snapshot shows it busy.
func TestAReusedSnapshotShowsAnIdlePilotGoingBusy(t *testing.T) {
	ctx := context.Background()
	cfg := DefaultConfig()
	cfg.Nodes = 2
	c, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	c.ReuseSnapshots()
	c.ShowBusy()
	if err := c.AddWork(Work{ID: "long", NodeSeconds: 5000, TaskSeconds: 500}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Submit(ctx, adapters.PilotSpec{TimeLimit: 600, Command: []string{"x"}}); err != nil {
		t.Fatal(err)
	}
	busy := func(at int64) bool {
		t.Helper()
		if err := c.AdvanceTo(at); err != nil {
			t.Fatal(err)
		}
		s, err := c.Snapshot(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(s.Jobs) != 1 || s.Jobs[0].State != cluster.Running {
			t.Fatalf("at %d: %+v, want the pilot running", at, s.Jobs)
		}
		return s.Jobs[0].Busy
	}
	if !busy(10) || busy(510) {
		t.Fatal("the pilot should run its first task, then idle (100 s left for a 500 s task)")
	}
	if err := c.AddWork(Work{ID: "short", Submit: 520, NodeSeconds: 50, TaskSeconds: 50}); err != nil {
		t.Fatal(err)
	}
	if !busy(530) {
		t.Fatal("at 530 the pilot runs the short task, the snapshot shows it idle")
	}
}
