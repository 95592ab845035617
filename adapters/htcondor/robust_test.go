package htcondor

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/harvest-hpc/harvest/adapters"
	"github.com/harvest-hpc/harvest/cluster"
)

// Jobs that never run on the pool's machines are no demand for them:
// grid universe jobs run at a remote site, scheduler and local universe
// ones on the submit machine.
func TestJobsOfOtherUniversesAreNoDemand(t *testing.T) {
	slots := []SlotAd{{Name: "slot1@m", Machine: "m", State: "Unclaimed", CPUs: 8, TotalSlotCPUs: 8, MemoryMB: 16000, TotalSlotMemMB: 16000}}
	idle := func(id int64, universe int) JobAd {
		return JobAd{Cluster: id, Owner: "alice", Status: statusIdle, Universe: universe, RequestCPUs: 1, Limit: cluster.Unlimited}
	}
	jobs := []JobAd{
		idle(1, 5),                 // vanilla: demand
		idle(2, universeGrid),      // grid: runs elsewhere
		idle(3, universeScheduler), // DAGMan
		idle(4, universeLocal),
		{Cluster: 5, Owner: "bob", Status: statusRunning, Universe: universeGrid, CurrentStart: 10, ServerTime: 20, RemoteHost: "ce.example.org"},
		idle(6, 13), // vm universe: runs on a machine
	}
	s, err := BuildSnapshot(slots, jobs, View{Tag: "t", Now: 20})
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, j := range s.Jobs {
		ids = append(ids, j.ID)
	}
	if strings.Join(ids, " ") != "1.0 6.0" || s.IdleNodes != 1 {
		t.Errorf("jobs %v, idle nodes %d; want 1.0 6.0 and the machine idle", ids, s.IdleNodes)
	}
}

// A slot whose ad comes twice (two collectors, an ad re-sent) is counted
// once: its machine has 8 CPUs, not 16.
func TestADuplicateSlotAdCountsOnce(t *testing.T) {
	ad := `{"Name": "slot1@m", "Machine": "m", "State": "Unclaimed", "SlotType": "Partitionable", "PartitionableSlot": true, "Cpus": 8, "TotalSlotCpus": 8, "Memory": 16000, "TotalSlotMemory": 16000}`
	other := `{"Name": "slot1@n", "Machine": "n", "State": "Claimed", "Cpus": 4, "TotalSlotCpus": 4, "Memory": 8000, "TotalSlotMemory": 8000}`
	slots, err := ParseCondorStatus([]byte("["+ad+",\n"+other+",\n"+ad+"]\n"), FormatJSON)
	if err != nil {
		t.Fatal(err)
	}
	s, err := BuildSnapshot(slots, nil, View{Tag: "t", Now: 1})
	if err != nil {
		t.Fatal(err)
	}
	if s.TotalNodes != 2 || s.IdleNodes != 1 || s.Nodes[0].CPUs != 8 {
		t.Errorf("nodes %+v", s.Nodes)
	}
}

// condor_q and condor_status end every -long ad with a blank line: an
// answer cut at a line boundary (its last ad's missing attributes would
// read as 0) is refused, not parsed.
func TestALongAnswerCutAtALineBoundaryIsRefused(t *testing.T) {
	for _, name := range []string{"condor_q_mixed.long", "condor_status_pool.long"} {
		full, err := os.ReadFile(filepath.Join("testdata", name))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := parseLongAds(full); err != nil {
			t.Fatalf("%s whole: %v", name, err)
		}
		body := strings.TrimRight(string(full), "\n")
		cuts := map[string]string{
			"without the final blank line":        body + "\n",
			"after the first line of its last ad": body[:strings.LastIndex(body, "\n\n")+2] + strings.SplitN(body[strings.LastIndex(body, "\n\n")+2:], "\n", 2)[0] + "\n",
			"in the middle of a line":             body[:len(body)-3],
		}
		for what, out := range cuts {
			if _, err := parseLongAds([]byte(out)); !errors.Is(err, ErrMalformed) {
				t.Errorf("%s cut %s: err = %v, want ErrMalformed", name, what, err)
			}
		}
	}
	if ads, err := parseLongAds(nil); err != nil || len(ads) != 0 {
		t.Errorf("an empty answer: %v, %v", ads, err)
	}
}

// AllowedExecuteDuration (HTCondor 9.x and later) holds a job after that
// much execution: it is a limit like AllowedJobDuration.
func TestAllowedExecuteDurationIsAJobLimit(t *testing.T) {
	out := `[{"ClusterId": 7, "ProcId": 0, "Owner": "alice", "JobStatus": 2, "JobUniverse": 5, "AllowedExecuteDuration": 3600, "JobCurrentStartDate": 100, "ServerTime": 200, "RemoteHost": "slot1@m"},
{"ClusterId": 8, "ProcId": 0, "Owner": "alice", "JobStatus": 2, "JobUniverse": 5, "AllowedExecuteDuration": 3600, "AllowedJobDuration": 1800, "JobCurrentStartDate": 100, "ServerTime": 200, "RemoteHost": "slot2@m"}]
`
	jobs, err := ParseCondorQ([]byte(out), FormatJSON, nil)
	if err != nil {
		t.Fatal(err)
	}
	if jobs[0].Limit != 3600 || jobs[1].Limit != 1800 {
		t.Errorf("limits %v and %v, want 3600 and the smaller 1800", jobs[0].Limit, jobs[1].Limit)
	}
	found := false
	for _, a := range jobAttributes {
		found = found || a == "AllowedExecuteDuration"
	}
	if !found {
		t.Error("condor_q is not asked for AllowedExecuteDuration")
	}
}

// The snapshot's now is the schedd's ServerTime (the clock job start times
// are on), as docs/htcondor.md says, even when the agent's clock is ahead;
// the agent's clock only when no ad carries one.
func TestNowIsTheSchedulersServerTime(t *testing.T) {
	slots := []SlotAd{{Name: "slot1@m", Machine: "m", State: "Claimed", CPUs: 8, TotalSlotCPUs: 8, MemoryMB: 16000, TotalSlotMemMB: 16000}}
	running := JobAd{Cluster: 1, Owner: "alice", Status: statusRunning, Universe: 5, CurrentStart: 1000, ServerTime: 1600, RemoteHost: "slot1@m", Limit: 3600}
	for _, agent := range []int64{1500, 2000} {
		s, err := BuildSnapshot(slots, []JobAd{running}, View{Tag: "t", Now: agent})
		if err != nil {
			t.Fatal(err)
		}
		if s.Now != 1600 || s.Jobs[0].RunTime != 600 {
			t.Errorf("agent clock %d: now %d, run time %d; want the schedd's 1600 and 600", agent, s.Now, s.Jobs[0].RunTime)
		}
	}
	s, err := BuildSnapshot(slots, nil, View{Tag: "t", Now: 1500})
	if err != nil || s.Now != 1500 {
		t.Errorf("an empty queue: now %d, %v; want the agent's clock", s.Now, err)
	}
}

// A failing command's output goes into the error as one short line, not
// as a page over many lines.
func TestCommandErrorsQuoteOneShortLine(t *testing.T) {
	p := newFakePool(t, threeMachines)
	p.mode("condor_rm", "verbose")
	p.mode("condor_q", "verbose")
	a := p.adapter(nil)
	err := a.Cancel(ctxT(t), "1.0")
	if err == nil {
		t.Fatal("no error")
	}
	msg := err.Error()
	if strings.Contains(msg, "\n") || len(msg) > 700 {
		t.Errorf("error of %d bytes over %d lines: %q", len(msg), strings.Count(msg, "\n")+1, msg)
	}
	if !strings.Contains(msg, "ERROR: fake failure after a page of output") {
		t.Errorf("HTCondor's own message is lost: %q", msg)
	}
}

// A condor_submit killed by a signal may have queued the pilot: the
// outcome is unknown, never a plain failure the agent would retry.
func TestASubmitKilledBySignalHasAnUnknownOutcome(t *testing.T) {
	p := newFakePool(t, threeMachines)
	p.mode("condor_submit", "killed")
	a := p.adapter(nil)
	_, err := a.Submit(ctxT(t), adapters.PilotSpec{TimeLimit: 900, Command: []string{"/opt/harvest", "pilot"}})
	if !errors.Is(err, adapters.ErrOutcomeUnknown) {
		t.Errorf("err = %v, want ErrOutcomeUnknown", err)
	}
}

// Issue 35 item 6 for HTCondor: an answer is read as it comes and
// bounded. A condor_q that never stops printing ads is refused once it
// passes max_jobs (the command killed, long before its timeout), and one
// that prints past max_output_mb is refused at the cap; neither is held
// whole in memory first.
func TestAnEndlessAnswerIsRefusedAtItsBoundWhileItIsRead(t *testing.T) {
	bin := t.TempDir()
	ad := `{"ClusterId": 1, "ProcId": 0, "Owner": "u", "JobStatus": 1, "JobUniverse": 5, "QDate": 1, "ServerTime": 2},`
	scripts := map[string]string{
		"condor_q":       "echo '['; while :; do echo '" + ad + "'; done",
		"condor_status":  `echo '[{"Name": "slot1@m", "Machine": "m", "State": "Unclaimed", "Activity": "Idle", "Cpus": 4, "Memory": 8000}]'`,
		"condor_version": `echo '$CondorVersion: 25.14.0 2025-11-20 BuildID: 0 $'`,
	}
	for name, body := range scripts {
		if err := os.WriteFile(filepath.Join(bin, name), []byte("#!/bin/sh\n"+body+"\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		name string
		mod  func(*Config)
		want string
	}{
		{"past max_jobs", func(c *Config) { c.MaxJobs = 1000 }, "max_jobs"},
		{"past max_output_mb", func(c *Config) { c.MaxJobs, c.MaxOutput = 100_000_000, 1<<20 }, "max_output_mb"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := DefaultConfig()
			c.BinDir, c.CommandTimeout = bin, 5*time.Minute
			tc.mod(&c)
			a, err := New(c)
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			_, err = a.Snapshot(ctx)
			if err == nil || !strings.Contains(err.Error(), tc.want) || ctx.Err() != nil {
				t.Fatalf("snapshot: %v, want a refusal naming %s before the deadline", err, tc.want)
			}
		})
	}
}
