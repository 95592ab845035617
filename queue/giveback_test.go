package queue_test

import (
	"testing"

	"github.com/harvest-hpc/harvest/pilotproto"
	"github.com/harvest-hpc/harvest/queue/api"
	"github.com/harvest-hpc/harvest/queue/queuetest"
)

// The agent pulls a pilot's end in; the master hears of it in its
// heartbeat answers until it reports the new end itself, over HTTP too.
func TestAPulledInEndReachesTheMasterUntilItReportsIt(t *testing.T) {
	e := queuetest.New(t)
	ctx := t.Context()
	l, err := e.Q.Lease(ctx, pilotproto.LeaseRequest{PilotID: "p1", Address: "http://a1"})
	if err != nil || !l.Granted {
		t.Fatalf("lease %+v, %v", l, err)
	}
	pilots := func(d1, d2 int64) []pilotproto.PilotStatus {
		return []pilotproto.PilotStatus{{PilotID: "p1", Deadline: d1}, {PilotID: "p2", Deadline: d2}}
	}
	beat := func(ps []pilotproto.PilotStatus) map[string]int64 {
		t.Helper()
		resp, err := e.Client("pilot").Heartbeat(ctx, pilotproto.HeartbeatRequest{Epoch: l.Epoch, Pilots: ps})
		if err != nil {
			t.Fatal(err)
		}
		return resp.Deadlines
	}
	if d := beat(pilots(5000, 5000)); d != nil {
		t.Fatalf("deadlines %v before any was pulled in", d)
	}
	if err := e.Q.PullInPilot("p2", 3000); err != nil {
		t.Fatal(err)
	}
	if err := e.Q.PullInPilot("p2", 4000); err != nil { // later: ignored
		t.Fatal(err)
	}
	if d := beat(pilots(5000, 5000)); len(d) != 1 || d["p2"] != 3000 {
		t.Fatalf("deadlines %v, want p2 -> 3000", d)
	}
	if d := beat(pilots(5000, 5000)); d["p2"] != 3000 {
		t.Fatalf("deadlines %v: repeated until the master reports it", d)
	}
	if d := beat(pilots(5000, 3000)); d != nil {
		t.Fatalf("deadlines %v after the master reported p2's new end", d)
	}
	if err := e.Q.PullInPilot("", 3000); err == nil {
		t.Error("a pilot without an id was accepted")
	}
}

// Interrupted attempts (a pilot preempted, cancelled or at its limit) are
// lost task time: the queue sums their run time, once per attempt.
func TestInterruptedAttemptsCountAsLostTaskTime(t *testing.T) {
	e := queuetest.New(t)
	ctx := t.Context()
	_, tasks, _ := e.Handed(t, 3, 3, api.JobSpec{})
	res := func(i int, status string, ms int64) pilotproto.Result {
		return pilotproto.Result{TaskID: tasks[i].ID, Attempt: 1, Status: status, DurationMS: ms}
	}
	req := pilotproto.ResultsRequest{Epoch: 1, Results: []pilotproto.Result{
		res(0, pilotproto.StatusInterrupted, 1500), res(1, pilotproto.StatusInterrupted, 2500), res(2, pilotproto.StatusDone, 9000)}}
	for range 2 { // the second report is all duplicates
		if _, err := e.Q.ReportResults(ctx, req); err != nil {
			t.Fatal(err)
		}
	}
	st, err := e.Q.Stats(ctx)
	if err != nil || st.LostTaskSeconds != 4 {
		t.Fatalf("lost %v s, %v; want 4 s (1.5 + 2.5, the done task and the duplicates not counted)", st.LostTaskSeconds, err)
	}
	// The attempts a master requeued itself come with its heartbeat.
	if _, err := e.Q.Heartbeat(ctx, pilotproto.HeartbeatRequest{Epoch: 1, LostMS: 2500}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.Q.Heartbeat(ctx, pilotproto.HeartbeatRequest{Epoch: 1, LostMS: -1}); err == nil {
		t.Error("a negative lost time was accepted")
	}
	if st, _ := e.Q.Stats(ctx); st.LostTaskSeconds != 6.5 {
		t.Fatalf("lost %v s after the heartbeat, want 6.5", st.LostTaskSeconds)
	}
}
