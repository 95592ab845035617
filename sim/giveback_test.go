package sim

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"testing"

	"github.com/harvest-hpc/harvest/internal/slurmtest"
)

// sharedWorkload reads a trace of the shared workloads directory
// ($HARVEST_WORKLOADS, else ../shared/workloads next to the repository),
// or returns false when it is not there.
func sharedWorkload(t *testing.T, name string) (Workload, bool) {
	t.Helper()
	dir := os.Getenv("HARVEST_WORKLOADS")
	if dir == "" {
		root, err := slurmtest.RepoRoot()
		if err != nil {
			t.Fatal(err)
		}
		dir = filepath.Join(root, "..", "shared", "workloads")
	}
	w, err := ReadFile(filepath.Join(dir, name), "swf")
	if errors.Is(err, fs.ErrNotExist) {
		t.Logf("%s not found in %s: that case is left out", name, dir)
		return w, false
	}
	if err != nil {
		t.Fatal(err)
	}
	return w, true
}

// startsOf maps every foreign job that started to its start.
func startsOf(res Result) map[string]int64 {
	m := map[string]int64{}
	for _, r := range res.Records {
		if !r.Pilot && r.Start >= 0 {
			m[r.Name] = r.Start
		}
	}
	return m
}

// TestPreemptionWithNoGraceDelaysNoForeignJobAtAll is the claim of the
// preemption mode: with pilots in a preemptible tier and no grace time,
// every foreign job starts exactly when it starts without harvesting. The
// pilots still harvest, and lose work to the preemptions.
func TestPreemptionWithNoGraceDelaysNoForeignJobAtAll(t *testing.T) {
	type tc struct {
		name string
		w    Workload
		mod  func(*Config)
	}
	cases := []tc{
		{"a light workload", lightWorkload(11, 60), nil},
		{"a busy queue and an endless backlog", busyWorkload(12, 300), func(c *Config) { c.Nodes = 32 }},
		{"a busy queue, three reservations and a 30 s poll", busyWorkload(13, 300), func(c *Config) {
			c.Nodes, c.Cluster.Reservations, c.Poll = 32, 3, 30
		}},
		{"a busy queue with sizing and shrinking", busyWorkload(14, 300), func(c *Config) {
			c.Nodes, c.GiveBack = 32, PreemptionSizing
		}},
	}
	if kth, ok := sharedWorkload(t, "KTH-SP2-1996-2.1-cln.swf.gz"); ok {
		// Ten days of a production trace.
		start := int64(599850 + 2*2592000)
		cases = append(cases, tc{"ten days of the KTH SP2 trace", kth, func(c *Config) {
			c.Nodes, c.From, c.To, c.TaskSeconds = 100, start, start+10*86400, 300
		}})
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			mod := func(c *Config) {
				c.HarvestBacklog = 1_000_000_000
				if tc.mod != nil {
					tc.mod(c)
				}
			}
			base := runMode(t, tc.w, Baseline, mod)
			pre := runMode(t, tc.w, Harvest, func(c *Config) {
				c.GiveBack = Preemption
				mod(c)
			})
			if pre.Harvest.UsefulNodeSeconds == 0 {
				t.Fatal("the harvest did no work: the comparison would prove nothing")
			}
			want, got := startsOf(base), startsOf(pre)
			if len(want) == 0 {
				t.Fatal("no foreign job started")
			}
			late := 0
			for name, b := range want {
				if s, ok := got[name]; !ok || s != b {
					late++
					if late <= 5 {
						t.Errorf("job %s started at %d (started: %v), in baseline at %d", name, s, ok, b)
					}
				}
			}
			for name := range got {
				if _, ok := want[name]; !ok {
					t.Errorf("job %s started only with harvesting", name)
				}
			}
			// The simulator's own harm measure agrees: no foreign job waited
			// while it could have run had the pilots been absent.
			if b := pre.Foreign.Blocked; b.Jobs != 0 || b.SumS != 0 {
				t.Errorf("pilots blocked %d jobs for %d s in all", b.Jobs, b.SumS)
			}
			preempted := 0
			for _, r := range pre.Records {
				if r.Preempted {
					preempted++
				}
			}
			t.Logf("%d foreign jobs, %d late; %d pilots, %d preempted, %d useful node-s, %d task-s lost",
				len(want), late, pre.Harvest.Pilots, preempted, pre.Harvest.UsefulNodeSeconds, pre.Harvest.LostTaskSeconds)
		})
	}
}

// TestAGraceTimeDelaysTheJobsThatPreempt shows the comparison above can
// fail: with a 60 s grace, jobs that preempt pilots start up to 60 s late.
func TestAGraceTimeDelaysTheJobsThatPreempt(t *testing.T) {
	w := busyWorkload(12, 300)
	mod := func(c *Config) { c.Nodes, c.HarvestBacklog = 32, 1_000_000_000 }
	base := startsOf(runMode(t, w, Baseline, mod))
	pre := startsOf(runMode(t, w, Harvest, func(c *Config) { mod(c); c.GiveBack, c.GraceTime = Preemption, 60 }))
	late, worst := 0, int64(0)
	for name, b := range base {
		if d := pre[name] - b; d > 0 {
			late++
			worst = max(worst, d)
		}
	}
	if late == 0 {
		t.Fatal("no job started late with a 60 s grace time")
	}
	t.Logf("%d of %d jobs late, the worst by %d s", late, len(base), worst)
}
