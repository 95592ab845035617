// Package adaptertest is the conformance suite every batch-system adapter
// must pass, in process and across the go-plugin boundary (OverPlugin).
package adaptertest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/harvest-hpc/harvest/adapters"
	"github.com/harvest-hpc/harvest/cluster"
	"github.com/hashicorp/go-plugin"
)

// Harness adapts a batch system to the suite.
type Harness struct {
	// New returns an adapter on a cluster with at least one usable node
	// and no pilots of the adapter's tag. Called once per scenario.
	New func(t *testing.T) adapters.Adapter
	// Settle lets the batch system act between observations (sleep on a
	// real cluster, advance the clock of a simulated one).
	Settle func(t *testing.T)
	// Tries bounds how many Settle calls an eventual check waits (default 30).
	Tries int
	// Command is the pilots' command (default: sleep 600).
	Command []string
	// Unreachable, if set, returns an adapter whose batch system is down.
	Unreachable func(t *testing.T) adapters.Adapter
	// Cleanup, if set, runs after each scenario (e.g. cancel leftovers).
	Cleanup func(t *testing.T, a adapters.Adapter)
}

func (h Harness) tries() int {
	if h.Tries > 0 {
		return h.Tries
	}
	return 30
}

func (h Harness) command() []string {
	if len(h.Command) > 0 {
		return h.Command
	}
	return []string{"sleep", "600"}
}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return c
}

// Run runs every scenario of the suite.
func Run(t *testing.T, h Harness) {
	t.Helper()
	scenarios := []struct {
		name string
		run  func(t *testing.T, h Harness, a adapters.Adapter)
	}{
		{"info names the adapter, its tag and its granularity", testInfo},
		{"a snapshot is valid and not empty", testSnapshotValid},
		{"a submitted pilot shows up tagged, with its limit rounded down, and cancel removes it", testSubmitCancel},
		{"cancel is idempotent", testCancelIdempotent},
		{"an invalid spec is refused and submits nothing", testInvalidSpec},
		{"an unlimited pilot is accepted", testUnlimited},
		{"a cancelled context makes calls fail, not hang", testCancelledContext},
		{"a foreign or unknown id is never cancelled as a pilot", testCancelUnknown},
		{"shrink pulls a running pilot's end in and never pushes it out, or says it cannot", testShrink},
	}
	for _, sc := range scenarios {
		t.Run(sc.name, func(t *testing.T) {
			a := h.New(t)
			if h.Cleanup != nil {
				t.Cleanup(func() { h.Cleanup(t, a) })
			}
			sc.run(t, h, a)
		})
	}
	if h.Unreachable != nil {
		t.Run("an unreachable batch system gives ErrUnreachable, never an empty snapshot", func(t *testing.T) {
			a := h.Unreachable(t)
			s, err := a.Snapshot(ctx(t))
			if !errors.Is(err, adapters.ErrUnreachable) {
				t.Fatalf("Snapshot error = %v (snapshot %+v), want ErrUnreachable", err, s)
			}
		})
	}
}

func testInfo(t *testing.T, _ Harness, a adapters.Adapter) {
	info, err := a.Info(ctx(t))
	if err != nil {
		t.Fatalf("Info: %v", err)
	}
	if info.Name == "" || info.Tag == "" {
		t.Errorf("Info %+v: name and tag must be set", info)
	}
	if info.TimeGranularity < 1 {
		t.Errorf("Info.TimeGranularity = %d, want >= 1", info.TimeGranularity)
	}
}

func testSnapshotValid(t *testing.T, _ Harness, a adapters.Adapter) {
	s, err := a.Snapshot(ctx(t))
	if err != nil {
		t.Fatalf("Snapshot: %v", err)
	}
	if err := s.Validate(); err != nil {
		t.Fatalf("snapshot does not validate: %v", err)
	}
	if s.TotalNodes < 1 {
		t.Fatalf("TotalNodes = %d, want a real cluster", s.TotalNodes)
	}
	if s.Now <= 0 && s.TotalNodes == 0 {
		t.Fatalf("snapshot looks empty: %+v", s)
	}
	if len(s.Pilots()) != 0 {
		t.Fatalf("fresh cluster already has pilots: %+v", s.Pilots())
	}
}

// eventually calls cond until it returns true, settling in between.
func eventually(t *testing.T, h Harness, what string, cond func() (bool, string)) {
	t.Helper()
	var last string
	for i := 0; i < h.tries(); i++ {
		ok, msg := cond()
		if ok {
			return
		}
		last = msg
		h.Settle(t)
	}
	t.Fatalf("%s: not reached after %d tries; last: %s", what, h.tries(), last)
}

func find(s cluster.Snapshot, id adapters.PilotID) (cluster.Job, bool) {
	for _, j := range s.Jobs {
		if j.ID == string(id) {
			return j, true
		}
	}
	return cluster.Job{}, false
}

func snapshot(t *testing.T, a adapters.Adapter) cluster.Snapshot {
	t.Helper()
	s, err := a.Snapshot(ctx(t))
	if err != nil {
		t.Fatalf("Snapshot: %v", err)
	}
	return s
}

func testSubmitCancel(t *testing.T, h Harness, a adapters.Adapter) {
	info, err := a.Info(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	g := info.TimeGranularity
	asked := cluster.Limit(10*60 + g/2) // not a multiple of g when g > 1
	id, err := a.Submit(ctx(t), adapters.PilotSpec{TimeLimit: asked, Command: h.command()})
	if err != nil {
		t.Fatalf("Submit: %v", err)
	}
	if id == "" {
		t.Fatal("Submit returned an empty id")
	}
	want := adapters.RoundDown(asked, g)
	eventually(t, h, "pilot visible", func() (bool, string) {
		s := snapshot(t, a)
		j, ok := find(s, id)
		if !ok {
			return false, "pilot " + string(id) + " not in snapshot"
		}
		if !j.Pilot {
			t.Fatalf("job %s is not marked as a pilot: %+v", id, j)
		}
		if j.TimeLimit != want {
			t.Fatalf("pilot limit = %v, want %v rounded down from %v", j.TimeLimit, want, asked)
		}
		if j.Nodes != 1 {
			t.Fatalf("pilot holds %d nodes, want 1", j.Nodes)
		}
		return true, ""
	})
	if err := a.Cancel(ctx(t), id); err != nil {
		t.Fatalf("Cancel: %v", err)
	}
	eventually(t, h, "pilot gone after cancel", func() (bool, string) {
		_, ok := find(snapshot(t, a), id)
		return !ok, "pilot still listed"
	})
}

func testShrink(t *testing.T, h Harness, a adapters.Adapter) {
	info, err := a.Info(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	if !info.Shrink {
		if err := a.Shrink(ctx(t), "1", snapshot(t, a).Now+600); !errors.Is(err, adapters.ErrNotImplemented) {
			t.Fatalf("Info.Shrink is false but Shrink = %v, want ErrNotImplemented", err)
		}
		return
	}
	id, err := a.Submit(ctx(t), adapters.PilotSpec{TimeLimit: 30 * 60, Command: h.command()})
	if err != nil {
		t.Fatalf("Submit: %v", err)
	}
	eventually(t, h, "pilot running", func() (bool, string) {
		j, ok := find(snapshot(t, a), id)
		return ok && j.State == cluster.Running, "not running yet"
	})
	s := snapshot(t, a)
	end := s.Now + 5*60
	if err := a.Shrink(ctx(t), id, end); err != nil {
		t.Fatalf("Shrink: %v", err)
	}
	remaining := func() cluster.Limit {
		s := snapshot(t, a)
		j, ok := find(s, id)
		if !ok {
			t.Fatalf("pilot %s gone after Shrink", id)
		}
		// The end, as the snapshot shows it, is where it was put.
		if got := s.Now + int64(j.Remaining()); got < end-1 || got > end+1 {
			t.Fatalf("pilot ends at %d (now %d, remaining %v), want %d: %+v", got, s.Now, j.Remaining(), end, j)
		}
		return j.Remaining()
	}
	remaining()
	// A later end changes nothing; neither does an unknown pilot.
	if err := a.Shrink(ctx(t), id, end+15*60); err != nil {
		t.Fatalf("Shrink to a later end: %v", err)
	}
	remaining()
	if err := a.Shrink(ctx(t), "999999", end); err != nil {
		t.Errorf("Shrink of an unknown pilot: %v", err)
	}
	if err := a.Shrink(ctx(t), id, snapshot(t, a).Now-1); !errors.Is(err, adapters.ErrInvalidSpec) {
		t.Errorf("Shrink to the past = %v, want ErrInvalidSpec", err)
	}
}

func testCancelIdempotent(t *testing.T, h Harness, a adapters.Adapter) {
	id, err := a.Submit(ctx(t), adapters.PilotSpec{TimeLimit: 5 * 60, Command: h.command()})
	if err != nil {
		t.Fatalf("Submit: %v", err)
	}
	eventually(t, h, "pilot visible", func() (bool, string) {
		_, ok := find(snapshot(t, a), id)
		return ok, "not yet"
	})
	for i := 0; i < 2; i++ {
		if err := a.Cancel(ctx(t), id); err != nil {
			t.Fatalf("Cancel #%d: %v", i+1, err)
		}
	}
	eventually(t, h, "pilot gone", func() (bool, string) {
		_, ok := find(snapshot(t, a), id)
		return !ok, "still there"
	})
	if err := a.Cancel(ctx(t), id); err != nil {
		t.Fatalf("Cancel of a finished pilot: %v", err)
	}
}

func testInvalidSpec(t *testing.T, h Harness, a adapters.Adapter) {
	before := len(snapshot(t, a).Pilots())
	bad := []adapters.PilotSpec{
		{TimeLimit: 600},                        // no command
		{TimeLimit: -5, Command: h.command()},   // negative limit
		{TimeLimit: 0, Command: h.command()},    // zero limit
		{TimeLimit: 600, Command: []string{""}}, // empty argv[0]
		{TimeLimit: 1, Command: h.command()},    // below any granularity > 1 ... see below
	}
	info, err := a.Info(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	if info.TimeGranularity <= 1 {
		bad = bad[:len(bad)-1] // 1 s is a valid limit at 1 s granularity
	}
	for _, spec := range bad {
		if id, err := a.Submit(ctx(t), spec); !errors.Is(err, adapters.ErrInvalidSpec) {
			t.Errorf("Submit(%+v) = %q, %v; want ErrInvalidSpec", spec, id, err)
		}
	}
	h.Settle(t)
	if after := len(snapshot(t, a).Pilots()); after != before {
		t.Fatalf("invalid specs changed the pilots: %d before, %d after", before, after)
	}
}

func testUnlimited(t *testing.T, h Harness, a adapters.Adapter) {
	id, err := a.Submit(ctx(t), adapters.PilotSpec{TimeLimit: cluster.Unlimited, Command: h.command()})
	if err != nil {
		t.Fatalf("Submit unlimited: %v", err)
	}
	eventually(t, h, "unlimited pilot visible", func() (bool, string) {
		s := snapshot(t, a)
		j, ok := find(s, id)
		if !ok {
			return false, "not yet"
		}
		if lim := s.PartitionMaxTime(); !j.TimeLimit.IsUnlimited() && j.TimeLimit != lim {
			t.Fatalf("unlimited pilot got limit %v; want unlimited or the partition's MaxTime %v", j.TimeLimit, lim)
		}
		return true, ""
	})
	if err := a.Cancel(ctx(t), id); err != nil {
		t.Fatalf("Cancel: %v", err)
	}
}

func testCancelledContext(t *testing.T, _ Harness, a adapters.Adapter) {
	c, cancel := context.WithCancel(context.Background())
	cancel()
	done := make(chan error, 1)
	go func() {
		_, err := a.Snapshot(c)
		done <- err
	}()
	select {
	case err := <-done:
		if err == nil {
			t.Fatal("Snapshot with a cancelled context succeeded")
		}
	case <-time.After(15 * time.Second):
		t.Fatal("Snapshot with a cancelled context hung")
	}
}

func testCancelUnknown(t *testing.T, _ Harness, a adapters.Adapter) {
	before := snapshot(t, a)
	if err := a.Cancel(ctx(t), "987654"); err != nil && !errors.Is(err, adapters.ErrNotPilot) {
		t.Fatalf("Cancel of an unknown id: %v (want nil or ErrNotPilot)", err)
	}
	for _, j := range before.Jobs {
		if j.Pilot {
			continue
		}
		if err := a.Cancel(ctx(t), adapters.PilotID(j.ID)); !errors.Is(err, adapters.ErrNotPilot) {
			t.Fatalf("Cancel of foreign job %s: %v, want ErrNotPilot", j.ID, err)
		}
	}
}

// OverPlugin returns a view of a that crosses the real go-plugin gRPC
// boundary (in memory, no subprocess), as Nomad's driver harness does.
func OverPlugin(t testing.TB, a adapters.Adapter) adapters.Adapter {
	t.Helper()
	client, _ := plugin.TestPluginGRPCConn(t, false, map[string]plugin.Plugin{
		adapters.PluginName: &adapters.GRPCPlugin{Impl: a},
	})
	t.Cleanup(func() { client.Close() })
	raw, err := client.Dispense(adapters.PluginName)
	if err != nil {
		t.Fatalf("dispense: %v", err)
	}
	return raw.(adapters.Adapter)
}
