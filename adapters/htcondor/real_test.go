package htcondor

import (
	"reflect"
	"testing"

	"github.com/harvest-hpc/harvest/cluster"
)

// realPool parses the outputs captured on the personal pool of
// scripts/minipool.sh (HTCondor 25.14.0, testdata/README.md): four
// one-CPU nodes with a partitionable slot each; bob's job runs on n2,
// two pilots of the harvest account on n3 and n4, n1 is idle.
func realPool(t *testing.T, f Format) ([]SlotAd, []JobAd) {
	t.Helper()
	ext := ".json"
	if f == FormatLong {
		ext = ".long"
	}
	slots, err := ParseCondorStatus(fixture(t, "condor_status_25.14.0"+ext), f)
	if err != nil {
		t.Fatalf("condor_status: %v", err)
	}
	jobs, err := ParseCondorQ(fixture(t, "condor_q_25.14.0"+ext), f, nil)
	if err != nil {
		t.Fatalf("condor_q: %v", err)
	}
	return slots, jobs
}

func TestTheCapturedRealPoolMapsToThisSnapshot(t *testing.T) {
	for _, f := range []Format{FormatJSON, FormatLong} {
		slots, jobs := realPool(t, f)
		s, err := BuildSnapshot(slots, jobs, View{Tag: "harvest-pilot", Now: 1, MaxLifetime: 86400})
		if err != nil {
			t.Fatal(err)
		}
		max := cluster.Limit(86400)
		const now, pilotStart = 1795665508, 1795665507
		want := cluster.Snapshot{
			Now: now, TotalNodes: 4, IdleNodes: 1, MaxTime: &max,
			Nodes: []cluster.Node{
				{Name: "n1.harvest-condor", State: cluster.NodeIdle, CPUs: 1},
				{Name: "n2.harvest-condor", State: cluster.NodeAllocated, CPUs: 1},
				{Name: "n3.harvest-condor", State: cluster.NodeAllocated, CPUs: 1},
				{Name: "n4.harvest-condor", State: cluster.NodeAllocated, CPUs: 1},
			},
			Jobs: []cluster.Job{
				{ID: "7.0", User: "bob", Name: "bob-analysis", State: cluster.Running, Nodes: 1, TimeLimit: cluster.Unlimited,
					SubmitTime: 1795665497, StartTime: 1795665501, RunTime: now - 1795665501, NodeList: "n2.harvest-condor"},
				{ID: "8.0", User: "harvest", Name: "harvest-pilot", State: cluster.Running, Nodes: 1, TimeLimit: 600, Pilot: true,
					SubmitTime: 1795665501, StartTime: pilotStart, RunTime: now - pilotStart, NodeList: "n4.harvest-condor"},
				{ID: "9.0", User: "harvest", Name: "harvest-pilot", State: cluster.Running, Nodes: 1, TimeLimit: 600, Pilot: true,
					SubmitTime: 1795665502, StartTime: pilotStart, RunTime: now - pilotStart, NodeList: "n3.harvest-condor"},
			},
		}
		if !reflect.DeepEqual(s, want) {
			t.Errorf("%s: snapshot\n%+v\nwant\n%+v", f, s, want)
		}
	}
}

// The collector's ads lag the schedd: right after a pilot starts,
// condor_status may still show its partitionable slot whole and
// Unclaimed. A machine the schedd runs a job on is not idle.
func TestAMachineTheScheddRunsAJobOnIsNotIdleWhateverTheCollectorStillSays(t *testing.T) {
	slots, jobs := realPool(t, FormatJSON)
	var stale []SlotAd
	for _, sl := range slots {
		if sl.Machine == "n3.harvest-condor" {
			if sl.Dynamic {
				continue // not advertised yet
			}
			sl.CPUs, sl.MemoryMB = sl.TotalSlotCPUs, sl.TotalSlotMemMB
		}
		stale = append(stale, sl)
	}
	s, err := BuildSnapshot(stale, jobs, View{Tag: "harvest-pilot", Now: 1})
	if err != nil {
		t.Fatal(err)
	}
	if s.IdleNodes != 1 || s.Nodes[2].State != cluster.NodeAllocated {
		t.Errorf("idle nodes %d, n3 %+v; want 1 idle and n3 allocated (pilot 9.0 runs there)", s.IdleNodes, s.Nodes[2])
	}
}

// For a moment after the start, the schedd lists a job as running before
// its ad names the machine (RemoteHost unset): it still takes a machine.
func TestARunningJobOnNoNamedMachineStillTakesOne(t *testing.T) {
	slots, jobs := realPool(t, FormatJSON)
	var stale []SlotAd
	for _, sl := range slots {
		if sl.Machine == "n3.harvest-condor" {
			if sl.Dynamic {
				continue
			}
			sl.CPUs, sl.MemoryMB = sl.TotalSlotCPUs, sl.TotalSlotMemMB
		}
		stale = append(stale, sl)
	}
	for i := range jobs {
		if jobs[i].ID() == "9.0" {
			jobs[i].RemoteHost, jobs[i].CurrentStart = "", 0
		}
	}
	s, err := BuildSnapshot(stale, jobs, View{Tag: "harvest-pilot", Now: 1})
	if err != nil {
		t.Fatal(err)
	}
	if s.IdleNodes != 1 {
		t.Errorf("idle nodes %d, want 1 (pilot 9.0 runs on some machine): %+v", s.IdleNodes, s.Nodes)
	}
	// A scheduler-universe job (DAGMan) never has a RemoteHost: no machine.
	var idle []SlotAd
	for _, sl := range slots {
		if !sl.Dynamic {
			sl.CPUs, sl.MemoryMB = sl.TotalSlotCPUs, sl.TotalSlotMemMB
			idle = append(idle, sl)
		}
	}
	jobs = []JobAd{{Cluster: 99, Owner: "bob", Status: statusRunning, Universe: universeScheduler, Limit: cluster.Unlimited}}
	if s, err := BuildSnapshot(idle, jobs, View{Tag: "harvest-pilot", Now: 1}); err != nil || s.IdleNodes != 4 {
		t.Errorf("idle nodes %d (%v) with only DAGMan running, want 4", s.IdleNodes, err)
	}
}
