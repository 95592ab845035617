package htcondor

import (
	"bytes"
	"fmt"
	"testing"
)

// A 10,000-job queue on a 1,000-machine pool, in -json form: the cost of
// one snapshot's parsing and mapping, without the commands themselves.
func BenchmarkSnapshot10kJobs1kMachines(b *testing.B) {
	var q, st bytes.Buffer
	q.WriteString("[\n")
	for i := 0; i < 10000; i++ {
		if i > 0 {
			q.WriteString(",\n")
		}
		status, extra := 1, ""
		if i%2 == 0 {
			status = 2
			extra = fmt.Sprintf(`, "JobCurrentStartDate": 1699990000, "RemoteHost": "slot1_1@node%04d"`, i%1000)
		}
		fmt.Fprintf(&q, `{"ClusterId": %d, "ProcId": 0, "Owner": "u%d", "JobStatus": %d, "JobUniverse": 5, "RequestCpus": 2, "RequestMemory": 4000, "JobPrio": %d, "QDate": %d, "ServerTime": 1700000000, "PeriodicRemove": false%s}`,
			1000+i, i%50, status, i%3, 1699900000+i, extra)
	}
	q.WriteString("\n]\n")
	st.WriteString("[\n")
	for i := 0; i < 1000; i++ {
		if i > 0 {
			st.WriteString(",\n")
		}
		fmt.Fprintf(&st, `{"Name": "slot1@node%04d", "Machine": "node%04d", "SlotType": "Partitionable", "PartitionableSlot": true, "State": "Unclaimed", "Activity": "Idle", "Cpus": 32, "TotalSlotCpus": 32, "Memory": 128000, "TotalSlotMemory": 128000}`, i, i)
	}
	st.WriteString("\n]\n")
	b.SetBytes(int64(q.Len() + st.Len()))
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		slots, err := ParseCondorStatus(st.Bytes(), FormatJSON)
		if err != nil {
			b.Fatal(err)
		}
		jobs, err := ParseCondorQ(q.Bytes(), FormatJSON, nil)
		if err != nil {
			b.Fatal(err)
		}
		s, err := BuildSnapshot(slots, jobs, View{Tag: "harvest-pilot", Now: 1})
		if err != nil || len(s.Jobs) != 10000 {
			b.Fatalf("%v, %d jobs", err, len(s.Jobs))
		}
	}
}
