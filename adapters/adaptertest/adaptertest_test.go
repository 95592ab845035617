package adaptertest_test

import (
	"context"
	"errors"
	"testing"

	"github.com/harvest-hpc/harvest/adapters"
	"github.com/harvest-hpc/harvest/adapters/adaptertest"
	"github.com/harvest-hpc/harvest/cluster"
)

func memoryHarness(wrap func(testing.TB, adapters.Adapter) adapters.Adapter) adaptertest.Harness {
	return adaptertest.Harness{
		New: func(t *testing.T) adapters.Adapter {
			m := adaptertest.NewMemory(4)
			m.AddJob(cluster.Job{ID: "7", User: "alice", State: cluster.Running, Nodes: 2, TimeLimit: 600, RunTime: 60})
			return wrap(t, m)
		},
		Settle: func(*testing.T) {},
		Unreachable: func(t *testing.T) adapters.Adapter {
			m := adaptertest.NewMemory(4)
			m.Down = true
			return wrap(t, m)
		},
	}
}

func TestMemoryAdapterPassesTheSuiteInProcess(t *testing.T) {
	adaptertest.Run(t, memoryHarness(func(_ testing.TB, a adapters.Adapter) adapters.Adapter { return a }))
}

func TestMemoryAdapterPassesTheSuiteOverPlugin(t *testing.T) {
	adaptertest.Run(t, memoryHarness(adaptertest.OverPlugin))
}

// fake is a hand-written fake with closure fields.
type fake struct {
	info     func() (adapters.Info, error)
	snapshot func() (cluster.Snapshot, error)
	submit   func(adapters.PilotSpec) (adapters.PilotID, error)
	cancel   func(adapters.PilotID) error
	shrink   func(adapters.PilotID, int64) error
}

var _ adapters.Adapter = (*fake)(nil)

func (f *fake) Info(context.Context) (adapters.Info, error)        { return f.info() }
func (f *fake) Snapshot(context.Context) (cluster.Snapshot, error) { return f.snapshot() }
func (f *fake) Submit(_ context.Context, s adapters.PilotSpec) (adapters.PilotID, error) {
	return f.submit(s)
}
func (f *fake) Cancel(_ context.Context, id adapters.PilotID) error { return f.cancel(id) }
func (f *fake) Shrink(_ context.Context, id adapters.PilotID, end int64) error {
	return f.shrink(id, end)
}

func TestSentinelErrorsSurviveThePluginBoundary(t *testing.T) {
	for _, sentinel := range []error{adapters.ErrUnreachable, adapters.ErrOutcomeUnknown, adapters.ErrNotImplemented, adapters.ErrInvalidSpec, adapters.ErrNotPilot} {
		t.Run(sentinel.Error(), func(t *testing.T) {
			wrapped := errors.Join(errors.New("sbatch: something specific"), sentinel)
			f := &fake{
				info:     func() (adapters.Info, error) { return adapters.Info{}, wrapped },
				snapshot: func() (cluster.Snapshot, error) { return cluster.Snapshot{}, wrapped },
				submit:   func(adapters.PilotSpec) (adapters.PilotID, error) { return "", wrapped },
				cancel:   func(adapters.PilotID) error { return wrapped },
				shrink:   func(adapters.PilotID, int64) error { return wrapped },
			}
			a := adaptertest.OverPlugin(t, f)
			ctx := context.Background()
			_, err1 := a.Snapshot(ctx)
			_, err2 := a.Submit(ctx, adapters.PilotSpec{TimeLimit: 60, Command: []string{"x"}})
			err3 := a.Cancel(ctx, "1")
			err4 := a.Shrink(ctx, "1", 100)
			for i, err := range []error{err1, err2, err3, err4} {
				if !errors.Is(err, sentinel) {
					t.Errorf("call %d: error %v does not match %v", i, err, sentinel)
				}
				if err != nil && !contains(err.Error(), "something specific") {
					t.Errorf("call %d: message lost: %q", i, err)
				}
			}
		})
	}
}

func TestAnUnclassifiedErrorKeepsItsMessageAndIsNoSentinel(t *testing.T) {
	f := &fake{snapshot: func() (cluster.Snapshot, error) { return cluster.Snapshot{}, errors.New("squeue: bad output") }}
	_, err := adaptertest.OverPlugin(t, f).Snapshot(context.Background())
	if err == nil || err.Error() != "squeue: bad output" {
		t.Fatalf("err = %v", err)
	}
	if errors.Is(err, adapters.ErrUnreachable) || errors.Is(err, adapters.ErrOutcomeUnknown) {
		t.Fatalf("an unclassified error became a sentinel: %v", err)
	}
}

func TestSnapshotRoundTripsThroughThePluginUnchanged(t *testing.T) {
	mt := cluster.Limit(3600)
	want := cluster.Snapshot{Now: 42, TotalNodes: 3, IdleNodes: 1, PlannedNodes: 1, MaxTime: &mt, Jobs: []cluster.Job{
		{ID: "1", User: "u", State: cluster.Running, Nodes: 1, TimeLimit: cluster.Unlimited, RunTime: 5},
		{ID: "2", User: "u", State: cluster.Pending, Nodes: 2, TimeLimit: 600, ExpectedStart: 99, Reason: "Resources"},
		{ID: "3", Name: "harvest-pilot", State: cluster.Running, Nodes: 1, TimeLimit: 60, Pilot: true},
	}}
	f := &fake{snapshot: func() (cluster.Snapshot, error) { return want, nil }}
	got, err := adaptertest.OverPlugin(t, f).Snapshot(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if got.Now != want.Now || got.IdleNodes != 1 || *got.MaxTime != 3600 || len(got.Jobs) != 3 ||
		!got.Jobs[0].TimeLimit.IsUnlimited() || got.Jobs[1].ExpectedStart != 99 || !got.Jobs[2].Pilot {
		t.Fatalf("snapshot changed across the boundary:\n got %+v\nwant %+v", got, want)
	}
}

func contains(s, sub string) bool {
	return len(s) >= len(sub) && (s == sub || len(sub) == 0 || indexOf(s, sub) >= 0)
}

func indexOf(s, sub string) int {
	for i := 0; i+len(sub) <= len(s); i++ {
		if s[i:i+len(sub)] == sub {
			return i
		}
	}
	return -1
}
