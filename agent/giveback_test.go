package agent

import (
	"context"
	"strings"
	"sync"
	"testing"

	"github.com/harvest-hpc/harvest/adapters"
	"github.com/harvest-hpc/harvest/adapters/adaptertest"
	"github.com/harvest-hpc/harvest/cluster"
)

func TestChooseGiveBack(t *testing.T) {
	usable := &adapters.Preemption{Partition: "harvest", Mode: "CANCEL", Usable: true}
	broken := &adapters.Preemption{Partition: "harvest", Mode: "CANCEL", GraceTime: 30, Problem: "lacks preempt_send_user_signal"}
	oldestFirst := &adapters.Preemption{Partition: "harvest", Mode: "CANCEL", Usable: true, Problem: "SchedulerParameters lacks preempt_youngest_first"}
	slurm := func(pre *adapters.Preemption) adapters.Info {
		return adapters.Info{Name: "slurm", Version: "22.05.8", Preemption: pre, Shrink: true}
	}
	tests := []struct {
		name     string
		info     adapters.Info
		req      GiveBackRequest
		want     GiveBackMode
		err      string
		describe string
		warn     string
	}{
		{name: "auto picks preemption where the tier is usable", info: slurm(usable), req: GiveBackRequest{Mode: GiveBackAuto},
			want: GiveBackPreemption, describe: "pilots above the floor run in partition harvest"},
		{name: "auto falls back to polling and says why", info: slurm(broken), req: GiveBackRequest{Mode: GiveBackAuto},
			want: GiveBackPolling, describe: "lacks preempt_send_user_signal"},
		{name: "auto without any tier is polling", info: slurm(nil), req: GiveBackRequest{},
			want: GiveBackPolling, describe: "no preemptible partition"},
		{name: "polling can be asked for where preemption would work", info: slurm(usable), req: GiveBackRequest{Mode: GiveBackPolling},
			want: GiveBackPolling, describe: "--give-back preemption"},
		{name: "preemption without a usable tier is refused", info: slurm(broken), req: GiveBackRequest{Mode: GiveBackPreemption},
			err: "lacks preempt_send_user_signal"},
		{name: "an unknown mode is refused", info: slurm(usable), req: GiveBackRequest{Mode: "fast"}, err: `"fast" is not auto`},
		{name: "shrinking where the adapter cannot is refused", info: adapters.Info{Name: "htcondor"}, req: GiveBackRequest{Shrink: true},
			err: "cannot pull in"},
		{name: "a minimum limit 22.05 would misuse is dropped with a warning", info: slurm(usable), req: GiveBackRequest{MinPilotLimit: 600},
			want: GiveBackPreemption, warn: "22.05.8 does not size jobs"},
		{name: "a usable tier with something to watch for is used, with a warning", info: slurm(oldestFirst), req: GiveBackRequest{Mode: GiveBackAuto},
			want: GiveBackPreemption, describe: "partition harvest", warn: "lacks preempt_youngest_first"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			g, err := ChooseGiveBack(tc.info, tc.req)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err = %v, want one containing %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if g.Mode != tc.want || !strings.Contains(g.Describe, tc.describe) {
				t.Errorf("got %s %q, want %s containing %q", g.Mode, g.Describe, tc.want, tc.describe)
			}
			if tc.warn != "" && (len(g.Warnings) != 1 || !strings.Contains(g.Warnings[0], tc.warn)) || tc.warn == "" && len(g.Warnings) > 0 {
				t.Errorf("warnings %q, want %q", g.Warnings, tc.warn)
			}
			if g.MinPilotLimit != 0 {
				t.Errorf("min pilot limit %v kept for an adapter that does not size pilots", g.MinPilotLimit)
			}
		})
	}
}

// recording records the specs submitted and the shrinks asked for.
type recording struct {
	*adaptertest.Memory
	mu     sync.Mutex
	specs  []adapters.PilotSpec
	shrunk map[string]int64
}

func (r *recording) Submit(ctx context.Context, s adapters.PilotSpec) (adapters.PilotID, error) {
	r.mu.Lock()
	r.specs = append(r.specs, s)
	r.mu.Unlock()
	return r.Memory.Submit(ctx, s)
}

func (r *recording) Shrink(ctx context.Context, id adapters.PilotID, end int64) error {
	r.mu.Lock()
	if r.shrunk == nil {
		r.shrunk = map[string]int64{}
	}
	r.shrunk[string(id)] = end
	r.mu.Unlock()
	return r.Memory.Shrink(ctx, id, end)
}

func TestPreemptionModeSubmitsTheFloorFirstThenPreemptiblePilots(t *testing.T) {
	m := &recording{Memory: adaptertest.NewMemory(5)}
	cfg := testConfig()
	cfg.Policy.MinNodes = 2
	g, err := ChooseGiveBack(adapters.Info{Name: "memory", Preemption: &adapters.Preemption{Partition: "low", Usable: true}, Shrink: true},
		GiveBackRequest{Mode: GiveBackAuto})
	if err != nil {
		t.Fatal(err)
	}
	g.Apply(&cfg.Policy)
	r := NewReconciler(m, nil, cfg, nil)
	res, err := r.Round(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Submitted) != 5 || res.Decision.Submit.Preemptible != 3 {
		t.Fatalf("submitted %d, decision %+v", len(res.Submitted), res.Decision.Submit)
	}
	var flags []bool
	for _, s := range m.specs {
		flags = append(flags, s.Preemptible)
	}
	if want := []bool{false, false, true, true, true}; !equalBools(flags, want) {
		t.Errorf("preemptible flags %v, want %v", flags, want)
	}
	// The ledger remembers which were preemptible until they show up.
	up := r.ledger.Upcoming()
	n := 0
	for _, u := range up {
		if u.Preemptible {
			n++
		}
	}
	if len(up) != 0 && n != 3 {
		t.Errorf("ledger %+v: want 3 preemptible entries", up)
	}
}

func equalBools(a, b []bool) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestShrinkingPullsInThePilotsTheTopJobNeeds(t *testing.T) {
	m := &recording{Memory: adaptertest.NewMemory(4)}
	cfg := testConfig()
	cfg.Policy.Shrink = true
	cfg.Policy.IdleMargin = 0 // no idle node here: the margin would release a pilot first
	// Two unlimited pilots on an otherwise idle cluster...
	src := &endSink{StaticDemand: StaticDemand{Info: DemandInfo{Demand: &cluster.Demand{PendingTasks: 2, SlotsPerNode: 1}}}, ends: map[string]int64{}}
	ctl, _ := OpenControl("", nil)
	r := NewReconciler(m, ctl.Demand(src), cfg, nil)
	if _, err := r.Round(context.Background()); err != nil {
		t.Fatal(err)
	}
	// ...then a 2-node job runs for an hour and a 4-node job waits for it.
	m.AddJob(cluster.Job{ID: "f1", User: "u", State: cluster.Running, Nodes: 2, TimeLimit: 3600})
	m.AddJob(cluster.Job{ID: "top", User: "u", State: cluster.Pending, Nodes: 4, TimeLimit: 3600})
	res, err := r.Round(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Shrunk) != 2 {
		t.Fatalf("shrunk %v, decision %+v", res.Shrunk, res.Decision)
	}
	for _, id := range res.Shrunk {
		if end := m.shrunk[id]; end != res.Snapshot.Now+3600-cfg.Policy.ShrinkMargin {
			t.Errorf("pilot %s shrunk to %d, want now+3600-%d", id, end, cfg.Policy.ShrinkMargin)
		}
		// The queue hears of it, through the admin's switches, for the master.
		if src.ends[id] != m.shrunk[id] {
			t.Errorf("pilot %s: the queue was told %d, want %d", id, src.ends[id], m.shrunk[id])
		}
	}
	// The next round sees them end in time and shrinks nothing more.
	res, err = r.Round(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Decision.Shrink) != 0 {
		t.Errorf("second round shrinks again: %+v", res.Decision)
	}
}

// endSink is a demand source that records the ends pulled in.
type endSink struct {
	StaticDemand
	ends map[string]int64
}

func (e *endSink) PullIn(_ context.Context, pilot string, end int64) error {
	e.ends[pilot] = end
	return nil
}
