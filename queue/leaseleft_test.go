package queue_test

import (
	"context"
	"testing"
	"time"

	"github.com/harvest-hpc/harvest/pilotproto"
	"github.com/harvest-hpc/harvest/queue/queuetest"
)

// TestTheLeaseSaysHowLongItStillRuns: a pilot waiting for a dead master's
// lease learns, to the millisecond and as a duration, when to ask again
// (left_ms); ExpiresAt is whole seconds of the queue's clock.
func TestTheLeaseSaysHowLongItStillRuns(t *testing.T) {
	e := queuetest.New(t)
	ctx := context.Background()
	ttl := e.Cfg.LeaseTTL
	l, err := e.Q.Lease(ctx, pilotproto.LeaseRequest{PilotID: "p1", Address: "http://p1"})
	if err != nil || !l.Granted {
		t.Fatalf("lease: %+v %v", l, err)
	}
	if l.LeftMS != ttl.Milliseconds() {
		t.Errorf("granted: left %d ms, want the TTL, %d ms", l.LeftMS, ttl.Milliseconds())
	}
	e.Clock.Advance(ttl - 1300*time.Millisecond)
	l, err = e.Q.Lease(ctx, pilotproto.LeaseRequest{PilotID: "p2", Address: "http://p2"})
	if err != nil || l.Granted || l.Holder != "p1" {
		t.Fatalf("another pilot's request: %+v %v", l, err)
	}
	if l.LeftMS != 1300 {
		t.Errorf("refused: left %d ms, want 1300", l.LeftMS)
	}
	e.Clock.Advance(1300 * time.Millisecond)
	l, err = e.Q.Lease(ctx, pilotproto.LeaseRequest{PilotID: "p2", Address: "http://p2"})
	if err != nil || !l.Granted || l.Epoch != 2 {
		t.Fatalf("once it ran out, p2 should get it: %+v %v", l, err)
	}
}
