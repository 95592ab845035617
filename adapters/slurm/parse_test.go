package slurm

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

// The backfill fixture was captured at about 1795290141 (3 s after submit).
const backfillNow = 1795290141

func TestParseSqueueBackfillScene(t *testing.T) {
	jobs, err := ParseSqueue(fixture(t, "squeue_backfill.txt"), backfillNow, nil)
	if err != nil {
		t.Fatal(err)
	}
	want := []cluster.Job{
		{ID: "1", User: "alice", State: cluster.Running, Nodes: 3, TimeLimit: 180, RunTime: 4,
			SubmitTime: 1795290136, StartTime: 1795290137, NodeList: "n[1-3]", Partition: "batch", Priority: 4294901759, Reason: ""},
		{ID: "2", User: "bob", State: cluster.Pending, Nodes: 4, TimeLimit: 120, Reason: "Resources",
			SubmitTime: 1795290138, ExpectedStart: 1795290317, Partition: "batch", Priority: 4294901758},
		{ID: "3", User: "bob", State: cluster.Pending, Nodes: 1, TimeLimit: 600, Reason: "Priority",
			SubmitTime: 1795290138, ExpectedStart: 1795290437, Partition: "batch", Priority: 4294901757},
		{ID: "4", User: "alice", State: cluster.Pending, Nodes: 1, TimeLimit: cluster.Unlimited, Reason: "Priority",
			SubmitTime: 1795290138, ExpectedStart: 1795290437, Partition: "batch", Priority: 4294901756},
		{ID: "6", User: "root", State: cluster.Pending, Nodes: 1, TimeLimit: 1200, Reason: "Priority",
			SubmitTime: 1795290138, ExpectedStart: 1795290437, Partition: "batch", Priority: 4294901755},
		{ID: "5", User: "alice", State: cluster.Pending, Nodes: 1, TimeLimit: 300, Reason: "JobHeldUser",
			SubmitTime: 1795290138, Partition: "batch", Priority: 0},
	}
	if !reflect.DeepEqual(jobs, want) {
		t.Errorf("jobs:\n got %+v\nwant %+v", jobs, want)
	}
}

func TestParseSqueueCases(t *testing.T) {
	tests := []struct {
		name  string
		file  string
		now   int64
		check func(t *testing.T, jobs []cluster.Job)
	}{
		{"an empty queue is no jobs, not an error", "squeue_empty.txt", backfillNow, func(t *testing.T, jobs []cluster.Job) {
			if len(jobs) != 0 {
				t.Errorf("got %d jobs", len(jobs))
			}
		}},
		{"a running job without --time (365 days) and one with UNLIMITED are both unlimited", "squeue_unlimited.txt", 1795290146,
			func(t *testing.T, jobs []cluster.Job) {
				for _, j := range jobs {
					if !j.TimeLimit.IsUnlimited() {
						t.Errorf("job %s: limit %s, want unlimited", j.ID, j.TimeLimit)
					}
				}
				if jobs[0].ID != "7" || jobs[0].RunTime != 3 || jobs[2].ID != "9" || jobs[2].ExpectedStart != 1826826143 {
					t.Errorf("jobs %+v", jobs)
				}
			}},
		{"a completing job still holds its node but has no time left", "squeue_completing.txt", 1795290150,
			func(t *testing.T, jobs []cluster.Job) {
				j := jobs[0]
				if j.State != cluster.Running || j.Nodes != 1 || j.Remaining() != 0 || j.Reason != "Completing" || j.RunTime != 13 {
					t.Errorf("job %+v remaining %s", j, j.Remaining())
				}
			}},
		{"a completing job that started this second still has a positive limit", "squeue_completing.txt", 1795290137,
			func(t *testing.T, jobs []cluster.Job) {
				if jobs[0].TimeLimit != 1 || jobs[0].Remaining() != 0 {
					t.Errorf("job %+v", jobs[0])
				}
			}},
		{"an expected start in the past is dropped", "squeue_backfill.txt", 1795290400,
			func(t *testing.T, jobs []cluster.Job) {
				if jobs[1].ExpectedStart != 0 || jobs[2].ExpectedStart != 1795290437 {
					t.Errorf("expected starts %d %d", jobs[1].ExpectedStart, jobs[2].ExpectedStart)
				}
			}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			jobs, err := ParseSqueue(fixture(t, tc.file), tc.now, nil)
			if err != nil {
				t.Fatal(err)
			}
			tc.check(t, jobs)
		})
	}
}

func TestParseSqueuePendingOrder(t *testing.T) {
	out := []byte("20|u|PENDING|Priority|1||1:00|100|N/A|50|b\n" +
		"9|u|PENDING|Priority|1||1:00|100|N/A|50|b\n" +
		"11|u|PENDING|Priority|1||1:00|90|N/A|50|b\n" +
		"30|u|PENDING|Resources|2||1:00|200|N/A|70|b\n" +
		"5|u|RUNNING|None|1|n1|1:00|10|20|90|b\n")
	jobs, err := ParseSqueue(out, 1000, nil)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, j := range jobs {
		got = append(got, j.ID)
	}
	want := []string{"5", "30", "11", "9", "20"} // running; then priority, submit time, numeric id
	if !reflect.DeepEqual(got, want) {
		t.Errorf("order %v, want %v", got, want)
	}
}

func TestParseSqueueRejectsGarbage(t *testing.T) {
	tests := []struct{ name, out string }{
		{"a line with too few fields", "1|alice|RUNNING\n"},
		{"a line with a job name in it (too many fields)", "1|alice|RUNNING|None|1|n1|1:00|1|1|1|batch|name\n"},
		{"a human-readable squeue header", "JOBID PARTITION NAME USER ST TIME NODES NODELIST(REASON)\n"},
		{"a non-numeric job id", "x|alice|RUNNING|None|1|n1|1:00|1|1|1|batch\n"},
		{"a zero node count", "1|alice|RUNNING|None|0|n1|1:00|1|1|1|batch\n"},
		{"a bad time limit", "1|alice|RUNNING|None|1|n1|soon|1|1|1|batch\n"},
		{"times not in Unix seconds (SLURM_TIME_FORMAT unset)", "1|alice|RUNNING|None|1|n1|1:00|2026-11-21T19:21:54|2026-11-21T19:21:55|1|batch\n"},
		{"an unexpected state", "1|alice|SUSPENDED|None|1|n1|1:00|1|1|1|batch\n"},
		{"a negative priority", "1|alice|RUNNING|None|1|n1|1:00|1|1|-4|batch\n"},
		{"an infinite priority", "1|alice|PENDING|None|1||1:00|1|0|inf|batch\n"},
		{"a priority past float64", "1|alice|PENDING|None|1||1:00|1|0|1e400|batch\n"},
		{"one good line and one bad line", "1|alice|RUNNING|None|1|n1|1:00|1|1|1|batch\nslurm_load_jobs error\n"},
		{"an empty user", "1||RUNNING|None|1|n1|1:00|1|1|1|batch\n"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			jobs, err := ParseSqueue([]byte(tc.out), 100, nil)
			if !errors.Is(err, ErrParse) {
				t.Errorf("err = %v, jobs %+v; want ErrParse", err, jobs)
			}
		})
	}
}

func TestParseTimeLimit(t *testing.T) {
	tests := []struct {
		in   string
		want cluster.Limit
		ok   bool
	}{
		{"3:00", 180, true},
		{"0:30", 30, true},
		{"10:00", 600, true},
		{"1:00:00", 3600, true},
		{"00:30:00", 1800, true},
		{"1-00:00:00", 86400, true},
		{"2-03:04:05", 2*86400 + 3*3600 + 4*60 + 5, true},
		{"1-02", 86400 + 7200, true},
		{"1-02:03", 86400 + 7200 + 180, true},
		{"364-23:59:00", 364*86400 + 23*3600 + 59*60, true},
		{"365-00:00:00", cluster.Unlimited, true},
		{"UNLIMITED", cluster.Unlimited, true},
		{"INFINITE", cluster.Unlimited, true},
		{"", 0, false},
		{"N/A", 0, false},
		{"5", 0, false},
		{"1:2:3:4", 0, false},
		{"-1:00", 0, false},
		{"1:-5", 0, false},
		{"99999999999999:00", 0, false},
		{"1-", 0, false},
	}
	for _, tc := range tests {
		t.Run(tc.in, func(t *testing.T) {
			got, err := ParseTimeLimit(tc.in)
			if (err == nil) != tc.ok || got != tc.want {
				t.Errorf("ParseTimeLimit(%q) = %v, %v; want %v ok=%v", tc.in, got, err, tc.want, tc.ok)
			}
		})
	}
}

func TestParseSinfo(t *testing.T) {
	tests := []struct {
		name string
		file string
		want NodeCounts
	}{
		{"four idle nodes", "sinfo_idle.txt", NodeCounts{Total: 4, Idle: 4}},
		{"a node held idle by backfill counts as idle and planned", "sinfo_planned.txt", NodeCounts{Total: 4, Idle: 1, Planned: 1, Allocated: 3}},
		{"drained and down nodes count as drained", "sinfo_drained.txt", NodeCounts{Total: 4, Allocated: 2, Drained: 2}},
		{"a node listed in two partitions counts once", "sinfo_two_partitions.txt", NodeCounts{Total: 4, Idle: 4}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			nodes, c, err := ParseSinfo(fixture(t, tc.file))
			if err != nil {
				t.Fatal(err)
			}
			if c != tc.want || len(nodes) != tc.want.Total {
				t.Errorf("counts %+v (%d nodes), want %+v", c, len(nodes), tc.want)
			}
		})
	}
}

func TestParseSinfoRejectsGarbage(t *testing.T) {
	tests := []struct{ name, out string }{
		{"no nodes at all (a partition without nodes is never a real empty cluster)", ""},
		{"a human-readable sinfo table", "PARTITION AVAIL  TIMELIMIT  NODES  STATE NODELIST\nbatch* up infinite 4 idle n[1-4]\n"},
		{"a non-numeric CPU count", "n1|idle|x\n"},
		{"an empty state", "n1||1\n"},
		{"a state that is not a word", "n1|12|1\n"},
		{"an error message", "slurm_load_partitions: Unable to contact slurm controller (connect failure)\n"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := ParseSinfo([]byte(tc.out))
			if !errors.Is(err, ErrParse) {
				t.Errorf("err = %v, want ErrParse", err)
			}
		})
	}
}

func TestParsePartitions(t *testing.T) {
	ps, err := ParsePartitions(fixture(t, "scontrol_partitions.txt"))
	if err != nil {
		t.Fatal(err)
	}
	want := []Partition{
		{Name: "batch", Default: true, MaxTime: cluster.Unlimited, State: "UP", TotalNodes: 4, Nodes: "n[1-4]", PriorityTier: 1, PreemptMode: "OFF"},
		{Name: "short", MaxTime: 1800, DefaultTime: 600, State: "UP", TotalNodes: 4, Nodes: "n[1-4]", PriorityTier: 1, PreemptMode: "OFF"},
	}
	if !reflect.DeepEqual(ps, want) {
		t.Errorf("got %+v\nwant %+v", ps, want)
	}
	ps, err = ParsePartitions(fixture(t, "scontrol_partition_8nodes.txt"))
	if err != nil || len(ps) != 1 || ps[0].TotalNodes != 8 || !ps[0].MaxTime.IsUnlimited() {
		t.Errorf("8-node fixture: %+v, %v", ps, err)
	}

	for name, out := range map[string]string{
		"no partitions":             "",
		"a line without a name":     "MaxTime=UNLIMITED State=UP\n",
		"a partition without limit": "PartitionName=x State=UP\n",
		"a garbled MaxTime":         "PartitionName=x MaxTime=forever\n",
		"an error message":          "Partition nope not found\n",
	} {
		t.Run(name, func(t *testing.T) {
			if _, err := ParsePartitions([]byte(out)); !errors.Is(err, ErrParse) {
				t.Errorf("err = %v, want ErrParse", err)
			}
		})
	}
}

func TestPickPartition(t *testing.T) {
	ps, err := ParsePartitions(fixture(t, "scontrol_partitions.txt"))
	if err != nil {
		t.Fatal(err)
	}
	if p, err := PickPartition(ps, ""); err != nil || p.Name != "batch" {
		t.Errorf("default: %+v, %v", p, err)
	}
	if p, err := PickPartition(ps, "short"); err != nil || p.MaxTime != 1800 {
		t.Errorf("short: %+v, %v", p, err)
	}
	if _, err := PickPartition(ps, "nope"); !errors.Is(err, ErrConfig) {
		t.Errorf("unknown partition: %v", err)
	}
	if _, err := PickPartition(ps[1:], ""); err != nil {
		t.Errorf("a single non-default partition is used: %v", err)
	}
	two := []Partition{{Name: "a"}, {Name: "b"}}
	if _, err := PickPartition(two, ""); !errors.Is(err, ErrConfig) {
		t.Errorf("no default among two: %v", err)
	}
}

func TestParseSbatch(t *testing.T) {
	for _, f := range []string{"sbatch_parsable.txt", "sbatch_parsable_shared.txt"} {
		if id, err := ParseSbatch(fixture(t, f)); err != nil || id == "" {
			t.Errorf("%s: %q, %v", f, id, err)
		}
	}
	if id, err := ParseSbatch([]byte("123;lab\n")); err != nil || id != "123" {
		t.Errorf("with cluster: %q, %v", id, err)
	}
	for _, bad := range []string{"", "Submitted batch job 13\n", "12\n13\n", "abc", "12_3", "-1"} {
		if id, err := ParseSbatch([]byte(bad)); !errors.Is(err, ErrParse) {
			t.Errorf("ParseSbatch(%q) = %q, %v; want ErrParse", bad, id, err)
		}
	}
}

func TestParseVersion(t *testing.T) {
	if v, err := ParseVersion(fixture(t, "sinfo_version.txt")); err != nil || v != "22.05.8" {
		t.Errorf("got %q, %v", v, err)
	}
	if v, err := ParseVersion([]byte("slurm 23.02.1\n")); err != nil || v != "23.02.1" {
		t.Errorf("got %q, %v", v, err)
	}
	for _, bad := range []string{"", "sinfo: unrecognized option", "slurm", "slurm vX"} {
		if _, err := ParseVersion([]byte(bad)); !errors.Is(err, ErrParse) {
			t.Errorf("ParseVersion(%q): %v", bad, err)
		}
	}
}

func TestParseJobCheck(t *testing.T) {
	tests := []struct {
		file string
		want []JobCheck
	}{
		{"jobcheck_pilot.txt", []JobCheck{{"6", "root", "PENDING", "harvest-pilot"}}},
		{"jobcheck_foreign.txt", []JobCheck{{"3", "bob", "PENDING", "C|pipe"}}},
		{"jobcheck_newline.txt", []JobCheck{{"4", "alice", "PENDING", "D\nnewline"}}},
		{"jobcheck_cancelled.txt", []JobCheck{{"6", "root", "CANCELLED", "harvest-pilot"}}},
		{"jobcheck_unknown.txt", nil},
	}
	for _, tc := range tests {
		t.Run(tc.file, func(t *testing.T) {
			got, err := ParseJobCheck(fixture(t, tc.file))
			if err != nil || !reflect.DeepEqual(got, tc.want) {
				t.Errorf("got %+v, %v; want %+v", got, err, tc.want)
			}
		})
	}
	if _, err := ParseJobCheck([]byte("garbage\n")); !errors.Is(err, ErrParse) {
		t.Errorf("garbage: %v", err)
	}
}

func TestParseJobIDs(t *testing.T) {
	ids, err := ParseJobIDs(fixture(t, "squeue_pilots_backfill.txt"))
	if err != nil || !reflect.DeepEqual(ids, []string{"6"}) {
		t.Errorf("got %v, %v", ids, err)
	}
	if ids, err := ParseJobIDs(nil); err != nil || len(ids) != 0 {
		t.Errorf("empty: %v, %v", ids, err)
	}
	if _, err := ParseJobIDs([]byte("6\nslurm_load_jobs error\n")); !errors.Is(err, ErrParse) {
		t.Errorf("garbage: %v", err)
	}
}

func TestSnapshotFromBackfillFixtures(t *testing.T) {
	parts, err := ParsePartitions(fixture(t, "scontrol_partitions.txt"))
	if err != nil {
		t.Fatal(err)
	}
	part, _ := PickPartition(parts, "")
	jobs, err := ParseSqueue(fixture(t, "squeue_backfill.txt"), backfillNow, nil)
	if err != nil {
		t.Fatal(err)
	}
	ids, _ := ParseJobIDs(fixture(t, "squeue_pilots_backfill.txt"))
	MarkPilots(jobs, ids, "harvest-pilot")
	nodes, c, err := ParseSinfo(fixture(t, "sinfo_planned.txt"))
	if err != nil {
		t.Fatal(err)
	}
	s := BuildSnapshot(backfillNow, part, jobs, nodes, c)
	if err := s.Validate(); err != nil {
		t.Fatal(err)
	}
	if s.TotalNodes != 4 || s.IdleNodes != 1 || s.PlannedNodes != 1 || s.MaxTime != nil || s.Partition != "batch" {
		t.Errorf("snapshot %+v", s)
	}
	pilots := s.Pilots()
	if len(pilots) != 1 || pilots[0].ID != "6" || pilots[0].Name != "harvest-pilot" || pilots[0].State != cluster.Pending {
		t.Errorf("pilots %+v", pilots)
	}

	down := part
	down.State = "DOWN"
	s = BuildSnapshot(backfillNow, down, jobs, nodes, c)
	if s.IdleNodes != 0 || s.DrainedNodes != 1 {
		t.Errorf("a DOWN partition must offer no idle node: %+v", s)
	}
	short, _ := PickPartition(parts, "short")
	s = BuildSnapshot(backfillNow, short, jobs, nodes, c)
	if s.MaxTime == nil || *s.MaxTime != 1800 {
		t.Errorf("MaxTime %v", s.MaxTime)
	}
}

// A job without a limit of its own prints NOT_SET (squeue %l; scontrol
// says Partition_Limit): it gets its partition's MaxTime, and the rest of
// the job list still counts (SLURM 22.05 src/squeue/print.c).
func TestAJobWithThePartitionsLimit(t *testing.T) {
	parts, err := ParsePartitions(fixture(t, "scontrol_partitions.txt")) // batch: INFINITE, short: 30 min
	if err != nil {
		t.Fatal(err)
	}
	out := "7|bob|PENDING|Priority|1||NOT_SET|1795290138|N/A|1|short\n" +
		"8|bob|PENDING|Priority|1||Partition_Limit|1795290138|N/A|1|short\n" +
		"9|bob|PENDING|Priority|1||NOT_SET|1795290138|N/A|1|batch\n" +
		"10|bob|PENDING|Priority|1||NOT_SET|1795290138|N/A|1|short,nosuch\n" +
		"11|bob|PENDING|Priority|1||NOT_SET|1795290138|N/A|1|nosuch\n" +
		"1|alice|RUNNING|None|3|n[1-3]|3:00|1795290136|1795290137|4294901759|batch\n"
	jobs, err := ParseSqueue([]byte(out), backfillNow, parts)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]cluster.Limit{"1": 180, "7": 1800, "8": 1800, "9": cluster.Unlimited, "10": 1800, "11": cluster.Unlimited}
	for _, j := range jobs {
		if j.TimeLimit != want[j.ID] {
			t.Errorf("job %s: limit %v, want %v", j.ID, j.TimeLimit, want[j.ID])
		}
	}
	if len(jobs) != 6 {
		t.Errorf("%d jobs", len(jobs))
	}
}

// Output cut short (a command killed mid-line, a broken pipe) must never
// parse: "4" cut from "42\n" is not job 4, and a squeue line missing its
// last characters is not partition "bat".
func TestCutOffOutputIsRefused(t *testing.T) {
	cut := func(name string, n int) []byte {
		b := fixture(t, name)
		return b[:len(b)-n]
	}
	tests := []struct {
		name  string
		parse func() error
	}{
		{"sbatch's id without its newline", func() error { _, err := ParseSbatch([]byte("4")); return err }},
		{"the job list's last line without its newline", func() error {
			_, err := ParseSqueue(cut("squeue_backfill.txt", 1), backfillNow, nil)
			return err
		}},
		{"the job list's last line without its last characters", func() error {
			_, err := ParseSqueue(cut("squeue_backfill.txt", 3), backfillNow, nil)
			return err
		}},
		{"a job list cut inside a line", func() error {
			_, err := ParseSqueue(fixture(t, "squeue_backfill.txt")[:100], backfillNow, nil)
			return err
		}},
		{"the node list's last line", func() error { _, _, err := ParseSinfo(cut("sinfo_planned.txt", 1)); return err }},
		{"the partitions' last line", func() error { _, err := ParsePartitions(cut("scontrol_partitions.txt", 40)); return err }},
		{"the pilot ids", func() error { _, err := ParseJobIDs([]byte("12\n1")); return err }},
		{"the pilot ends", func() error { _, err := ParsePilotEnds([]byte("12|1795290137")); return err }},
		{"a job check", func() error { _, err := ParseJobCheck(cut("jobcheck_pilot.txt", 1)); return err }},
		{"the config", func() error { _, err := ParseConfig(cut("preempt_config_on.txt", 1)); return err }},
		{"the version", func() error { _, err := ParseVersion([]byte("slurm 22.0")); return err }},
		{"the node holders", func() error { _, err := ParseHolders([]byte("1|batch|3|1795290137|RUNNING")); return err }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.parse(); !errors.Is(err, ErrParse) {
				t.Errorf("err = %v, want ErrParse", err)
			}
		})
	}
}

func TestLongLinesAndCRLF(t *testing.T) {
	long := "1|alice|RUNNING|None|3|n[" + strings.Repeat("1,", 100000) + "2]|3:00|1|1|1|batch\r\n"
	jobs, err := ParseSqueue([]byte(long), 10, nil)
	if err != nil || len(jobs) != 1 || len(jobs[0].NodeList) < 200000 || jobs[0].Partition != "batch" {
		t.Errorf("a 200 KB node list: %v", err)
	}
	huge := "1|alice|RUNNING|None|3|" + strings.Repeat("n", maxLine) + "|3:00|1|1|1|batch\n"
	if _, err := ParseSqueue([]byte(huge), 10, nil); !errors.Is(err, ErrParse) {
		t.Errorf("a line over %d bytes: %v", maxLine, err)
	}
}

func TestCrossCheck(t *testing.T) {
	running := func(id string, nodes int) cluster.Job {
		return cluster.Job{ID: id, State: cluster.Running, Nodes: nodes, TimeLimit: 60}
	}
	const listedAt = 1000
	tests := []struct {
		name      string
		jobs      []cluster.Job
		allocated int
		holders   []Holder
		ok        bool
	}{
		{"busy nodes held by the listed jobs", []cluster.Job{running("1", 3)}, 3,
			[]Holder{{"1", "batch", "RUNNING", 3, 900}}, true},
		{"an empty job list beside busy nodes", nil, 3, nil, false},
		{"an empty job list, and squeue shows the jobs when asked again", nil, 3,
			[]Holder{{"1", "batch", "RUNNING", 3, 900}}, false},
		{"busy nodes held by a job of another partition over the same nodes", []cluster.Job{running("1", 1)}, 3,
			[]Holder{{"1", "batch", "RUNNING", 1, 900}, {"2", "debug", "RUNNING", 2, 900}}, true},
		{"a job of ours that started after the job list was read", []cluster.Job{running("1", 1)}, 3,
			[]Holder{{"1", "batch", "RUNNING", 1, 900}, {"2", "batch", "RUNNING", 2, listedAt}}, true},
		{"a job of ours, running before, missing from the job list", []cluster.Job{running("1", 1)}, 3,
			[]Holder{{"1", "batch", "RUNNING", 1, 900}, {"2", "batch", "RUNNING", 2, 950}}, false},
		{"a job of the preemptible tier missing from the job list", []cluster.Job{running("1", 1)}, 2,
			[]Holder{{"1", "batch", "RUNNING", 1, 900}, {"3", "harvest", "RUNNING", 1, 950}}, false},
		{"a suspended job of ours holds its nodes without being listed", []cluster.Job{running("1", 1)}, 3,
			[]Holder{{"1", "batch", "RUNNING", 1, 900}, {"2", "batch", "SUSPENDED", 2, 950}}, true},
		{"fewer nodes held than allocated", []cluster.Job{running("1", 1)}, 3,
			[]Holder{{"1", "batch", "RUNNING", 1, 900}, {"2", "debug", "RUNNING", 1, 900}}, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := CrossCheck(tc.jobs, tc.allocated, tc.holders, []string{"batch", "harvest"}, listedAt)
			if tc.ok && err != nil {
				t.Errorf("err = %v", err)
			}
			if !tc.ok && !errors.Is(err, cluster.ErrInvalidSnapshot) {
				t.Errorf("err = %v, want ErrInvalidSnapshot", err)
			}
		})
	}
}
