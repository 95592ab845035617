package queue_test

import (
	"testing"

	"github.com/harvest-hpc/harvest/pilotproto"
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
