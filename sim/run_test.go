package sim

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"reflect"
	"testing"

	simcluster "github.com/harvest-hpc/harvest/adapters/sim"
	"github.com/harvest-hpc/harvest/cluster"
)

// lightWorkload is a seeded random workload on 16 nodes. Every job is
// wider than half the cluster, so no two run side by side, and jobs mostly
// arrive after the previous one ended: a delay the harvest imposes on one
// job is not compounded by queueing behind it.
func lightWorkload(seed uint64, n int) Workload {
	r := rand.New(rand.NewPCG(seed, 1))
	w := Workload{Format: "swf"}
	t := int64(0)
	for i := range n {
		t += 1800 + r.Int64N(3600)
		limit := 600 + r.Int64N(3000)
		w.Jobs = append(w.Jobs, Job{
			ID: fmt.Sprint(i), Nodes: 9 + r.IntN(8), Submit: t,
			TimeLimit: cluster.Seconds(limit), RunTime: 1 + r.Int64N(limit),
		})
	}
	return w
}

func runMode(t *testing.T, w Workload, mode Mode, mod func(*Config)) Result {
	t.Helper()
	cfg := DefaultConfig()
	cfg.Mode, cfg.Nodes = mode, 16
	cfg.HarvestBacklog, cfg.TaskSeconds = 1_000_000, 120
	if mod != nil {
		mod(&cfg)
	}
	res, err := Run(context.Background(), w, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

func TestHarvestDelaysNoForeignJobByMoreThanTheReactionTime(t *testing.T) {
	for _, tc := range []struct {
		name          string
		poll, latency int64
	}{
		{"with a 10 s poll and an instant scheduler", 10, 0},
		{"with a 30 s poll and a 5 s scheduler latency", 30, 5},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for seed := range uint64(3) {
				w := lightWorkload(seed, 60)
				mod := func(c *Config) {
					c.Poll, c.Cluster.Latency, c.NoRecommend = tc.poll, tc.latency, true
				}
				base := runMode(t, w, Baseline, mod)
				harv := runMode(t, w, Harvest, mod)
				if harv.Harvest.UsefulNodeSeconds == 0 {
					t.Fatal("the harvest did no work: the comparison would prove nothing")
				}
				// One poll to see the job, the scheduler's latency to
				// start it, and the policy's miniTime wait (case 4).
				bound := tc.poll + tc.latency + DefaultConfig().Agent.Policy.MiniTime
				starts := map[string]int64{}
				for _, r := range base.Records {
					if !r.Pilot {
						starts[r.Name] = r.Start
					}
				}
				for _, r := range harv.Records {
					if r.Pilot {
						continue
					}
					b := starts[r.Name]
					if b < 0 {
						continue
					}
					if r.Start < 0 || r.Start-b > bound {
						t.Errorf("seed %d: job %s started at %d, in baseline at %d: %d s later, bound %d s", seed, r.Name, r.Start, b, r.Start-b, bound)
					}
				}
			}
		})
	}
}

func TestTheSameInputGivesByteIdenticalOutput(t *testing.T) {
	w := lightWorkload(7, 30)
	for _, mode := range []Mode{Baseline, Harvest, Fixed} {
		t.Run(string(mode), func(t *testing.T) {
			var out [2][]byte
			for i := range out {
				res := runMode(t, w, mode, nil)
				var b bytes.Buffer
				if err := json.NewEncoder(&b).Encode(res); err != nil {
					t.Fatal(err)
				}
				if err := WriteJobsCSV(&b, res); err != nil {
					t.Fatal(err)
				}
				out[i] = b.Bytes()
			}
			if !bytes.Equal(out[0], out[1]) {
				t.Error("two runs differ")
			}
		})
	}
}

func TestModesOnAHandComputedWorkload(t *testing.T) {
	// 4 nodes for 1000 s: one 2-node job runs 0..500. A 4-node job
	// (limit 300) arrives at 100 and waits for it.
	w := Workload{Format: "thesis", Jobs: []Job{
		{ID: "a", Nodes: 2, TimeLimit: 500, RunTime: 500, Submit: 0},
		{ID: "b", Nodes: 4, TimeLimit: 300, RunTime: 300, Submit: 100},
	}}
	mod := func(c *Config) {
		c.Nodes, c.To, c.HarvestBacklog, c.TaskSeconds, c.NoRecommend = 4, 1000, 100, 60, true
		c.FixedLimit = 600
		c.Agent.Policy.IdleMargin = 0
	}
	t.Run("baseline leaves two nodes idle until the big job starts", func(t *testing.T) {
		r := runMode(t, w, Baseline, mod)
		// Busy node-seconds: 2x500 + 4x300 = 2200 of 4000.
		if r.Utilization != 0.55 || r.Foreign.MeanWaitS != 200 || r.Harvest.NodeSeconds != 0 {
			t.Errorf("%+v", r)
		}
		// a: no wait, BSLD 1; b: 400 s wait for 300 s, BSLD 700/300.
		// One user ("user"): NUWT = 400 / (2x500 + 4x300), F = 0.
		if sd := r.Foreign.BoundedSlowdown; sd.Jobs != 2 || math.Abs(sd.Mean-(1+7.0/3)/2) > 1e-12 || sd.Max != 7.0/3 {
			t.Errorf("bounded slowdown %+v", sd)
		}
		if u := r.Foreign.Users; u.Count != 1 || u.NUWT["user"] != 400.0/2200 || u.Fairness != 0 {
			t.Errorf("users %+v", u)
		}
	})
	t.Run("harvest fills the hole and gives it back in time", func(t *testing.T) {
		r := runMode(t, w, Harvest, mod)
		if r.Foreign.MaxWaitS != 400 {
			t.Errorf("the 4-node job waited %d s, want 400 as in baseline", r.Foreign.MaxWaitS)
		}
		if r.Harvest.UsefulNodeSeconds < 1500 || r.Utilization < 0.9 {
			t.Errorf("harvest %+v utilisation %.3f", r.Harvest, r.Utilization)
		}
	})
	t.Run("with an idle margin of 1 one of the two idle nodes stays free while the big job waits", func(t *testing.T) {
		r := runMode(t, w, Harvest, func(c *Config) { mod(c); c.Agent.Policy.IdleMargin = 1 })
		if r.Foreign.MaxWaitS != 400 {
			t.Errorf("the 4-node job waited %d s, want 400 as in baseline", r.Foreign.MaxWaitS)
		}
		// Pilots: 2 nodes until b arrives at 100, then 1 until a ends at
		// 500, 4 once b ends at 800: at most 2x100 + 400 + 4x200 = 1400
		// node-seconds, less the rounds' reaction.
		if n := r.Harvest.NodeSeconds; n < 1300 || n > 1400 {
			t.Errorf("pilots held %d node-seconds, want 1300-1400", n)
		}
	})
	t.Run("fixed 10-minute pilots take the hole and delay the big job", func(t *testing.T) {
		r := runMode(t, w, Fixed, mod)
		if r.Foreign.MaxWaitS <= 400 {
			t.Errorf("the 4-node job waited %d s; fixed pilots should have delayed it", r.Foreign.MaxWaitS)
		}
	})
}

func TestAPartitionMaxTimeBoundsHowLongTheFloorCanHoldNodes(t *testing.T) {
	// With the master's recommendation (10 nodes for a big backlog) the
	// harvest keeps 10 of 16 nodes; a pilot submitted while nothing is
	// pending asks for an unlimited limit. The partition's MaxTime is
	// what makes those pilots end, so that jobs wider than 6 nodes start.
	w := lightWorkload(3, 40)
	res := runMode(t, w, Harvest, func(c *Config) { c.Cluster.MaxTime = 3600 })
	if res.Foreign.Started < res.Foreign.Jobs-1 {
		t.Errorf("%d of %d foreign jobs started", res.Foreign.Started, res.Foreign.Jobs)
	}
	for _, r := range res.Records {
		if r.Pilot && r.Start >= 0 && (r.Limit.IsUnlimited() || r.Limit > 3600) {
			t.Fatalf("pilot %s ran with limit %s beyond the partition's MaxTime", r.ID, r.Limit)
		}
	}
}

// busyWorkload is a seeded random workload on 32 nodes that keeps a queue:
// jobs of 1 to 32 nodes arrive faster than they finish at times, run
// shorter than their limits, some at their limit.
func busyWorkload(seed uint64, n int) Workload {
	r := rand.New(rand.NewPCG(seed, 2))
	w := Workload{Format: "swf"}
	t := int64(0)
	for i := range n {
		t += r.Int64N(1500)
		limit := 300 + r.Int64N(3*3600)
		run := 1 + r.Int64N(limit)
		if r.IntN(5) == 0 {
			run = limit
		}
		w.Jobs = append(w.Jobs, Job{ID: fmt.Sprint(i), Nodes: 1 + r.IntN(32), Submit: t, TimeLimit: cluster.Seconds(limit), RunTime: run})
	}
	return w
}

func TestQuietRoundsChangeNothing(t *testing.T) {
	for _, tc := range []struct {
		name string
		w    Workload
		mod  func(*Config)
	}{
		{"a light workload and an endless backlog", lightWorkload(5, 60), func(c *Config) { c.HarvestBacklog = 1_000_000_000 }},
		{"a busy queue and an endless backlog", busyWorkload(1, 300), func(c *Config) { c.Nodes, c.HarvestBacklog = 32, 1_000_000_000 }},
		{"a busy queue and a backlog that runs out", busyWorkload(2, 300), func(c *Config) { c.Nodes, c.HarvestBacklog = 32, 3000 }},
		{"a busy queue, a floor and the recommendation kept", busyWorkload(3, 300), func(c *Config) {
			c.Nodes, c.HarvestBacklog, c.Agent.Policy.MinNodes, c.Agent.Policy.KeepRecommended = 32, 20000, 3, true
		}},
		{"a busy queue, scheduler latency and a 30 s poll", busyWorkload(4, 300), func(c *Config) {
			c.Nodes, c.HarvestBacklog, c.Cluster.Latency, c.Poll = 32, 1_000_000_000, 7, 30
		}},
		{"a busy queue, three reservations and the expected start", busyWorkload(5, 300), func(c *Config) {
			c.Nodes, c.HarvestBacklog, c.Cluster.Reservations, c.Agent.Policy.UseExpectedStart = 32, 1_000_000_000, 3, true
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			every := runMode(t, tc.w, Harvest, func(c *Config) { tc.mod(c); c.everyRound = true })
			quiet := runMode(t, tc.w, Harvest, tc.mod)
			// At least a third quiet (pilots that end by the top job's
			// start make the busy queues' rounds act more often).
			if quiet.rounds*3 > every.rounds*2 {
				t.Errorf("%d of %d rounds ran: too few were quiet for the test to mean much", quiet.rounds, every.rounds)
			}
			t.Logf("%d of %d rounds ran", quiet.rounds, every.rounds)
			every.rounds, quiet.rounds = 0, 0
			if !reflect.DeepEqual(every, quiet) {
				for i := range every.Records {
					if i < len(quiet.Records) && every.Records[i] != quiet.Records[i] {
						t.Fatalf("first difference, record %d:\nevery round: %+v\nquiet:       %+v", i, every.Records[i], quiet.Records[i])
					}
				}
				t.Fatalf("results differ:\nevery round: %+v\nquiet:       %+v", every.Harvest, quiet.Harvest)
			}
		})
	}
}

func TestPilotHarmIsBoundedByTheReactionTimeAndZeroInBaseline(t *testing.T) {
	w := lightWorkload(11, 80)
	base := runMode(t, w, Baseline, nil)
	if b := base.Foreign.Blocked; b.SumS != 0 || b.Jobs != 0 {
		t.Fatalf("baseline has pilot harm: %+v", b)
	}
	mod := func(c *Config) { c.NoRecommend = true }
	harv := runMode(t, w, Harvest, mod)
	bound := DefaultConfig().Poll + DefaultConfig().Agent.Policy.MiniTime
	if b := harv.Foreign.Blocked; b.Jobs == 0 || b.MaxS > bound {
		t.Fatalf("harvest: %+v; want some jobs blocked, none longer than poll + miniTime = %d s", b, bound)
	}
	fixed := runMode(t, w, Fixed, func(c *Config) { c.FixedLimit = 3600 })
	if f, h := fixed.Foreign.Blocked, harv.Foreign.Blocked; f.SumS < 10*h.SumS || f.MaxS <= bound {
		t.Fatalf("fixed 1 h pilots: %+v, harvest: %+v; fixed pilots that are never released should block far more", f, h)
	}
	t.Logf("harvest %+v, fixed %+v", harv.Foreign.Blocked, fixed.Foreign.Blocked)
}

// manyUsers spreads busyWorkload's jobs over 40 users, so that per-user
// sums (NUWT, F, the multifactor's fair share) have many terms: summed
// in a map's order, their last digits differ from run to run.
func manyUsers(w Workload) Workload {
	for i := range w.Jobs {
		w.Jobs[i].User = fmt.Sprint("u", (i*7)%40)
	}
	return w
}

func TestPerUserFiguresAndFairShareAreByteIdenticalAcrossRuns(t *testing.T) {
	w := manyUsers(busyWorkload(9, 400))
	for _, mode := range []Mode{Baseline, Harvest} {
		t.Run(string(mode), func(t *testing.T) {
			mod := func(c *Config) {
				c.Nodes, c.HarvestBacklog = 32, 1_000_000_000
				m := simcluster.DefaultMultifactor()
				c.Cluster.Multifactor = &m
			}
			var first []byte
			// Go randomises map order per range: a few runs make a
			// difference certain if any sum depends on it.
			for i := range 4 {
				res := runMode(t, w, mode, mod)
				var b bytes.Buffer
				if err := json.NewEncoder(&b).Encode(res); err != nil {
					t.Fatal(err)
				}
				if err := WriteSummary(&b, res); err != nil {
					t.Fatal(err)
				}
				if err := WriteJobsCSV(&b, res); err != nil {
					t.Fatal(err)
				}
				if i == 0 {
					first = b.Bytes()
					continue
				}
				if !bytes.Equal(first, b.Bytes()) {
					a, c := first, b.Bytes()
					k := 0
					for k < min(len(a), len(c)) && a[k] == c[k] {
						k++
					}
					t.Fatalf("run %d differs from run 0 at byte %d: %q vs %q", i, k, a[max(k-40, 0):min(k+40, len(a))], c[max(k-40, 0):min(k+40, len(c))])
				}
			}
		})
	}
}

// TestTheFastPollReleasesPilotsSoonAfterAnEarlyEnd: job A (8 of 16 nodes)
// ends at 1,003 s, an hour before its limit; job B (12 nodes) has waited
// since 100 s for A's nodes and 4 of the pilots'. With the fast poll the
// agent rounds every 2 s while B waits, and B starts within 2 s of A's
// end; with a fixed 10 s poll it starts at the round at 1,010 s. The fast
// poll costs rounds only while B waits.
func TestTheFastPollReleasesPilotsSoonAfterAnEarlyEnd(t *testing.T) {
	w := Workload{Format: "swf", Jobs: []Job{
		{ID: "A", Nodes: 8, Submit: 0, TimeLimit: 3600, RunTime: 1003},
		{ID: "B", Nodes: 12, Submit: 100, TimeLimit: 3600, RunTime: 600},
	}}
	startB := func(res Result) int64 {
		for _, r := range res.Records {
			if r.ID == "B" {
				return r.Start
			}
		}
		t.Fatal("B did not start")
		return 0
	}
	mod := func(fast int64) func(*Config) {
		// The event check (on by default) would see A's end too.
		return func(c *Config) { c.To, c.FastPoll, c.EventCheck = 4*3600, fast, 0 }
	}
	fast := runMode(t, w, Harvest, mod(2))
	slow := runMode(t, w, Harvest, mod(0))
	if s := startB(fast); s < 1003 || s > 1005 {
		t.Errorf("fast poll: B started at %d, want within 2 s of A's end at 1003", s)
	}
	if s := startB(slow); s != 1010 {
		t.Errorf("10 s poll: B started at %d, want 1010 (the next round)", s)
	}
	t.Logf("B started at %d (fast) and %d (10 s); rounds %d and %d", startB(fast), startB(slow), fast.Harvest.Polls, slow.Harvest.Polls)
	// 0-100 s and after B starts: 10 s rounds; while B waits (about 900
	// s): 2 s rounds, about 360 more.
	if d := fast.Harvest.Polls - slow.Harvest.Polls; d < 300 || d > 400 {
		t.Errorf("the fast poll made %d rounds, the 10 s poll %d: want about 360 more", fast.Harvest.Polls, slow.Harvest.Polls)
	}
	if slow.Harvest.Polls != 4*360 || slow.Harvest.PollsPerHour != 360 {
		t.Errorf("10 s poll over 4 h: %d rounds, %v an hour; want 1440, 360", slow.Harvest.Polls, slow.Harvest.PollsPerHour)
	}
}
