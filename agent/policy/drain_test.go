package policy

import (
	"reflect"
	"strings"
	"testing"

	"github.com/harvest-hpc/harvest/cluster"
)

func TestTheAdminsSwitches(t *testing.T) {
	const now = 1_700_000_000
	// Two foreign jobs, a queued pilot, an idle one, a busy one and the
	// master's; job 3 waits for 4 nodes, 2 are idle.
	withPilots := snap(10, 2, running("1", 4, 60*minute, 0), pending("3", 4, 30*minute),
		queuedPilot("p4", unlimited), pilot("p5", unlimited, 0), pilot("p6", unlimited, 0, busy), pilot("p7", unlimited, 0, master))
	tests := []struct {
		name        string
		in          Input
		wantCase    Case
		wantSubmit  *Submit
		wantRelease []string
		wantReason  string
	}{
		{
			name:        "A drain releases queued and idle pilots, the master's last, and leaves the busy one to finish its batch",
			in:          Input{Snapshot: withPilots, Drain: &Drain{}},
			wantCase:    CaseDrain,
			wantRelease: []string{"p4", "p5", "p7"},
			wantReason:  "draining: releasing 3 pilots; 1 busy pilot goes after its batch",
		},
		{
			name:        "A drain --now releases the busy pilot too, last",
			in:          Input{Snapshot: withPilots, Drain: &Drain{Now: true}},
			wantCase:    CaseDrain,
			wantRelease: []string{"p4", "p5", "p7", "p6"},
			wantReason:  "draining now: releasing 4 pilots",
		},
		{
			name:       "A drain with only a busy pilot left waits for its batch and submits nothing on idle nodes",
			in:         Input{Snapshot: snap(4, 3, pilot("p1", unlimited, 0, busy)), Drain: &Drain{}},
			wantCase:   CaseDrain,
			wantReason: "draining: nothing to release this round; 1 busy pilot goes after its batch",
		},
		{
			name: "A drain says pilots submitted earlier go when they show up",
			in: Input{Snapshot: snap(4, 4), Drain: &Drain{},
				Upcoming: []Upcoming{{Count: 2, TimeLimit: cluster.Unlimited, SubmittedAt: now - 10}}},
			wantCase:   CaseDrain,
			wantReason: "draining: nothing to release this round; 2 pilots submitted earlier go when the batch system shows them",
		},
		{
			name:       "A finished drain has no pilot left",
			in:         Input{Snapshot: snap(4, 4), Drain: &Drain{}},
			wantCase:   CaseDrain,
			wantReason: "draining: no pilot left",
		},
		{
			name:       "A pause takes away the pilots an idle cluster would get",
			in:         Input{Snapshot: snap(4, 4), Paused: true},
			wantCase:   CasePaused,
			wantReason: "paused by the admin; would have: no foreign job is pending: submitting 4 pilots",
		},
		{
			name:        "A paused agent still releases pilots for the top job",
			in:          Input{Snapshot: withPilots, Paused: true},
			wantCase:    CaseReleaseForTopJob,
			wantRelease: []string{"p4", "p5", "p7"},
		},
		{
			name:       "Without the switches the same cluster is filled",
			in:         Input{Snapshot: snap(4, 4)},
			wantCase:   CaseNoPendingJob,
			wantSubmit: submit(4, unlimited),
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			d := Decide(tc.in, DefaultConfig())
			if d.Case != tc.wantCase {
				t.Fatalf("case %q, want %q (%s)", d.Case, tc.wantCase, d.Reason)
			}
			if !reflect.DeepEqual(d.Submit, tc.wantSubmit) {
				t.Errorf("submit %+v, want %+v", d.Submit, tc.wantSubmit)
			}
			want := tc.wantRelease
			if want == nil {
				want = []string{}
			}
			if !reflect.DeepEqual(d.Release, want) {
				t.Errorf("release %v, want %v", d.Release, want)
			}
			if !strings.Contains(d.Reason, tc.wantReason) {
				t.Errorf("reason %q, want it to contain %q", d.Reason, tc.wantReason)
			}
		})
	}
}
