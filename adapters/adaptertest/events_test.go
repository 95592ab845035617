package adaptertest_test

import (
	"context"
	"errors"
	"testing"

	"github.com/harvest-hpc/harvest/adapters"
	"github.com/harvest-hpc/harvest/adapters/adaptertest"
)

type counter struct {
	*adaptertest.Memory
	n int64
}

func (c *counter) JobEvents(context.Context) (int64, error) { return c.n, nil }

// TestJobEventsCrossThePluginBoundary: the count of an adapter that keeps
// one comes through; one that does not answers ErrNotImplemented, which
// turns the agent's check off.
func TestJobEventsCrossThePluginBoundary(t *testing.T) {
	ctx := context.Background()
	c := &counter{Memory: adaptertest.NewMemory(2), n: 41}
	jc, ok := adaptertest.OverPlugin(t, c).(adapters.JobEventCounter)
	if !ok {
		t.Fatal("the plugin client is no JobEventCounter")
	}
	if n, err := jc.JobEvents(ctx); err != nil || n != 41 {
		t.Fatalf("JobEvents = %d, %v; want 41", n, err)
	}
	c.n = 42
	if n, err := jc.JobEvents(ctx); err != nil || n != 42 {
		t.Fatalf("JobEvents = %d, %v; want 42", n, err)
	}
	plain := adaptertest.OverPlugin(t, adaptertest.NewMemory(2)).(adapters.JobEventCounter)
	if _, err := plain.JobEvents(ctx); !errors.Is(err, adapters.ErrNotImplemented) {
		t.Fatalf("an adapter without JobEvents: %v, want ErrNotImplemented", err)
	}
}
