package htcondor

import (
	"strings"
	"testing"
)

// A slot ad with a CPU or memory figure no machine has (a startd
// advertising garbage) is refused with the slot named, like one whose
// resources do not add up: two such slots of one machine summed past
// int64 and the machine had a negative CPU count.
func TestASlotWithAnImpossibleFigureIsRefused(t *testing.T) {
	slot := func(name, cpus, mem string) string {
		return `{"Name": "` + name + `@m", "Machine": "m", "State": "Unclaimed", "Cpus": ` + cpus + `, "TotalSlotCpus": ` + cpus + `, "Memory": ` + mem + `, "TotalSlotMemory": ` + mem + `}`
	}
	for _, tc := range []struct{ name, ads string }{
		{"CPUs past int64 when summed", "[" + slot("slot1", "5000000000000000000", "1000") + ",\n" + slot("slot2", "5000000000000000000", "1000") + "]\n"},
		{"a million and one CPUs", "[" + slot("slot1", "1048577", "1000") + "]\n"},
		{"memory past int64 when summed", "[" + slot("slot1", "8", "5000000000000000000") + ",\n" + slot("slot2", "8", "5000000000000000000") + "]\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			slots, err := ParseCondorStatus([]byte(tc.ads), FormatJSON)
			if err == nil {
				s, _ := BuildSnapshot(slots, nil, View{Tag: "t", Now: 1})
				t.Fatalf("parsed: nodes %+v", s.Nodes)
			}
			if !strings.Contains(err.Error(), "slot1@m") {
				t.Errorf("the error does not name the slot: %v", err)
			}
		})
	}
	// The bound itself is a slot (a 2^20-CPU machine does not exist, but
	// nothing is gained by refusing it).
	if _, err := ParseCondorStatus([]byte("["+slot("slot1", "1048576", "1099511627776")+"]\n"), FormatJSON); err != nil {
		t.Errorf("a slot at the bounds: %v", err)
	}
}
