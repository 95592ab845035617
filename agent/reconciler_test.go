package agent

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/harvest-hpc/harvest/adapters"
	"github.com/harvest-hpc/harvest/adapters/adaptertest"
	"github.com/harvest-hpc/harvest/agent/policy"
	"github.com/harvest-hpc/harvest/cluster"
)

func testConfig() Config {
	c := DefaultConfig()
	c.PollInterval = 10 * time.Millisecond
	c.MaxBackoff = 40 * time.Millisecond
	c.SubmitTimeout = 100 * time.Millisecond
	c.SubmitTimeoutStep = 100 * time.Millisecond
	c.Policy.MinNodes = 0
	return c
}

// hiding wraps an adapter and hides pilots from snapshots for a while, as a
// batch system does between sbatch returning and squeue listing the job.
type hiding struct {
	adapters.Adapter
	hide atomic.Bool
}

func (h *hiding) Snapshot(ctx context.Context) (cluster.Snapshot, error) {
	s, err := h.Adapter.Snapshot(ctx)
	if err != nil || !h.hide.Load() {
		return s, err
	}
	var jobs []cluster.Job
	idle := s.IdleNodes
	for _, j := range s.Jobs {
		if j.Pilot {
			if j.State == cluster.Running {
				idle += j.Nodes
			}
			continue
		}
		jobs = append(jobs, j)
	}
	s.Jobs, s.IdleNodes = jobs, idle
	return s, nil
}

func TestAnIdleClusterWithoutPendingJobsIsFilledOnceAndNotTwice(t *testing.T) {
	m := adaptertest.NewMemory(4)
	r := NewReconciler(m, nil, testConfig(), nil)
	res, err := r.Round(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Submitted) != 4 {
		t.Fatalf("submitted %d pilots on 4 idle nodes, want 4 (decision %+v)", len(res.Submitted), res.Decision)
	}
	res, err = r.Round(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Submitted) != 0 || len(m.PilotIDs()) != 4 {
		t.Fatalf("second round submitted %d more (pilots now %v)", len(res.Submitted), m.PilotIDs())
	}
}

func TestPilotsNotYetVisibleAreNotSubmittedTwice(t *testing.T) {
	m := adaptertest.NewMemory(3)
	h := &hiding{Adapter: m}
	h.hide.Store(true)
	r := NewReconciler(h, nil, testConfig(), nil)
	for i := 0; i < 3; i++ {
		if _, err := r.Round(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	if got := len(m.PilotIDs()); got != 3 {
		t.Fatalf("with pilots hidden from snapshots, 3 rounds left %d pilots on 3 nodes, want 3", got)
	}
	h.hide.Store(false)
	if _, err := r.Round(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := len(m.PilotIDs()); got != 3 {
		t.Fatalf("after pilots became visible: %d pilots, want 3", got)
	}
	if r.ledger.Len() != 0 {
		t.Fatalf("ledger still holds %d entries after the pilots became visible", r.ledger.Len())
	}
}

// slowSubmit blocks Submit until its context ends, n times, then succeeds.
type slowSubmit struct {
	*adaptertest.Memory
	mu    sync.Mutex
	stall int
}

func (s *slowSubmit) Submit(ctx context.Context, spec adapters.PilotSpec) (adapters.PilotID, error) {
	s.mu.Lock()
	stall := s.stall > 0
	if stall {
		s.stall--
	}
	s.mu.Unlock()
	if stall {
		<-ctx.Done()
		return "", ctx.Err()
	}
	return s.Memory.Submit(ctx, spec)
}

func TestASubmitTimeoutEndsTheRoundAndGrowsTheTimeoutUntilASuccess(t *testing.T) {
	s := &slowSubmit{Memory: adaptertest.NewMemory(4), stall: 2}
	cfg := testConfig()
	r := NewReconciler(s, nil, cfg, nil)

	res, _ := r.Round(context.Background())
	if !res.SubmitTimedOut || len(res.Submitted) != 0 {
		t.Fatalf("round 1: timed out=%v submitted=%v", res.SubmitTimedOut, res.Submitted)
	}
	if got := r.SubmitTimeout(); got != cfg.SubmitTimeout+cfg.SubmitTimeoutStep {
		t.Fatalf("after one timeout: %v, want %v", got, cfg.SubmitTimeout+cfg.SubmitTimeoutStep)
	}
	res, _ = r.Round(context.Background())
	if got := r.SubmitTimeout(); got != cfg.SubmitTimeout+2*cfg.SubmitTimeoutStep {
		t.Fatalf("after two timeouts: %v", got)
	}
	// The two unknown submits count as held until the ledger's TTL passes,
	// so the third round only fills the rest.
	res, _ = r.Round(context.Background())
	if len(res.Submitted) != 2 {
		t.Fatalf("round 3 submitted %d, want 2 (2 of 4 nodes may already be taken by unknown submits)", len(res.Submitted))
	}
	if got := r.SubmitTimeout(); got != cfg.SubmitTimeout {
		t.Fatalf("after a success the timeout is %v, want reset to %v", got, cfg.SubmitTimeout)
	}
}

// countingCancel records Cancel calls.
type countingCancel struct {
	*adaptertest.Memory
	cancels atomic.Int32
}

func (c *countingCancel) Cancel(ctx context.Context, id adapters.PilotID) error {
	c.cancels.Add(1)
	return c.Memory.Cancel(ctx, id)
}

func TestAnUnreachableBatchSystemChangesNothing(t *testing.T) {
	m := &countingCancel{Memory: adaptertest.NewMemory(4)}
	r := NewReconciler(m, nil, testConfig(), nil)
	if _, err := r.Round(context.Background()); err != nil {
		t.Fatal(err)
	}
	m.Down = true
	_, err := r.Round(context.Background())
	if !errors.Is(err, ErrNoSnapshot) || !errors.Is(err, adapters.ErrUnreachable) {
		t.Fatalf("err = %v, want ErrNoSnapshot wrapping ErrUnreachable", err)
	}
	if m.cancels.Load() != 0 {
		t.Fatalf("%d cancels while the cluster was unreachable", m.cancels.Load())
	}
}

func TestAQueueErrorHoldsStill(t *testing.T) {
	m := adaptertest.NewMemory(4)
	r := NewReconciler(m, failingDemand{}, testConfig(), nil)
	if _, err := r.Round(context.Background()); !errors.Is(err, ErrNoSnapshot) {
		t.Fatalf("err = %v", err)
	}
	if len(m.PilotIDs()) != 0 {
		t.Fatalf("submitted without demand figures: %v", m.PilotIDs())
	}
}

type failingDemand struct{}

func (failingDemand) Demand(context.Context, Seen) (DemandInfo, error) {
	return DemandInfo{}, errors.New("queue down")
}

func TestDryRunDecidesButDoesNotAct(t *testing.T) {
	m := adaptertest.NewMemory(4)
	cfg := testConfig()
	cfg.DryRun = true
	r := NewReconciler(m, nil, cfg, nil)
	res, err := r.Round(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if res.Decision.Submit == nil || res.Decision.Submit.Count != 4 {
		t.Fatalf("dry run decision %+v, want submit 4", res.Decision)
	}
	if len(m.PilotIDs()) != 0 {
		t.Fatalf("dry run submitted %v", m.PilotIDs())
	}
}

func TestAnEmptyBacklogReleasesIdlePilots(t *testing.T) {
	m := adaptertest.NewMemory(4)
	r := NewReconciler(m, nil, testConfig(), nil)
	if _, err := r.Round(context.Background()); err != nil {
		t.Fatal(err)
	}
	r.src = StaticDemand{Info: DemandInfo{Demand: &cluster.Demand{SlotsPerNode: 1}}}
	res, err := r.Round(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Cancelled) != 4 || len(m.PilotIDs()) != 0 {
		t.Fatalf("empty backlog: cancelled %v, left %v; want all 4 released", res.Cancelled, m.PilotIDs())
	}
}

func TestTheMastersPilotIsReleasedLastAmongEquals(t *testing.T) {
	m := adaptertest.NewMemory(4)
	r := NewReconciler(m, nil, testConfig(), nil)
	if _, err := r.Round(context.Background()); err != nil {
		t.Fatal(err)
	}
	// The four pilots hold the same unlimited limit and run no task; the
	// newest, first in the release order by id, hosts the master.
	ids := m.PilotIDs()
	if len(ids) != 4 {
		t.Fatalf("pilots %v, want 4", ids)
	}
	newest, next := ids[3], ids[2]
	r.src = StaticDemand{Info: DemandInfo{Demand: &cluster.Demand{RunningTasks: 3, SlotsPerNode: 1}, Master: newest}}
	res, err := r.Round(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(res.Cancelled, []string{next}) {
		t.Fatalf("cancelled %v, want [%s]: the master's pilot %s goes last", res.Cancelled, next, newest)
	}
	for _, j := range res.Snapshot.Jobs {
		if j.Master != (j.ID == newest) {
			t.Fatalf("snapshot marks pilot %s master=%v; the queue named %s", j.ID, j.Master, newest)
		}
	}
}

func TestAPausedAgentSubmitsNothing(t *testing.T) {
	m := adaptertest.NewMemory(4)
	r := NewReconciler(m, StaticDemand{Info: DemandInfo{Paused: true}}, testConfig(), nil)
	if _, err := r.Round(context.Background()); err != nil {
		t.Fatal(err)
	}
	if len(m.PilotIDs()) != 0 {
		t.Fatalf("paused agent submitted %v", m.PilotIDs())
	}
}

func TestDumpedSnapshotsReplayToTheSameDecision(t *testing.T) {
	m := adaptertest.NewMemory(21)
	m.AddJob(cluster.Job{ID: "1", User: "u1", State: cluster.Running, Nodes: 5, TimeLimit: 1200, RunTime: 60})
	m.AddJob(cluster.Job{ID: "3", User: "u3", State: cluster.Pending, Nodes: 10, TimeLimit: 1500})
	dir := t.TempDir()
	cfg := testConfig()
	cfg.DumpDir = dir
	cfg.Policy.MinNodes = 2
	r := NewReconciler(m, nil, cfg, nil)
	res, err := r.Round(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	files, _ := filepath.Glob(filepath.Join(dir, "snapshot-*[0-9].json"))
	if len(files) != 1 {
		t.Fatalf("dumped %v, want one snapshot", files)
	}
	b, err := os.ReadFile(files[0])
	if err != nil {
		t.Fatal(err)
	}
	var s cluster.Snapshot
	if err := json.Unmarshal(b, &s); err != nil {
		t.Fatal(err)
	}
	if s.MinNodes != 2 {
		t.Fatalf("dumped min_nodes = %d, want the agent's 2", s.MinNodes)
	}
	rc, err := ReadRoundContext(strings.TrimSuffix(files[0], ".json") + ".context.json")
	if err != nil {
		t.Fatal(err)
	}
	if rc.Config == nil || rc.Config.MinNodes != 2 {
		t.Fatalf("round context %+v lacks the agent's settings", rc)
	}
	replayed := policy.Decide(policy.Input{Snapshot: s, Upcoming: rc.Upcoming, Recommended: rc.Recommended}, *rc.Config)
	if !reflect.DeepEqual(replayed, res.Decision) {
		t.Fatalf("replay differs:\n got %+v\nwant %+v", replayed, res.Decision)
	}
}

func TestRunBacksOffWhileUnreachableAndStopsOnCancel(t *testing.T) {
	m := &countingSnapshots{Memory: adaptertest.NewMemory(2)}
	m.Down = true
	cfg := testConfig()
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	done := make(chan error)
	go func() { done <- NewReconciler(m, nil, cfg, nil).Run(ctx) }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Run did not stop after its context ended")
	}
	// Without backoff 300 ms / 10 ms = 30 rounds; with backoff capped at
	// 40 ms, far fewer.
	if n := m.n.Load(); n < 2 || n > 20 {
		t.Fatalf("%d snapshot attempts in 300 ms; want backoff (2..20)", n)
	}
}

type countingSnapshots struct {
	*adaptertest.Memory
	n atomic.Int32
}

func (c *countingSnapshots) Snapshot(ctx context.Context) (cluster.Snapshot, error) {
	c.n.Add(1)
	return c.Memory.Snapshot(ctx)
}

// recordingDemand remembers what each round told the queue.
type recordingDemand struct{ seen []Seen }

func (d *recordingDemand) Demand(_ context.Context, s Seen) (DemandInfo, error) {
	d.seen = append(d.seen, s)
	return DemandInfo{}, nil
}

// A shared queue splits the work by what each site sees: the pilots it
// holds (visible or still on their way) and its idle nodes.
func TestTheQueueHearsThePilotsHeldAndTheIdleNodes(t *testing.T) {
	m := adaptertest.NewMemory(4)
	h := &hiding{Adapter: m}
	src := &recordingDemand{}
	r := NewReconciler(h, src, testConfig(), nil)
	ctx := context.Background()
	if _, err := r.Round(ctx); err != nil {
		t.Fatal(err)
	}
	h.hide.Store(true) // the 4 pilots are not listed yet: the ledger holds them
	if _, err := r.Round(ctx); err != nil {
		t.Fatal(err)
	}
	h.hide.Store(false)
	if _, err := r.Round(ctx); err != nil {
		t.Fatal(err)
	}
	want := []Seen{{Held: 0, Idle: 4}, {Held: 4, Idle: 4}, {Held: 4, Idle: 0}}
	if !reflect.DeepEqual(src.seen, want) {
		t.Fatalf("seen %+v, want %+v", src.seen, want)
	}
}

// A dump cut short by a crash (a temporary file, or a snapshot whose
// decision was never written) is removed at the next dump: the count of
// --dump-keep goes by decision files and never reached them, and each can
// be tens of MB.
func TestADumpCutShortByACrashIsRemovedAtTheNextDump(t *testing.T) {
	dir := t.TempDir()
	stale := []string{"snapshot-000000000001-000001.json.tmp", "snapshot-000000000002-000002.json",
		"snapshot-000000000002-000002.context.json"}
	kept := []string{"snapshot-000000000003-000003.json", "snapshot-000000000003-000003.context.json",
		"snapshot-000000000003-000003.decision.json"}
	for _, f := range append(stale, kept...) {
		if err := os.WriteFile(filepath.Join(dir, f), []byte("{}"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	cfg := testConfig()
	cfg.DumpDir = dir
	r := NewReconciler(adaptertest.NewMemory(3), nil, cfg, nil)
	if _, err := r.Round(context.Background()); err != nil {
		t.Fatal(err)
	}
	for _, f := range stale {
		if _, err := os.Stat(filepath.Join(dir, f)); !os.IsNotExist(err) {
			t.Errorf("%s is left: %v", f, err)
		}
	}
	for _, f := range kept {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			t.Errorf("a whole dump was removed: %v", err)
		}
	}
	if now, _ := filepath.Glob(filepath.Join(dir, "snapshot-*.decision.json")); len(now) != 2 {
		t.Errorf("decision files %v, want the old whole one and this round's", now)
	}
}

// TestFastPollWhilePilotsStandBetweenAJobAndOneEnd: the round after one
// that found a waiting job that one running job's end and the pilots
// could start comes after FastPoll; otherwise after PollInterval.
func TestFastPollWhilePilotsStandBetweenAJobAndOneEnd(t *testing.T) {
	m := adaptertest.NewMemory(10)
	m.AddJob(cluster.Job{ID: "1", User: "u", State: cluster.Running, Nodes: 6, TimeLimit: 3600})
	cfg := testConfig()
	cfg.PollInterval, cfg.FastPoll = 10*time.Second, 2*time.Second
	cfg.Policy.IdleMargin = 0 // no idle node here: the margin would release a pilot first
	r := NewReconciler(m, nil, cfg, nil)
	res, err := r.Round(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Submitted) != 4 || res.Watch || r.NextWait(res) != 10*time.Second {
		t.Fatalf("nobody waits: submitted %d, watch %v, next round in %v; want 4 pilots, false, 10s", len(res.Submitted), res.Watch, r.NextWait(res))
	}
	// An 8-node job: job 1's end and two pilots would start it.
	m.AddJob(cluster.Job{ID: "2", User: "u", State: cluster.Pending, Nodes: 8, TimeLimit: 3600})
	if res, err = r.Round(context.Background()); err != nil {
		t.Fatal(err)
	}
	if !res.Watch || r.NextWait(res) != 2*time.Second || len(res.Cancelled) != 0 {
		t.Fatalf("8-node job waiting: watch %v, next round in %v, cancelled %v; want true, 2s, none", res.Watch, r.NextWait(res), res.Cancelled)
	}
	// The fast poll is never slower than the poll.
	cfg.FastPoll = time.Minute
	if w := NewReconciler(m, nil, cfg, nil).NextWait(res); w != 10*time.Second {
		t.Errorf("fast poll above the poll: next round in %v, want the poll (10s)", w)
	}
	cfg.FastPoll = 0
	if w := NewReconciler(m, nil, cfg, nil).NextWait(res); w != 10*time.Second {
		t.Errorf("fast poll off: next round in %v, want the poll (10s)", w)
	}
	cfg.FastPoll = -time.Second
	if cfg.Validate() == nil {
		t.Error("a negative fast poll validated")
	}
}

// inProcess is a memory cluster that says it is in process
// (adapters.InProcess) and records whether its calls got a deadline; dup
// makes its snapshots show a job twice, which only the whole check finds.
type inProcess struct {
	*adaptertest.Memory
	says      bool
	dup       bool
	deadlines atomic.Int32
}

func (m *inProcess) InProcess() bool { return m.says }

func (m *inProcess) note(ctx context.Context) {
	if _, ok := ctx.Deadline(); ok {
		m.deadlines.Add(1)
	}
}

func (m *inProcess) Snapshot(ctx context.Context) (cluster.Snapshot, error) {
	m.note(ctx)
	s, err := m.Memory.Snapshot(ctx)
	if err == nil && m.dup && len(s.Jobs) > 0 {
		s.Jobs = append(s.Jobs, s.Jobs[0])
	}
	return s, err
}

func (m *inProcess) Submit(ctx context.Context, spec adapters.PilotSpec) (adapters.PilotID, error) {
	m.note(ctx)
	return m.Memory.Submit(ctx, spec)
}

// An adapter in process gets no deadline per call and its snapshots'
// jobs are not checked again (it checked them as it wrote them); the
// figures still are. Any other adapter gets both.
func TestAnAdapterInProcessGetsNoDeadlineAndOnlyItsFiguresChecked(t *testing.T) {
	for _, says := range []bool{false, true} {
		m := &inProcess{Memory: adaptertest.NewMemory(4), says: says}
		r := NewReconciler(m, nil, testConfig(), nil)
		res, err := r.Round(context.Background())
		if err != nil || len(res.Submitted) != 4 {
			t.Fatalf("in process %v: submitted %v, err %v", says, res.Submitted, err)
		}
		if got, want := m.deadlines.Load(), int32(5); says && got != 0 || !says && got != want {
			t.Fatalf("in process %v: %d calls with a deadline of 5", says, got)
		}
		m.dup = true
		_, err = r.Round(context.Background())
		if says && err != nil {
			t.Fatalf("in process: the jobs were checked again: %v", err)
		}
		if !says && !errors.Is(err, cluster.ErrInvalidSnapshot) {
			t.Fatalf("not in process: a job shown twice passed: %v", err)
		}
	}
}

// A preemptible pilot preempted before any snapshot listed it: with an
// adapter whose submits are visible at once (SLURM, HTCondor, the
// simulator), the next round counts it as gone and fills the node again;
// before, it counted as on its way for the ledger's TTL (300 s) and the
// node stayed idle (SDSC day 60 on the mini-cluster: one node of 16 idle
// for the whole preemption run).
func TestAPilotGoneBeforeAnySnapshotShowedItIsNotHeld(t *testing.T) {
	for _, visible := range []bool{true, false} {
		m := adaptertest.NewMemory(1)
		cfg := testConfig()
		cfg.SubmitsVisible = visible
		r := NewReconciler(m, nil, cfg, nil)
		res := round(t, r)
		if len(res.Submitted) != 1 {
			t.Fatalf("submitted %v on 1 idle node, want 1", res.Submitted)
		}
		m.End(string(res.Submitted[0])) // preempted within the poll
		m.Advance(2)
		res = round(t, r)
		if got, want := len(res.Submitted), map[bool]int{true: 1, false: 0}[visible]; got != want {
			t.Errorf("visible=%v: the next round submitted %d pilots on the idle node, want %d (upcoming %v)", visible, got, want, res.Upcoming)
		}
	}
}

// marksMaster is an adapter whose snapshots mark a pilot as the master's
// (a mark left from an earlier round, say): the agent's marks replace it.
type marksMaster struct{ *adaptertest.Memory }

func (m marksMaster) Snapshot(ctx context.Context) (cluster.Snapshot, error) {
	s, err := m.Memory.Snapshot(ctx)
	for i := range s.Jobs {
		if s.Jobs[i].Pilot {
			s.Jobs[i].Master = true
			break
		}
	}
	return s, err
}

// A round with no master and no busy map from the queue clears the
// adapter's master marks (enrich skips its pass only when there is none).
func TestTheQueuesMasterReplacesTheAdaptersMark(t *testing.T) {
	m := marksMaster{adaptertest.NewMemory(4)}
	r := NewReconciler(m, nil, testConfig(), nil)
	if _, err := r.Round(context.Background()); err != nil {
		t.Fatal(err)
	}
	ids := m.PilotIDs()
	for _, master := range []string{"", ids[len(ids)-1]} {
		r.src = StaticDemand{Info: DemandInfo{Master: master}}
		res, err := r.Round(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		pilots := 0
		for _, j := range res.Snapshot.Jobs {
			if j.Pilot {
				pilots++
				if j.Master != (j.ID == master) {
					t.Fatalf("the queue names master %q; the snapshot marks pilot %s master=%v", master, j.ID, j.Master)
				}
			}
		}
		if pilots == 0 {
			t.Fatal("no pilot in the snapshot")
		}
	}
}
