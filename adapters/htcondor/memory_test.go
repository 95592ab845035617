package htcondor

import (
	"bytes"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/harvest-hpc/harvest/adapters/adaptertest"
)

// jobAdsJSON is condor_q -json output of n jobs (half running), about
// 330 bytes an ad, as the real schedd prints them.
func jobAdsJSON(n int) []byte {
	var q bytes.Buffer
	q.WriteString("[\n")
	for i := 0; i < n; i++ {
		if i > 0 {
			q.WriteString(",\n")
		}
		status, extra := 1, ""
		if i%2 == 0 {
			status = 2
			extra = fmt.Sprintf(`, "JobCurrentStartDate": 1699990000, "RemoteHost": "slot1_1@node%05d"`, i%1000)
		}
		fmt.Fprintf(&q, `{"ClusterId": %d, "ProcId": 0, "Owner": "u%d", "JobStatus": %d, "JobUniverse": 5, "RequestCpus": 2, "RequestMemory": 4000, "JobPrio": %d, "QDate": %d, "ServerTime": 1700000000, "PeriodicRemove": false%s}`,
			1000+i, i%50, status, i%3, 1699900000+i, extra)
	}
	q.WriteString("\n]\n")
	return q.Bytes()
}

// slotAdsJSON is condor_status -json output of n partitionable slots.
func slotAdsJSON(n int) []byte {
	var st bytes.Buffer
	st.WriteString("[\n")
	for i := 0; i < n; i++ {
		if i > 0 {
			st.WriteString(",\n")
		}
		fmt.Fprintf(&st, `{"Name": "slot1@node%05d", "Machine": "node%05d", "SlotType": "Partitionable", "PartitionableSlot": true, "State": "Unclaimed", "Activity": "Idle", "Cpus": 32, "TotalSlotCpus": 32, "Memory": 128000, "TotalSlotMemory": 128000}`, i, i)
	}
	st.WriteString("\n]\n")
	return st.Bytes()
}

// The answers the class of hole needs: each just under the 64 MiB
// output cap (260,000 job ads of about 250 bytes, or 280,000 slot ads of
// about 230).
const (
	memCapJobs  = 260_000
	memCapSlots = 280_000
)

// BenchmarkAgentPeakRSS prints the peak resident memory of the agent
// process and of its adapter plugin process, on the user's path: `harvest
// agent` (built from this tree, its queue hosted) starts `harvest adapter
// serve htcondor` as a hashicorp/go-plugin subprocess, whose fake condor_q
// and condor_status print answers at the output cap; the snapshot (or the
// refusal) crosses gRPC into the agent, which decides on it. Both
// processes are measured while they run (VmHWM), apart from this one.
// Target: the agent under 300 MB.
//
//	go test -run '^$' -bench BenchmarkAgentPeakRSS -benchtime 1x ./adapters/htcondor
func BenchmarkAgentPeakRSS(b *testing.B) {
	ab := adaptertest.NewAgentBench(b)
	write := func(name string, data []byte) { ab.Write(b, name, data) }
	write("q-small.json", jobAdsJSON(1000))
	write("status-small.json", slotAdsJSON(1000))
	write("q-cap.json", jobAdsJSON(memCapJobs))
	write("status-cap.json", slotAdsJSON(memCapSlots))
	write("status-limit.json", slotAdsJSON(DefaultConfig().MaxSlots))
	write("garbage.json", append([]byte("["), bytes.Repeat([]byte(`{"a": [[[[[[[[`), 4<<20)...))
	write("q-none.json", nil) // no job waits: the idle slots are free to take
	snapshots := func(m string) bool {
		return adaptertest.MetricSum(m, "harvest_snapshot_duration_seconds_count") >= 2
	}
	// A 60 MiB answer takes the plugin tens of seconds to read on a
	// loaded machine: the timeouts must not cut the snapshot short.
	const timeouts = "5m"
	for _, c := range []struct {
		name, q, status string
		args            []string
		until           func(string) bool
	}{
		// condor_q: an answer at the cap, taken; condor_status: one at the
		// cap, refused past max_slots; limits: the largest snapshot the
		// defaults take (the condor_q answer at the cap, max_slots slots);
		// garbage: 60 MiB of nested arrays that are no ClassAds.
		{"condor_q", "q-cap.json", "status-small.json", []string{"--dry-run"}, snapshots},
		{"condor_status", "q-small.json", "status-cap.json", []string{"--dry-run"}, snapshots},
		{"limits", "q-cap.json", "status-limit.json", []string{"--dry-run"}, snapshots},
		{"garbage", "garbage.json", "status-small.json", []string{"--dry-run"}, snapshots},
		// condor_submit: a 50 MB answer to a pilot's submission.
		{"condor_submit", "q-none.json", "status-small.json", []string{"--harvest-while-idle"}, func(m string) bool {
			return adaptertest.MetricSum(m, "harvest_submit_failures_total") >= 1
		}},
	} {
		b.Run(c.name, func(b *testing.B) {
			for b.Loop() {
				ab.Measure(b, c.name, map[string]string{
					"condor_q":       `exec cat ` + filepath.Join(ab.Dir, c.q),
					"condor_status":  `exec cat ` + filepath.Join(ab.Dir, c.status),
					"condor_version": `echo '$CondorVersion: 25.14.0 2025-11-20 BuildID: 0 $'; echo '$CondorPlatform: x86_64_Debian12 $'`,
					"condor_submit":  fmt.Sprintf(`cat >/dev/null; head -c %d /dev/zero | tr '\0' '7'; echo`, 50<<20),
					"condor_rm":      `exit 0`,
				}, append([]string{"--adapter", "htcondor", "--adapter-opt", "timeout=" + timeouts, "--snapshot-timeout", timeouts}, c.args...),
					c.until, 10*time.Minute)
			}
		})
	}
}
