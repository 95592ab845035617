package agent

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"github.com/harvest-hpc/harvest/adapters/adaptertest"
	"github.com/harvest-hpc/harvest/cluster"
)

func TestDrainPlan(t *testing.T) {
	snap := cluster.Snapshot{Jobs: []cluster.Job{
		{ID: "f1", State: cluster.Running, Nodes: 2},
		{ID: "p1", State: cluster.Running, Nodes: 1, Pilot: true, Busy: true},
		{ID: "p2", State: cluster.Running, Nodes: 1, Pilot: true},
		{ID: "p3", State: cluster.Pending, Nodes: 1, Pilot: true},
	}}
	tests := []struct {
		name       string
		now        bool
		wantCancel []string
		wantBusy   int
	}{
		{name: "a graceful drain cancels queued and idle pilots and lets busy ones finish their batch", wantCancel: []string{"p2", "p3"}, wantBusy: 1},
		{name: "a drain with --now cancels every pilot, busy ones too", now: true, wantCancel: []string{"p1", "p2", "p3"}, wantBusy: 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c, rem, busy := DrainPlan(snap, tc.now)
			if !reflect.DeepEqual(c, tc.wantCancel) || rem != 3 || busy != tc.wantBusy {
				t.Errorf("got cancel %v remaining %d busy %d; want %v, 3, %d", c, rem, busy, tc.wantCancel, tc.wantBusy)
			}
		})
	}
}

func TestThePauseSurvivesARestartAndResumeEndsADrain(t *testing.T) {
	path := filepath.Join(t.TempDir(), "control.json")
	c, err := OpenControl(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	if c.Paused() {
		t.Fatal("a new agent starts paused")
	}
	if _, err := c.StartDrain(false); err != nil {
		t.Fatal(err)
	}
	c2, err := OpenControl(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	if st := c2.State(); !st.Paused || st.Drain == nil || st.Drain.Done {
		t.Fatalf("after a restart: %+v, want paused with a drain in progress", st)
	}
	if _, err := c2.SetPaused(false); err != nil {
		t.Fatal(err)
	}
	c3, _ := OpenControl(path, nil)
	if st := c3.State(); st.Paused || st.Drain != nil {
		t.Fatalf("after resume and restart: %+v, want running and no drain", st)
	}
}

func TestACorruptControlFileIsRefusedWithAClearError(t *testing.T) {
	path := filepath.Join(t.TempDir(), "control.json")
	os.WriteFile(path, []byte("{paused: yes"), 0o644)
	if _, err := OpenControl(path, nil); !errors.Is(err, ErrControlState) {
		t.Fatalf("got %v, want ErrControlState", err)
	}
}

func TestAnUnwritableControlFileChangesNothing(t *testing.T) {
	dir := t.TempDir()
	// A directory where the file should be: the rename fails.
	path := filepath.Join(dir, "control.json")
	os.Mkdir(path, 0o755)
	os.WriteFile(filepath.Join(path, "x"), nil, 0o644)
	c := &Control{path: path}
	c.log = discard()
	if _, err := c.SetPaused(true); !errors.Is(err, ErrControlState) {
		t.Fatalf("got %v, want ErrControlState", err)
	}
	if c.Paused() {
		t.Fatal("paused although the state could not be saved")
	}
}

func TestAPausedAgentSubmitsNothingAndADrainEmptiesTheCluster(t *testing.T) {
	m := adaptertest.NewMemory(4)
	ctl, err := OpenControl(filepath.Join(t.TempDir(), "control.json"), nil)
	if err != nil {
		t.Fatal(err)
	}
	busy := map[string]bool{}
	src := PausedDemand{Src: demandFunc(func() DemandInfo { return DemandInfo{Busy: busy} }), Paused: ctl.Paused}
	r := NewReconciler(m, src, testConfig(), nil)
	ctx := context.Background()
	r.OnRound = func(res RoundResult) { ctl.AfterRound(ctx, m, res, time.Second) }

	res := round(t, r)
	if len(res.Submitted) != 4 {
		t.Fatalf("submitted %d, want 4", len(res.Submitted))
	}
	busy[string(res.Submitted[0])] = true

	if _, err := ctl.StartDrain(false); err != nil {
		t.Fatal(err)
	}
	round(t, r)
	if got := m.PilotIDs(); !reflect.DeepEqual(got, []string{string(res.Submitted[0])}) {
		t.Fatalf("after the first drain round pilots %v remain, want only the busy %s", got, res.Submitted[0])
	}
	st := ctl.State()
	if st.Drain.Remaining != 1 || st.Drain.Busy != 1 || st.Drain.Cancelled != 3 || st.Drain.Done {
		t.Fatalf("drain progress %+v, want 1 remaining (busy), 3 cancelled", *st.Drain)
	}
	// The idle nodes are not refilled while paused.
	res = round(t, r)
	if len(res.Submitted) != 0 {
		t.Fatalf("a paused agent submitted %d pilots", len(res.Submitted))
	}
	// The busy pilot finishes its batch: cancelled at the next round.
	busy[string(res.Snapshot.Jobs[0].ID)] = false
	delete(busy, string(res.Snapshot.Jobs[0].ID))
	round(t, r)
	round(t, r)
	if got := m.PilotIDs(); len(got) != 0 {
		t.Fatalf("pilots %v left after the drain", got)
	}
	if st := ctl.State(); !st.Drain.Done || st.Drain.Remaining != 0 {
		t.Fatalf("drain not done: %+v", *st.Drain)
	}
}

func discard() *slog.Logger { return slog.New(slog.DiscardHandler) }
