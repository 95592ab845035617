package htcondor

import (
	"fmt"
	"testing"

	"github.com/harvest-hpc/harvest/agent/policy"
	"github.com/harvest-hpc/harvest/cluster"
)

// What the agent's policy decides on HTCondor snapshots: no expected
// start, no reservations; pilots get the maximum lifetime and are released
// when idle foreign jobs could use their machines.
func TestThePolicyOnHTCondorSnapshots(t *testing.T) {
	machines := func(n int) []SlotAd {
		var out []SlotAd
		for i := 1; i <= n; i++ {
			m := fmt.Sprintf("node%d", i)
			out = append(out, SlotAd{Name: "slot1@" + m, Machine: m, State: "Unclaimed", Partitionable: true,
				CPUs: 16, TotalSlotCPUs: 16, MemoryMB: 64000, TotalSlotMemMB: 64000})
		}
		return out
	}
	// pilotsOn marks the first n machines as taken by running pilots.
	pilotsOn := func(slots []SlotAd, n int) ([]SlotAd, []JobAd) {
		var jobs []JobAd
		for i := 0; i < n; i++ {
			slots[i].CPUs, slots[i].MemoryMB = 0, 0
			jobs = append(jobs, JobAd{Cluster: int64(500 + i), Status: statusRunning, Universe: 5, PilotTag: "harvest-pilot",
				Limit: 86400, CurrentStart: 1000, ServerTime: 1600, RemoteHost: "slot1_1@" + slots[i].Machine})
		}
		return slots, jobs
	}
	idleJob := func(cluster int64, cpus int64) JobAd {
		return JobAd{Cluster: cluster, Owner: "alice", Status: statusIdle, Universe: 5, RequestCPUs: cpus, RequestMemoryMB: 2000, QDate: 1500, ServerTime: 1600}
	}
	cfg := policy.DefaultConfig()
	cfg.Granularity = 1 // Info.TimeGranularity of this adapter
	cases := []struct {
		name        string
		build       func() ([]SlotAd, []JobAd)
		minNodes    int
		wantCase    policy.Case
		wantSubmit  int
		wantLimit   cluster.Limit
		wantRelease int
	}{
		{"an idle pool gets pilots living the configured maximum lifetime",
			func() ([]SlotAd, []JobAd) { return machines(4), nil },
			0, policy.CaseNoPendingJob, 4, 86400, 0},
		{"an idle job that fits a pilot's machine makes the agent release one pilot",
			func() ([]SlotAd, []JobAd) {
				s, j := pilotsOn(machines(4), 4)
				return s, append(j, idleJob(900, 4))
			},
			2, policy.CaseReleaseForTopJob, 0, 0, 1},
		{"an idle job that can start on an idle machine needs no release",
			func() ([]SlotAd, []JobAd) {
				s, j := pilotsOn(machines(4), 3)
				return s, append(j, idleJob(900, 4))
			},
			0, policy.CaseTopJobFits, 0, 0, 0},
		{"pilots at the floor are kept even for an idle job",
			func() ([]SlotAd, []JobAd) {
				s, j := pilotsOn(machines(4), 4)
				return s, append(j, idleJob(900, 4))
			},
			4, policy.CaseNoIdleNodes, 0, 0, 0},
		{"an idle job that fits no machine does not stop the harvest",
			func() ([]SlotAd, []JobAd) {
				s, j := pilotsOn(machines(4), 2)
				return s, append(j, idleJob(900, 64))
			},
			0, policy.CaseNoPendingJob, 2, 86400, 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			slots, jobs := tc.build()
			s, err := BuildSnapshot(slots, jobs, View{Tag: "harvest-pilot", Now: 1600, MaxLifetime: 86400})
			if err != nil {
				t.Fatal(err)
			}
			s.MinNodes = tc.minNodes
			d := policy.Decide(policy.Input{Snapshot: s}, cfg)
			if d.Case != tc.wantCase {
				t.Fatalf("case %s, want %s (%s)", d.Case, tc.wantCase, d.Reason)
			}
			count, limit := 0, cluster.Limit(0)
			if d.Submit != nil {
				count, limit = d.Submit.Count, d.Submit.TimeLimit
			}
			if count != tc.wantSubmit || (count > 0 && limit != tc.wantLimit) || len(d.Release) != tc.wantRelease {
				t.Fatalf("decision %+v (submit %d with %v), want submit %d with %v and %d released", d, count, limit, tc.wantSubmit, tc.wantLimit, tc.wantRelease)
			}
		})
	}
}
