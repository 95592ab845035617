package agent

import (
	"encoding/json"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"

	"github.com/harvest-hpc/harvest/adapters/adaptertest"
	"github.com/harvest-hpc/harvest/agent/policy"
	"github.com/harvest-hpc/harvest/cluster"
)

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

// null where the admin's choice is kept reads as nothing chosen: a paused
// agent would start submitting again. Refused like any corrupt file.
func TestANullInTheControlFileIsRefusedNotReadAsUnpaused(t *testing.T) {
	for _, body := range []string{`null`, `{"paused": null}`} {
		path := filepath.Join(t.TempDir(), "control.json")
		os.WriteFile(path, []byte(body), 0o644)
		if _, err := OpenControl(path, nil); !errors.Is(err, ErrControlState) || !strings.Contains(err.Error(), "null") {
			t.Fatalf("%s: got %v, want ErrControlState naming the null", body, err)
		}
	}
}

// A dumped round's context with null for a count is refused, not read as
// no recommendation (harvest decide --context would replay another round).
func TestARoundContextWithNullIsRefused(t *testing.T) {
	path := filepath.Join(t.TempDir(), "r.context.json")
	os.WriteFile(path, []byte(`{"recommended": null}`), 0o644)
	if _, err := ReadRoundContext(path); err == nil || !strings.Contains(err.Error(), `null for "recommended"`) {
		t.Fatalf("got %v, want the null named", err)
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
	src := ctl.Demand(demandFunc(func() DemandInfo { return DemandInfo{Busy: busy} }))
	cfg := testConfig()
	cfg.DumpDir = t.TempDir()
	r := NewReconciler(m, src, cfg, nil)
	mx := NewMetrics(nil)
	r.OnRound = func(res RoundResult) { mx.ObserveRound(res); ctl.Observe(res) }

	res := round(t, r)
	if len(res.Submitted) != 4 {
		t.Fatalf("submitted %d, want 4", len(res.Submitted))
	}
	busyID := string(res.Submitted[0])
	busy[busyID] = true

	if _, err := ctl.StartDrain(false); err != nil {
		t.Fatal(err)
	}
	res = round(t, r)
	if res.Decision.Case != policy.CaseDrain || res.Drain == nil || !res.Paused {
		t.Fatalf("the round after a drain started decided %q (drain %v, paused %v), want the policy's drain", res.Decision.Case, res.Drain, res.Paused)
	}
	if got := m.PilotIDs(); !reflect.DeepEqual(got, []string{busyID}) {
		t.Fatalf("after the first drain round pilots %v remain, want only the busy %s", got, busyID)
	}
	if len(res.CancelLatency) != 3 {
		t.Fatalf("%d cancels timed, want the drain's 3 through the round's own actuator", len(res.CancelLatency))
	}
	st := ctl.State()
	if st.Drain.Remaining != 1 || st.Drain.Busy != 1 || st.Drain.Cancelled != 3 || st.Drain.Done {
		t.Fatalf("drain progress %+v, want 1 remaining (busy), 3 cancelled", *st.Drain)
	}
	if v := gauge(t, mx, "harvest_paused"); v != 1 {
		t.Fatalf("harvest_paused = %v during a drain, want 1", v)
	}
	// The dumped round replays to the same decision: the drain is part of
	// the policy's input.
	replayLast(t, cfg.DumpDir, res.Decision)

	// The idle nodes are not refilled while paused.
	res = round(t, r)
	if len(res.Submitted) != 0 {
		t.Fatalf("a paused agent submitted %d pilots", len(res.Submitted))
	}
	// The busy pilot finishes its batch: cancelled at the next round.
	delete(busy, busyID)
	round(t, r)
	if got := m.PilotIDs(); len(got) != 0 {
		t.Fatalf("pilots %v left after the drain", got)
	}
	if st := ctl.State(); !st.Drain.Done || st.Drain.Remaining != 0 || st.Drain.Cancelled != 4 {
		t.Fatalf("drain not done: %+v", *st.Drain)
	}
	// Resuming ends the drain: the next round fills the cluster again.
	if _, err := ctl.SetPaused(false); err != nil {
		t.Fatal(err)
	}
	if res := round(t, r); len(res.Submitted) != 4 || res.Paused || res.Drain != nil {
		t.Fatalf("after resume: submitted %d (paused %v, drain %v), want 4", len(res.Submitted), res.Paused, res.Drain)
	}
	if v := gauge(t, mx, "harvest_paused"); v != 0 {
		t.Fatalf("harvest_paused = %v after resume, want 0", v)
	}
}

func TestADrainWaitsForPilotsOnTheirWayAndCancelsThemOnceVisible(t *testing.T) {
	h := &hiding{Adapter: adaptertest.NewMemory(4)}
	ctl, _ := OpenControl("", nil)
	r := NewReconciler(h, ctl.Demand(StaticDemand{}), testConfig(), nil)
	r.OnRound = ctl.Observe
	h.hide.Store(true) // sbatch returned, squeue does not list them yet
	if res := round(t, r); len(res.Submitted) != 4 {
		t.Fatalf("submitted %d, want 4", len(res.Submitted))
	}
	if _, err := ctl.StartDrain(false); err != nil {
		t.Fatal(err)
	}
	res := round(t, r)
	if len(res.Decision.Release) != 0 || ctl.State().Drain.Remaining != 4 || ctl.State().Drain.Done {
		t.Fatalf("drain with 4 pilots on their way: released %v, progress %+v; want nothing to cancel yet and 4 remaining", res.Decision.Release, *ctl.State().Drain)
	}
	h.hide.Store(false)
	res = round(t, r)
	if len(res.Cancelled) != 4 {
		t.Fatalf("cancelled %v once visible, want all 4", res.Cancelled)
	}
	if st := ctl.State(); !st.Drain.Done || st.Drain.Cancelled != 4 {
		t.Fatalf("drain progress %+v, want done with 4 cancelled", *st.Drain)
	}
}

// replayLast replays the newest dumped round with its context and checks
// it decides want.
func replayLast(t *testing.T, dir string, want policy.Decision) {
	t.Helper()
	files, _ := filepath.Glob(filepath.Join(dir, "snapshot-*[0-9].json"))
	if len(files) == 0 {
		t.Fatal("no dumped round")
	}
	sort.Strings(files)
	last := files[len(files)-1]
	b, err := os.ReadFile(last)
	if err != nil {
		t.Fatal(err)
	}
	var s cluster.Snapshot
	if err := json.Unmarshal(b, &s); err != nil {
		t.Fatal(err)
	}
	rc, err := ReadRoundContext(strings.TrimSuffix(last, ".json") + ".context.json")
	if err != nil {
		t.Fatal(err)
	}
	if got := policy.Decide(rc.Input(s), *rc.Config); !reflect.DeepEqual(got, want) {
		t.Fatalf("replay of %s differs:\n got %+v\nwant %+v", last, got, want)
	}
}

func discard() *slog.Logger { return slog.New(slog.DiscardHandler) }
