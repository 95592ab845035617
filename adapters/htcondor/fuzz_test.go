package htcondor

import (
	"errors"
	"testing"

	"github.com/harvest-hpc/harvest/adapters"
	"github.com/harvest-hpc/harvest/cluster"
)

func seed(f *testing.F, names ...string) {
	for _, n := range names {
		f.Add(fixture(f, n))
	}
	f.Add([]byte(""))
	f.Add([]byte("[]"))
	f.Add([]byte("[\n{\n  \"ClusterId\": 1,\n  \"ProcId\": 0,\n  \"JobSta"))
	f.Add([]byte("A = \"unterminated\nB = 1\n"))
}

// No input may panic; whatever parses must build a snapshot that validates
// or an error, never both nothing and no error.
func FuzzParseCondorQ(f *testing.F) {
	seed(f, "condor_q_mixed.json", "condor_q_mixed.long", "condor_q_clas12_8.8.10.json")
	slots := []SlotAd{{Name: "slot1@a", Machine: "a", State: "Unclaimed", Partitionable: true, CPUs: 8, TotalSlotCPUs: 8, MemoryMB: 1000, TotalSlotMemMB: 1000}}
	f.Fuzz(func(t *testing.T, data []byte) {
		for _, format := range []Format{FormatJSON, FormatLong} {
			jobs, err := ParseCondorQ(data, format, []string{"MaxRuntime"})
			if err != nil {
				if !errors.Is(err, ErrMalformed) {
					t.Fatalf("error %v does not wrap ErrMalformed", err)
				}
				continue
			}
			s, err := BuildSnapshot(slots, jobs, View{Tag: "harvest-pilot", Now: 1})
			if err != nil {
				// Duplicate job ids are the one contradiction ads can hold.
				if !errors.Is(err, cluster.ErrInvalidSnapshot) {
					t.Fatalf("BuildSnapshot: %v", err)
				}
				continue
			}
			if s.TotalNodes != 1 {
				t.Fatalf("snapshot lost its node: %+v", s)
			}
		}
	})
}

func FuzzParseCondorStatus(f *testing.F) {
	seed(f, "condor_status_pool.json", "condor_status_pool.long")
	f.Fuzz(func(t *testing.T, data []byte) {
		for _, format := range []Format{FormatJSON, FormatLong} {
			slots, err := ParseCondorStatus(data, format)
			if err != nil {
				if !errors.Is(err, ErrMalformed) {
					t.Fatalf("error %v does not wrap ErrMalformed", err)
				}
				continue
			}
			if len(slots) == 0 {
				t.Fatal("no slots and no error: an empty pool must be refused")
			}
			s, err := BuildSnapshot(slots, nil, View{Tag: "t", Now: 1})
			if err != nil {
				t.Fatalf("BuildSnapshot of parsed slots: %v", err)
			}
			if s.TotalNodes < 1 || s.IdleNodes+s.DrainedNodes > s.TotalNodes {
				t.Fatalf("node counts do not add up: %+v", s)
			}
		}
	})
}

func FuzzParseSubmit(f *testing.F) {
	f.Add(fixture(f, "condor_submit_terse.txt"))
	f.Add(fixture(f, "condor_submit_classic.txt"))
	f.Add([]byte("Submitting job(s).\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		id, err := ParseSubmit(data)
		if err == nil && !pilotIDRE.MatchString(id) {
			t.Fatalf("ParseSubmit gave %q, not a cluster.proc id", id)
		}
	})
}

// Whatever argv and environment the agent hands over, the description
// either refuses it as invalid or holds exactly one queue statement and
// no line the spec could have injected.
func FuzzSubmitDescription(f *testing.F) {
	f.Add("pilot", "--queue", "TOKEN", "a'b\"c $(x)")
	f.Add("a\nqueue 100", "", "X", "y")
	f.Fuzz(func(t *testing.T, a1, a2, k, v string) {
		spec := adapters.PilotSpec{TimeLimit: 600, Command: []string{"/opt/harvest", a1, a2}, Env: map[string]string{k: v}}
		d, err := SubmitDescription(DefaultConfig(), spec)
		if err != nil {
			if !errors.Is(err, adapters.ErrInvalidSpec) {
				t.Fatalf("error %v is not ErrInvalidSpec", err)
			}
			return
		}
		lines := 0
		for _, l := range splitLines(d) {
			if len(l) >= 5 && l[:5] == "queue" {
				lines++
			}
		}
		if lines != 1 {
			t.Fatalf("%d queue lines in\n%s", lines, d)
		}
	})
}

func splitLines(s string) []string {
	var out []string
	start := 0
	for i := 0; i < len(s); i++ {
		if s[i] == '\n' {
			out = append(out, s[start:i])
			start = i + 1
		}
	}
	return append(out, s[start:])
}
