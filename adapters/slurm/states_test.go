package slurm

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/harvest-hpc/harvest/cluster"
)

const (
	idle      = cluster.NodeIdle
	planned   = cluster.NodePlanned
	allocated = cluster.NodeAllocated
	drained   = cluster.NodeDrained
)

// Every state word and flag SLURM prints (node_state_string and
// node_state_string_compact in src/common/slurm_protocol_defs.c, 22.05 to
// 24.05, lower-cased by sinfo), and what it means for harvesting.
func TestNodeStateTable(t *testing.T) {
	tests := []struct {
		state string
		want  cluster.NodeState
		why   string
	}{
		{"idle", idle, "free: a pilot starts at once"},
		{"IDLE", idle, "case does not matter"},
		{"planned", planned, "idle, held by backfill for a pending job"},
		{"allocated", allocated, "running a job"},
		{"alloc", allocated, "sinfo %t's form"},
		{"mixed", allocated, "some CPUs allocated"},
		{"completing", allocated, "a job ending"},
		{"allocated+", allocated, "'+': a job completing on an allocated node"},
		{"mixed-", allocated, "'-': planned, on a partly allocated node"},

		{"idle~", drained, "'~': powered off; a job would wait for it to boot"},
		{"idle%", drained, "'%': powering down"},
		{"idle!", drained, "'!': to be powered down"},
		{"idle#", drained, "'#': powering up (being readied for a job)"},
		{"idle$", drained, "'$': in a maintenance reservation"},
		{"idle@", drained, "'@': reboot requested"},
		{"idle^", drained, "'^': reboot issued"},
		{"idle*", drained, "'*': not responding"},
		{"idle?", drained, "'?': a flag not named"},
		{"planned~", drained, "a flag on a planned node too"},

		{"allocated~", allocated, "its job waits for the boot; the node is taken"},
		{"allocated#", allocated, "powering up for its job"},
		{"allocated!", allocated, "power-down after its job"},
		{"allocated%", allocated, "powering down after its job"},
		{"allocated$", allocated, "maintenance after its job"},
		{"mixed@", allocated, "reboot after its jobs"},
		{"mixed^", allocated, "reboot issued after its jobs"},
		{"completing~", allocated, "a job ending"},
		{"allocated*", drained, "not responding: its jobs may be lost"},
		{"mixed*", drained, "not responding"},

		{"drained", drained, "drained"},
		{"drain", drained, "sinfo %t's form"},
		{"draining", drained, "running jobs, taking no new one"},
		{"drng", drained, "sinfo %t's form"},
		{"drained~", drained, "drained and powered off"},
		{"draining!", drained, "draining, then power-down"},
		{"drained*", drained, "drained, not responding"},
		{"down", drained, "down"},
		{"down$", drained, "down, maintenance"},
		{"down*", drained, "down, not responding"},
		{"down~", drained, "down, powered off"},
		{"fail", drained, "failed"},
		{"failing", drained, "failing: running jobs, taking no new one"},
		{"failg", drained, "sinfo %t's form"},
		{"maint", drained, "maintenance reservation"},
		{"maint*", drained, "maintenance, not responding"},
		{"reboot", drained, "reboot requested on an idle node"},
		{"reboot^", drained, "reboot issued"},
		{"boot^", drained, "sinfo %t's form"},
		{"reboot_issued", drained, "flag-only state"},
		{"cancel_reboot", drained, "flag-only state"},
		{"reserved", drained, "in an advance reservation"},
		{"resv", drained, "sinfo %t's form"},
		{"perfctrs", drained, "network performance counters in use (Cray)"},
		{"npc", drained, "sinfo %t's form"},
		{"future", drained, "configured, not there yet"},
		{"future~", drained, "future, powered off"},
		{"cloud", drained, "a cloud node not provisioned"},
		{"power_down", drained, "flag-only state"},
		{"power_up", drained, "flag-only state"},
		{"powering_down", drained, "flag-only state"},
		{"powered_down", drained, "flag-only state"},
		{"powering_up", drained, "flag-only state"},
		{"pow_dn", drained, "sinfo %t's form"},
		{"powered_dn", drained, "sinfo %t's form"},
		{"resume", drained, "a resume request in flight"},
		{"inval", drained, "registered with an invalid configuration"},
		{"blocked", drained, "23.11+"},
		{"unknown", drained, "not registered yet"},
		{"unknown*", drained, "not registered, not responding"},
		{"?", drained, "node_state_string's answer for a state it cannot name"},
		{"some_future_state", drained, "a word this adapter does not know is never idle"},
		{"some_future_state~", drained, "with a flag"},

		{"IDLE+CLOUD+POWERED_DOWN", drained, "'+'-joined: a powered-down cloud node"},
		{"IDLE+POWERING_UP", drained, "'+'-joined: booting"},
		{"IDLE+DRAIN", drained, "'+'-joined: drained"},
		{"IDLE+PLANNED", planned, "'+'-joined: planned"},
		{"IDLE+DYNAMIC_NORM", idle, "'+'-joined: a dynamic node in normal use"},
		{"IDLE+RESERVED", drained, "'+'-joined: reserved"},
		{"IDLE+SOME_NEW_FLAG", drained, "'+'-joined: an unknown flag makes an idle node not idle"},
		{"MIXED+COMPLETING", allocated, "'+'-joined: allocated"},
		{"ALLOCATED+POWER_DOWN", allocated, "'+'-joined: its job runs on"},
		{"MIXED+DRAIN", drained, "'+'-joined: draining"},
		{"ALLOCATED+NOT_RESPONDING", drained, "'+'-joined: not responding"},
		{"DOWN+NOT_RESPONDING", drained, "'+'-joined: down"},
		{"NEWBASE+DRAIN", drained, "'+'-joined: unknown base"},
	}
	for _, tc := range tests {
		t.Run(tc.state, func(t *testing.T) {
			got, err := nodeState(tc.state)
			if err != nil || got != tc.want {
				t.Errorf("nodeState(%q) = %q, %v; want %q (%s)", tc.state, got, err, tc.want, tc.why)
			}
		})
	}
}

func TestNodeStateRefusesWhatIsNoState(t *testing.T) {
	for _, s := range []string{"", "12", "idle 1", "idle|x", "~", "*", "idle\t", strings.Repeat("x", 101)} {
		if got, err := nodeState(s); !errors.Is(err, ErrParse) {
			t.Errorf("nodeState(%q) = %q, %v; want ErrParse", s, got, err)
		}
	}
}

// Every flag character has a meaning documented in the table.
func TestEveryFlagIsDocumented(t *testing.T) {
	for _, c := range "*~#!%$@^-+?" {
		if suffixFlags[byte(c)].meaning == "" {
			t.Errorf("flag %q has no meaning", c)
		}
	}
}

// States captured from the minicluster (testdata/capture_states.sh):
// power saving, reboot, maintenance, reservation, drain, down and fail,
// on idle and on allocated nodes.
func TestParseSinfoCapturedStates(t *testing.T) {
	tests := []struct {
		file string
		want NodeCounts
	}{
		// idle% idle% drained down fail reboot^ maint reserved
		{"sinfo_states_1.txt", NodeCounts{Total: 8, Drained: 8}},
		// idle~ idle~ drained down fail reboot^ maint reserved
		{"sinfo_states_2.txt", NodeCounts{Total: 8, Drained: 8}},
		// idle~ idle~ idle* idle* idle reboot^ maint reserved
		{"sinfo_states_3.txt", NodeCounts{Total: 8, Idle: 1, Drained: 7}},
		// idle# drained~ allocated! draining failing reboot^ down$ reserved
		{"sinfo_states_4.txt", NodeCounts{Total: 8, Allocated: 1, Drained: 7}},
	}
	for _, tc := range tests {
		t.Run(tc.file, func(t *testing.T) {
			nodes, c, err := ParseSinfo(fixture(t, tc.file))
			if err != nil {
				t.Fatal(err)
			}
			if c != tc.want || len(nodes) != tc.want.Total {
				t.Errorf("counts %+v, want %+v; nodes %+v", c, tc.want, nodes)
			}
		})
	}
}

// A node SLURM cannot name, or names with '+'-joined flags, costs that
// node only: the rest of the cluster still counts.
func TestAnUnknownNodeDoesNotFailTheSnapshot(t *testing.T) {
	out := "n1|idle|8\nn2|?|8\nn3|IDLE+CLOUD+POWERED_DOWN|8\nn4|allocated|8\nn5|idle+drain|8\n"
	nodes, c, err := ParseSinfo([]byte(out))
	if err != nil {
		t.Fatal(err)
	}
	if want := (NodeCounts{Total: 5, Idle: 1, Allocated: 1, Drained: 3}); c != want {
		t.Errorf("counts %+v, want %+v (%+v)", c, want, nodes)
	}
}

// Captured as alice on the minicluster: scontrol hides a Hidden=YES
// partition from a user without -a, and sinfo refuses -a beside -p (which
// shows hidden partitions anyway).
func TestHiddenPartitionFixtures(t *testing.T) {
	user, err := ParsePartitions(fixture(t, "scontrol_partitions_user.txt"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := PickPartition(user, "hidden"); err == nil {
		t.Error("without -a the hidden partition is listed: the fixture proves nothing")
	}
	all, err := ParsePartitions(fixture(t, "scontrol_partitions_user_all.txt"))
	if err != nil {
		t.Fatal(err)
	}
	p, err := PickPartition(all, "hidden")
	if err != nil || !p.Hidden || p.MaxTime != 3600 {
		t.Errorf("with -a: %+v, %v", p, err)
	}
	if _, c, err := ParseSinfo(fixture(t, "sinfo_hidden_user.txt")); err != nil || c.Idle != 8 {
		t.Errorf("sinfo -p hidden as a user: %+v, %v", c, err)
	}
	if !strings.Contains(string(fixture(t, "sinfo_hidden_a_p.stderr")), "Conflicting options, -a and -p") {
		t.Error("sinfo accepts -a with -p after all")
	}
	// The adapter asks scontrol with -a, and sinfo with -p but never -a.
	f := backfillCluster(t)
	a := newTestAdapter(t, f, nil)
	if _, err := a.Snapshot(t.Context()); err != nil {
		t.Fatal(err)
	}
	for _, c := range f.calls {
		switch {
		case c.name == "scontrol" && slices.Contains(c.args, "partition") && !slices.Contains(c.args, "-a"):
			t.Errorf("scontrol without -a: %v", c.args)
		case c.name == "sinfo" && slices.Contains(c.args, "-p") && slices.Contains(c.args, "-a"):
			t.Errorf("sinfo with -a and -p: %v", c.args)
		}
	}
}

// The captured job on allocated!, draining and failing nodes accounts for
// the one node counted allocated.
func TestCapturedStatesCrossCheck(t *testing.T) {
	jobs, err := ParseSqueue(fixture(t, "squeue_states_4.txt"), 1795401480, nil)
	if err != nil {
		t.Fatal(err)
	}
	_, c, err := ParseSinfo(fixture(t, "sinfo_states_4.txt"))
	if err != nil {
		t.Fatal(err)
	}
	if c.Allocated > heldNodes(jobs) {
		t.Errorf("%d allocated nodes, jobs hold %d", c.Allocated, heldNodes(jobs))
	}
}
