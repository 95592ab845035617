package htcondor

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/harvest-hpc/harvest/cluster"
)

func fixture(t testing.TB, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func mixedSnapshot(t *testing.T, f Format) cluster.Snapshot {
	t.Helper()
	ext := ".json"
	if f == FormatLong {
		ext = ".long"
	}
	slots, err := ParseCondorStatus(fixture(t, "condor_status_pool"+ext), f)
	if err != nil {
		t.Fatalf("condor_status: %v", err)
	}
	jobs, err := ParseCondorQ(fixture(t, "condor_q_mixed"+ext), f, nil)
	if err != nil {
		t.Fatalf("condor_q: %v", err)
	}
	s, err := BuildSnapshot(slots, jobs, View{Tag: "harvest-pilot", Now: 42, MaxLifetime: 86400})
	if err != nil {
		t.Fatalf("BuildSnapshot: %v", err)
	}
	return s
}

// The pool of testdata/condor_status_pool.json and the queue of
// testdata/condor_q_mixed.json, mapped by hand: this is the contract.
func TestTheMixedPoolMapsToThisSnapshot(t *testing.T) {
	s := mixedSnapshot(t, FormatJSON)
	max := cluster.Limit(86400)
	want := cluster.Snapshot{
		Now:          1700000000, // the schedd's ServerTime, not the agent's clock
		TotalNodes:   7,
		IdleNodes:    2, // node01 (untouched partitionable slot), node05 (all static slots unclaimed)
		DrainedNodes: 2, // node04 (Drained), node06 (Owner)
		MaxTime:      &max,
		Nodes: []cluster.Node{
			{Name: "node01.example.org", State: cluster.NodeIdle, CPUs: 16},
			{Name: "node02.example.org", State: cluster.NodeAllocated, CPUs: 16},
			{Name: "node03.example.org", State: cluster.NodeAllocated, CPUs: 16},
			{Name: "node04.example.org", State: cluster.NodeDrained, CPUs: 16},
			{Name: "node05.example.org", State: cluster.NodeIdle, CPUs: 8},
			{Name: "node06.example.org", State: cluster.NodeDrained, CPUs: 4},
			{Name: "node07.example.org", State: cluster.NodeAllocated, CPUs: 8},
		},
		Jobs: []cluster.Job{
			// Running, by id. 100.0 is DAGMan (scheduler universe): no slot.
			{ID: "101.0", User: "alice", Name: "analysis.dag+100", State: cluster.Running, Nodes: 1,
				TimeLimit: 86400, RunTime: 3600, SubmitTime: 1699990100, StartTime: 1699996400, NodeList: "node03.example.org"},
			{ID: "102.0", User: "bob", State: cluster.Running, Nodes: 1,
				TimeLimit: 7200, RunTime: 1000, SubmitTime: 1699998000, StartTime: 1699999000, NodeList: "node07.example.org"},
			{ID: "109.0", User: "alice", State: cluster.Running, Nodes: 1, // suspended: still holds its slot
				TimeLimit: cluster.Unlimited, RunTime: 9000, SubmitTime: 1699990000, StartTime: 1699991000, NodeList: "node03.example.org"},
			{ID: "200.0", User: "harvest", Name: "harvest-pilot", State: cluster.Running, Nodes: 1, Pilot: true,
				TimeLimit: 1200, RunTime: 600, SubmitTime: 1699999300, StartTime: 1699999400, NodeList: "node02.example.org"},
			// Pending: JobPrio first, then submission. 103 held, 107 removed,
			// 108 completed are gone; 106 asks 64 CPUs, more than any machine.
			{ID: "105.0", User: "erin", State: cluster.Pending, Nodes: 1, TimeLimit: cluster.Unlimited, SubmitTime: 1699995000, Priority: 5},
			{ID: "300.0", User: "gina", State: cluster.Pending, Nodes: 3, TimeLimit: cluster.Unlimited, SubmitTime: 1699980000},
			{ID: "104.0", User: "dave", State: cluster.Pending, Nodes: 1, TimeLimit: cluster.Unlimited, SubmitTime: 1699990000},
			{ID: "104.1", User: "dave", State: cluster.Pending, Nodes: 1, TimeLimit: cluster.Unlimited, SubmitTime: 1699990000},
			{ID: "201.0", User: "harvest", Name: "harvest-pilot", State: cluster.Pending, Nodes: 1, Pilot: true,
				TimeLimit: cluster.Unlimited, SubmitTime: 1699999900},
		},
	}
	if !reflect.DeepEqual(s, want) {
		t.Errorf("snapshot differs\n got: %+v\nwant: %+v", s, want)
		for i := range max64(len(s.Jobs), len(want.Jobs)) {
			var g, w cluster.Job
			if i < len(s.Jobs) {
				g = s.Jobs[i]
			}
			if i < len(want.Jobs) {
				w = want.Jobs[i]
			}
			if !reflect.DeepEqual(g, w) {
				t.Errorf("job %d\n got %+v\nwant %+v", i, g, w)
			}
		}
	}
}

func max64(a, b int) int {
	if a > b {
		return a
	}
	return b
}

func TestTheLongFormatGivesTheSameSnapshotAsJSON(t *testing.T) {
	if j, l := mixedSnapshot(t, FormatJSON), mixedSnapshot(t, FormatLong); !reflect.DeepEqual(j, l) {
		t.Fatalf("long format differs from JSON\njson: %+v\nlong: %+v", j, l)
	}
}

func TestARealCondorQAdFromHTCondor8_8IsParsed(t *testing.T) {
	jobs, err := ParseCondorQ(fixture(t, "condor_q_clas12_8.8.10.json"), FormatJSON, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(jobs) != 1 {
		t.Fatalf("got %d jobs, want 1", len(jobs))
	}
	j := jobs[0]
	want := JobAd{
		Cluster: 3472942, Proc: 81, Owner: "gemc", Status: statusRunning, Universe: 5,
		RequestCPUs: 1, RequestMemoryMB: 1741, QDate: 1616890323, CurrentStart: 1617115471,
		ServerTime: 1617117434, RemoteHost: "glidein_11052_156649344@CRUSH-OSG-C7-10-5-219-52",
		MinHosts: 1, Limit: cluster.Unlimited, // PeriodicRemove = false: no limit
	}
	if !reflect.DeepEqual(j, want) {
		t.Fatalf("got  %+v\nwant %+v", j, want)
	}
	s, err := BuildSnapshot([]SlotAd{{Name: "slot1@CRUSH-OSG-C7-10-5-219-52", Machine: "CRUSH-OSG-C7-10-5-219-52", State: "Claimed", CPUs: 1, TotalSlotCPUs: 1, MemoryMB: 2500, TotalSlotMemMB: 2500}}, jobs, View{Tag: "harvest-pilot"})
	if err != nil {
		t.Fatal(err)
	}
	got := s.Jobs[0]
	if got.RunTime != 1617117434-1617115471 || got.NodeList != "CRUSH-OSG-C7-10-5-219-52" || got.Pilot {
		t.Fatalf("mapped job %+v", got)
	}
}

func TestJobLimitsComeFromTheDocumentedAttributes(t *testing.T) {
	cases := []struct {
		name  string
		ad    ad
		extra []string
		want  cluster.Limit
	}{
		{"no limit attribute means unlimited", ad{}, nil, cluster.Unlimited},
		{"periodic_remove = false means unlimited", ad{"periodicremove": false}, nil, cluster.Unlimited},
		{"AllowedJobDuration is a limit", ad{"allowedjobduration": int64(3600)}, nil, 3600},
		{"the classic periodic_remove on run time is a limit",
			ad{"periodicremove": expr("(JobStatus == 2) && ((time() - JobCurrentStartDate) > 5400)")}, nil, 5400},
		{"CurrentTime and a product of constants are understood",
			ad{"periodicremove": expr("(CurrentTime - EnteredCurrentStatus) > 2 * 60 * 60")}, nil, 7200},
		{"a periodic_remove of another shape is no limit",
			ad{"periodicremove": expr("(JobStatus == 5) && (HoldReasonCode == 46)")}, nil, cluster.Unlimited},
		{"a site's own attribute counts when configured", ad{"maxruntime": int64(150000)}, []string{"MaxRuntime"}, 150000},
		{"a site's own attribute is ignored when not configured", ad{"maxruntime": int64(150000)}, nil, cluster.Unlimited},
		{"the smallest of several limits wins",
			ad{"allowedjobduration": int64(9000), "harvestlifetime": int64(600),
				"periodicremove": expr("(time() - JobCurrentStartDate) > 1200")}, nil, 600},
		{"a zero or negative duration is not a limit", ad{"allowedjobduration": int64(0)}, nil, cluster.Unlimited},
		{"MaxJobRetirementTime is not a lifetime limit", ad{"maxjobretirementtime": int64(60)}, nil, cluster.Unlimited},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := jobLimit(tc.ad, tc.extra); got != tc.want {
				t.Fatalf("limit = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestMachineStatesFollowTheirSlots(t *testing.T) {
	p := func(machine, state string, cpus, total int64) SlotAd {
		return SlotAd{Name: "slot1@" + machine, Machine: machine, State: state, Partitionable: true,
			CPUs: cpus, TotalSlotCPUs: total, MemoryMB: 1000, TotalSlotMemMB: 1000}
	}
	static := func(slot, machine, state string) SlotAd {
		return SlotAd{Name: slot + "@" + machine, Machine: machine, State: state, CPUs: 2, TotalSlotCPUs: 2, MemoryMB: 100, TotalSlotMemMB: 100}
	}
	cases := []struct {
		name  string
		slots []SlotAd
		want  cluster.NodeState
	}{
		{"an untouched partitionable slot is an idle machine", []SlotAd{p("m", "Unclaimed", 8, 8)}, cluster.NodeIdle},
		{"a partly carved partitionable slot is an allocated machine", []SlotAd{p("m", "Unclaimed", 6, 8)}, cluster.NodeAllocated},
		{"a dynamic slot makes its machine allocated",
			[]SlotAd{p("m", "Unclaimed", 8, 8), {Name: "slot1_1@m", Machine: "m", State: "Claimed", Dynamic: true, CPUs: 1, TotalSlotCPUs: 1}}, cluster.NodeAllocated},
		{"a drained partitionable slot is a drained machine", []SlotAd{p("m", "Drained", 8, 8)}, cluster.NodeDrained},
		{"a machine wholly in the Owner state is drained", []SlotAd{static("slot1", "m", "Owner"), static("slot2", "m", "Owner")}, cluster.NodeDrained},
		{"an Owner slot next to an unclaimed one leaves the machine idle", []SlotAd{static("slot1", "m", "Owner"), static("slot2", "m", "Unclaimed")}, cluster.NodeIdle},
		{"one claimed static slot makes the machine allocated", []SlotAd{static("slot1", "m", "Unclaimed"), static("slot2", "m", "Claimed")}, cluster.NodeAllocated},
		{"a preempting slot is still allocated", []SlotAd{static("slot1", "m", "Preempting")}, cluster.NodeAllocated},
		{"a backfill slot is idle for harvesting", []SlotAd{static("slot1", "m", "Backfill")}, cluster.NodeIdle},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s, err := BuildSnapshot(tc.slots, nil, View{Tag: "t", Now: 1})
			if err != nil {
				t.Fatal(err)
			}
			if len(s.Nodes) != 1 || s.Nodes[0].State != tc.want {
				t.Fatalf("nodes = %+v, want one %s machine", s.Nodes, tc.want)
			}
		})
	}
}

// The policy sees HTCondor through this mapping: an idle foreign job that
// fits a pilot's machine is a pending job of one node, so the policy
// releases a pilot for it; one that fits nowhere is not shown.
func TestIdleForeignJobsThatCouldUseAPilotsMachineArePending(t *testing.T) {
	slots := []SlotAd{
		{Name: "slot1@a", Machine: "a", State: "Unclaimed", Partitionable: true, CPUs: 0, TotalSlotCPUs: 8, MemoryMB: 0, TotalSlotMemMB: 32000},
		{Name: "slot1_1@a", Machine: "a", State: "Claimed", Dynamic: true, CPUs: 8, TotalSlotCPUs: 8, MemoryMB: 32000, TotalSlotMemMB: 32000},
	}
	pilot := JobAd{Cluster: 1, Status: statusRunning, Universe: 5, PilotTag: "harvest-pilot", Limit: 3600, CurrentStart: 100, ServerTime: 200, RemoteHost: "slot1_1@a"}
	cases := []struct {
		name    string
		job     JobAd
		pending bool
	}{
		{"a small idle job fits the pilot's machine", JobAd{Cluster: 2, Status: statusIdle, Universe: 5, RequestCPUs: 2, RequestMemoryMB: 4000}, true},
		{"an idle job whose memory request is an expression fits", JobAd{Cluster: 2, Status: statusIdle, Universe: 5, RequestCPUs: 1}, true},
		{"an idle job asking more CPUs than the machine has does not", JobAd{Cluster: 2, Status: statusIdle, Universe: 5, RequestCPUs: 9}, false},
		{"an idle job asking more memory than the machine has does not", JobAd{Cluster: 2, Status: statusIdle, Universe: 5, RequestCPUs: 1, RequestMemoryMB: 64000}, false},
		{"a held job does not", JobAd{Cluster: 2, Status: statusHeld, Universe: 5, RequestCPUs: 1}, false},
		{"an idle local-universe job does not", JobAd{Cluster: 2, Status: statusIdle, Universe: universeLocal, RequestCPUs: 1}, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s, err := BuildSnapshot(slots, []JobAd{pilot, tc.job}, View{Tag: "harvest-pilot"})
			if err != nil {
				t.Fatal(err)
			}
			var pending []cluster.Job
			for _, j := range s.Jobs {
				if j.State == cluster.Pending {
					pending = append(pending, j)
				}
			}
			if got := len(pending) == 1; got != tc.pending {
				t.Fatalf("pending = %+v, want pending=%v", pending, tc.pending)
			}
			if tc.pending && (pending[0].Nodes != 1 || !pending[0].TimeLimit.IsUnlimited() || pending[0].ExpectedStart != 0) {
				t.Fatalf("pending job %+v: want one node, unlimited, no expected start", pending[0])
			}
			if s.IdleNodes != 0 || len(s.Pilots()) != 1 {
				t.Fatalf("the pilot's machine must be held, not idle: %+v", s)
			}
		})
	}
}

func TestOnlyTheConfiguredTagMarksPilots(t *testing.T) {
	slots := []SlotAd{{Name: "slot1@a", Machine: "a", State: "Unclaimed", CPUs: 4, TotalSlotCPUs: 4}}
	jobs := []JobAd{
		{Cluster: 1, Status: statusIdle, Universe: 5, PilotTag: "harvest-pilot"},
		{Cluster: 2, Status: statusIdle, Universe: 5, PilotTag: "other-agent", BatchName: "harvest-pilot"},
		{Cluster: 3, Status: statusIdle, Universe: 5, BatchName: "harvest-pilot"},
	}
	s, err := BuildSnapshot(slots, jobs, View{Tag: "harvest-pilot"})
	if err != nil {
		t.Fatal(err)
	}
	var pilots []string
	for _, j := range s.Pilots() {
		pilots = append(pilots, j.ID)
	}
	if strings.Join(pilots, ",") != "1.0" {
		t.Fatalf("pilots = %v, want only 1.0 (the batch name alone is not enough)", pilots)
	}
}

func TestGarbageIsAnErrorNeverAnEmptySnapshot(t *testing.T) {
	cases := []struct {
		name  string
		parse func() error
	}{
		{"truncated condor_q JSON", func() error {
			_, err := ParseCondorQ([]byte("[\n{\n  \"ClusterId\": 12,\n  \"ProcId\": 0,\n  \"JobSta"), FormatJSON, nil)
			return err
		}},
		{"an HTML error page from condor_status", func() error {
			_, err := ParseCondorStatus([]byte("<html><body>502 Bad Gateway</body></html>\n"), FormatJSON)
			return err
		}},
		{"condor_status listing nothing", func() error {
			_, err := ParseCondorStatus(nil, FormatJSON)
			return err
		}},
		{"a JSON object instead of an array", func() error {
			_, err := ParseCondorQ([]byte(`{"ClusterId": 1}`), FormatJSON, nil)
			return err
		}},
		{"trailing garbage after the array", func() error {
			_, err := ParseCondorQ([]byte(`[] junk`), FormatJSON, nil)
			return err
		}},
		{"a job ad without a JobStatus", func() error {
			_, err := ParseCondorQ([]byte(`[{"ClusterId": 1, "ProcId": 0}]`), FormatJSON, nil)
			return err
		}},
		{"a job ad with an unknown JobStatus", func() error {
			_, err := ParseCondorQ([]byte(`[{"ClusterId": 1, "ProcId": 0, "JobStatus": 9}]`), FormatJSON, nil)
			return err
		}},
		{"a slot ad without a State", func() error {
			_, err := ParseCondorStatus([]byte(`[{"Name": "slot1@a", "Machine": "a", "Cpus": 1}]`), FormatJSON)
			return err
		}},
		{"a slot whose free CPUs exceed its total", func() error {
			_, err := ParseCondorStatus([]byte(`[{"Name": "slot1@a", "Machine": "a", "State": "Unclaimed", "Cpus": 9, "TotalSlotCpus": 8}]`), FormatJSON)
			return err
		}},
		{"long output that is not ClassAd lines", func() error {
			_, err := ParseCondorQ([]byte("-- Schedd: submit.example.org : <1.2.3.4:9618>\nnot an ad\n"), FormatLong, nil)
			return err
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.parse(); !errors.Is(err, ErrMalformed) {
				t.Fatalf("error = %v, want ErrMalformed", err)
			}
		})
	}
}

func TestAnEmptyQueueIsNoJobs(t *testing.T) {
	for _, f := range []Format{FormatJSON, FormatLong} {
		jobs, err := ParseCondorQ(fixture(t, "condor_q_empty.json"), f, nil)
		if err != nil || len(jobs) != 0 {
			t.Fatalf("%s: jobs %v, err %v; condor_q prints nothing for an empty queue", f, jobs, err)
		}
	}
}

func TestCondorSubmitAnswersGiveTheJobID(t *testing.T) {
	cases := []struct {
		name, out, want string
	}{
		{"terse", string(fixture(t, "condor_submit_terse.txt")), "12.0"},
		{"classic", string(fixture(t, "condor_submit_classic.txt")), "3472942.0"},
		{"terse after a warning line", "WARNING: the line 'foo = bar' was unused\n7.0 - 7.0\n", "7.0"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseSubmit([]byte(tc.out))
			if err != nil || got != tc.want {
				t.Fatalf("ParseSubmit = %q, %v; want %q", got, err, tc.want)
			}
		})
	}
	if _, err := ParseSubmit([]byte("Submitting job(s).\n")); !errors.Is(err, ErrMalformed) {
		t.Fatalf("an answer without an id: %v, want ErrMalformed", err)
	}
}

func TestCondorVersionIsRead(t *testing.T) {
	v, err := ParseVersion(fixture(t, "condor_version_8.8.10.txt"))
	if err != nil || v != "8.8.10" {
		t.Fatalf("version %q, %v", v, err)
	}
}
