package pilot

import (
	"context"
	"errors"
	"testing"
	"time"
)

// The pilot's stop moves earlier when its end is pulled in, never later.
func TestTheStopTimerOnlyMovesEarlier(t *testing.T) {
	ctx, cancel := context.WithCancelCause(context.Background())
	s := &stopTimer{cancel: cancel}
	defer s.close()
	s.at(time.Now().Add(time.Hour))
	s.at(time.Now().Add(2 * time.Hour)) // later: ignored
	select {
	case <-ctx.Done():
		t.Fatal("stopped before any deadline")
	default:
	}
	s.at(time.Now().Add(20 * time.Millisecond))
	select {
	case <-ctx.Done():
		if !errors.Is(context.Cause(ctx), errDeadline) {
			t.Fatalf("cause %v, want errDeadline", context.Cause(ctx))
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the pulled-in deadline did not stop the pilot")
	}
}
