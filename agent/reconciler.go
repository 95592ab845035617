package agent

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/harvest-hpc/harvest/internal/jsonkeys"
	"log/slog"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/harvest-hpc/harvest/adapters"
	"github.com/harvest-hpc/harvest/agent/policy"
	"github.com/harvest-hpc/harvest/cluster"
)

// DemandInfo is what the queue tells the agent each round.
type DemandInfo struct {
	// Demand is the backlog; nil means unlimited (harvest every hole).
	Demand *cluster.Demand
	// Recommended is the master's MiniNode recommendation (0 = none).
	Recommended int
	// Busy maps pilot ids to whether their worker is running tasks.
	Busy map[string]bool
	// Master is the id of the pilot that hosts the master ("" = none).
	Master string
	// MinNodes and MaxNodes, when set, are the admin's runtime settings
	// (harvest admin nodes) and override the configured ones.
	MinNodes, MaxNodes *int
	// Paused stops new submissions (harvest admin pause); Drain, when
	// set, releases every pilot (harvest admin drain). Both are inputs of
	// the policy, so a dumped round replays them.
	Paused bool
	Drain  *policy.Drain
}

// EndSink is told the ends the agent pulled in, so that the pilots hear
// of them (the queue passes them to the master). A DemandSource may
// implement it.
type EndSink interface {
	PullIn(ctx context.Context, pilot string, end int64) error
}

// DemandSource is the queue as seen by the agent. Seen is what the agent
// sees of its cluster this round: a queue shared by several clusters
// splits the work by it.
type DemandSource interface {
	Demand(ctx context.Context, seen Seen) (DemandInfo, error)
}

// Seen is what a round saw before deciding.
type Seen struct {
	// Held is the pilot nodes held: visible pilots and those on their way.
	Held int
	// Idle is the cluster's idle nodes.
	Idle int
}

// StaticDemand is a DemandSource with a fixed answer: harvest-while-idle
// mode (nil Demand) or a fixed test backlog.
type StaticDemand struct{ Info DemandInfo }

// Demand implements DemandSource.
func (s StaticDemand) Demand(context.Context, Seen) (DemandInfo, error) { return s.Info, nil }

// RoundResult is what one round saw, decided and did.
type RoundResult struct {
	Snapshot cluster.Snapshot
	// Upcoming, Recommended, Paused and Drain are the rest of the
	// policy's input: with Snapshot, Decide(Input{...}) is Decision.
	Upcoming    []policy.Upcoming
	Recommended int
	Paused      bool
	Drain       *policy.Drain
	Decision    policy.Decision
	Submitted   []adapters.PilotID
	Cancelled   []string
	// Shrunk lists the pilots whose end was pulled in.
	Shrunk []string
	// Errors of individual actions (the round still counts as done).
	Errors []error
	// SubmitTimedOut is set when a submit timed out or its outcome is unknown.
	SubmitTimedOut bool
	// Latencies of the calls made, for metrics.
	SubmitLatency, CancelLatency []time.Duration
	// Watch says the next round should come after Config.FastPoll
	// (policy.Watch on the snapshot and decision).
	Watch bool

	decided policy.Decided
}

// Steady is policy.Steady on the round's input, from the walks Decide
// made of it (0 for a round without a decision); asked before the
// reconciler's next round, which reuses the walks' arrays.
func (r RoundResult) Steady() int64 { return r.decided.Steady() }

// NextWait is the time from a round that saw the cluster to the next:
// Config.FastPoll (at most PollInterval) after a round whose Watch is
// set, PollInterval otherwise.
func (r *Reconciler) NextWait(res RoundResult) time.Duration {
	if res.Watch && r.cfg.FastPoll > 0 {
		return min(r.cfg.FastPoll, r.cfg.PollInterval)
	}
	return r.cfg.PollInterval
}

// Reconciler runs rounds: snapshot, decide, act.
type Reconciler struct {
	ad     adapters.Adapter
	src    DemandSource
	cfg    Config
	log    *slog.Logger
	ledger *Ledger

	mu            sync.Mutex
	submitTimeout time.Duration
	last          *RoundResult
	// refNodes is the node count of the first snapshot (see plausible).
	refNodes int
	dumpSeq  int
	// OnRound, if set, is called after every round that got a snapshot.
	OnRound func(RoundResult)
	// Health, if set, learns whether the batch system answers.
	Health *Health
	// Wake, if set, brings the next round at once when it receives: the
	// hosting agent's queue sends when the master's recommendation or cap
	// changes (queue.PlanMoved), so pilots above a new cap go, and a
	// larger cap is filled, without waiting for the poll.
	Wake <-chan struct{}

	// events is the job-event count the last EventsMoved saw (seen: it
	// saw one); noEvents: the adapter does not count, the check is off.
	events         int64
	seen, noEvents bool

	// buf is the policy's arrays, reused round after round (rounds run
	// one at a time; a result's Steady holds until the next round).
	buf policy.Buffers
}

// EventsMoved asks the adapter's job-event count (Config.EventCheck) and
// reports whether it moved since the last ask; the first ask only takes
// the count. An adapter that does not count (adapters.ErrNotImplemented)
// turns the check off: ok false from then on, without asking again.
func (r *Reconciler) EventsMoved(ctx context.Context) (moved, ok bool, err error) {
	r.mu.Lock()
	off := r.noEvents || r.cfg.EventCheck <= 0
	r.mu.Unlock()
	jc, can := r.ad.(adapters.JobEventCounter)
	if off || !can {
		return false, false, nil
	}
	cctx, cancel := r.deadline(ctx, r.cfg.SnapshotTimeout)
	n, err := jc.JobEvents(cctx)
	cancel()
	r.mu.Lock()
	defer r.mu.Unlock()
	switch {
	case errors.Is(err, adapters.ErrNotImplemented):
		r.noEvents = true
		return false, false, nil
	case err != nil:
		return false, true, err
	}
	moved = r.seen && n != r.events
	r.events, r.seen = n, true
	return moved, true, nil
}

// NewReconciler returns a reconciler; cfg must be valid.
func NewReconciler(ad adapters.Adapter, src DemandSource, cfg Config, log *slog.Logger) *Reconciler {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if src == nil {
		src = StaticDemand{}
	}
	l := NewLedger(cfg.LedgerTTL)
	l.Visible = cfg.SubmitsVisible
	return &Reconciler{ad: ad, src: src, cfg: cfg, log: log, ledger: l, submitTimeout: cfg.SubmitTimeout}
}

// SubmitTimeout is the timeout the next submit will get.
func (r *Reconciler) SubmitTimeout() time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.submitTimeout
}

// Last returns the last round's result, if any.
func (r *Reconciler) Last() (RoundResult, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.last == nil {
		return RoundResult{}, false
	}
	return *r.last, true
}

// ErrNoSnapshot wraps the error of a round that could not see the cluster.
// Such a round changes nothing: never cancel because a snapshot failed.
var ErrNoSnapshot = errors.New("no snapshot")

// ErrImplausible marks a snapshot that contradicts the cluster the agent
// saw first by orders of magnitude: nothing is done on it.
var ErrImplausible = errors.New("snapshot too large to be true")

// plausibleFactor is how many times the first snapshot's node count (plus
// plausibleSlack) a later one may show before it is refused.
const (
	plausibleFactor = 10
	plausibleSlack  = 100
)

// plausible refuses a snapshot whose node count is orders of magnitude
// above the first one this agent decided on (a parser fooled by garbage,
// a wrong cluster): 3.3 M idle nodes once made it decide on 2,650,000
// pilots. The first snapshot sets the reference; a cluster that really
// grew that much needs an agent restart, which the error says.
func (r *Reconciler) plausible(s cluster.Snapshot) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.refNodes == 0 {
		r.refNodes = max(s.TotalNodes, 1)
		return nil
	}
	if limit := r.refNodes*plausibleFactor + plausibleSlack; s.TotalNodes > limit {
		return fmt.Errorf("%w: %d nodes, but the cluster had %d when the agent started (at most %d believed); nothing done (restart the agent if the cluster really grew)",
			ErrImplausible, s.TotalNodes, r.refNodes, limit)
	}
	return nil
}

// ErrBatchSystem marks a round's failure as the batch system's (no
// snapshot, or one that makes no sense), as opposed to the queue's.
var ErrBatchSystem = errors.New("batch system")

// Round runs one round. An error wrapping ErrNoSnapshot means nothing was
// done; other action errors are in the result.
func (r *Reconciler) Round(ctx context.Context) (RoundResult, error) {
	sctx, cancel := r.deadline(ctx, r.cfg.SnapshotTimeout)
	snap, err := r.ad.Snapshot(sctx)
	cancel()
	if err != nil {
		return RoundResult{}, fmt.Errorf("%w: %w: %w", ErrNoSnapshot, ErrBatchSystem, err)
	}
	validate := snap.Validate
	if r.inProcess() {
		validate = snap.ValidateFigures // the adapter checked its jobs (adapters.InProcess)
	}
	if err := validate(); err != nil {
		return RoundResult{}, fmt.Errorf("%w: %w: adapter returned %w", ErrNoSnapshot, ErrBatchSystem, err)
	}
	if err := r.plausible(snap); err != nil {
		return RoundResult{}, fmt.Errorf("%w: %w: %w", ErrNoSnapshot, ErrBatchSystem, err)
	}
	r.ledger.Observe(snap)
	sn, marked := seen(snap, r.ledger)
	dem, err := r.src.Demand(ctx, sn)
	if err != nil {
		// Without demand figures, harvesting blind could grab nodes nobody
		// uses; holding still is the safe choice.
		return RoundResult{}, fmt.Errorf("%w: queue: %w", ErrNoSnapshot, err)
	}
	r.enrich(&snap, dem, marked)

	pcfg := r.cfg.Policy
	// The jobs were validated above; enrich changed only figures (and
	// the pilots' busy and master marks).
	in := policy.Input{Snapshot: snap, Upcoming: r.ledger.Upcoming(), Recommended: dem.Recommended, Paused: dem.Paused, Drain: dem.Drain, JobsChecked: true}
	dec, decided := policy.DecideWith(in, pcfg, &r.buf)
	res := RoundResult{Snapshot: snap, Upcoming: in.Upcoming, Recommended: in.Recommended, Paused: in.Paused, Drain: in.Drain, Decision: dec,
		Watch: policy.Watch(snap, dec), decided: decided}
	r.dump(snap, dec, RoundContext{Config: &pcfg, Upcoming: in.Upcoming, Recommended: in.Recommended, Paused: in.Paused, Drain: in.Drain})

	if r.cfg.DryRun {
		r.log.Info("decision (dry run)", decisionAttrs(dec)...)
	} else {
		r.apply(ctx, &res)
	}
	r.mu.Lock()
	r.last = &res
	r.mu.Unlock()
	if r.OnRound != nil {
		r.OnRound(res)
	}
	return res, nil
}

// inProcess reports whether the adapter is the cluster itself, in this
// process (adapters.InProcess): its calls need no deadline and its
// snapshots' jobs are checked already.
func (r *Reconciler) inProcess() bool {
	ip, ok := r.ad.(adapters.InProcess)
	return ok && ip.InProcess()
}

// deadline is context.WithTimeout for a call of the adapter, and ctx
// itself for an adapter in process, whose calls never wait: a context and
// a timer per submit and cancel were a thirtieth of a simulated month.
func (r *Reconciler) deadline(ctx context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	if r.inProcess() {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, d)
}

// seen sums up a snapshot for the queue; marked: a pilot of it is marked
// as the master's.
func seen(s cluster.Snapshot, l *Ledger) (_ Seen, marked bool) {
	held := l.Len()
	for i := range s.Jobs {
		if j := &s.Jobs[i]; j.Pilot {
			held += j.Nodes
			marked = marked || j.Master
		}
	}
	return Seen{Held: held, Idle: s.IdleNodes}, marked
}

// enrich adds what the queue knows to the adapter's snapshot, so a dumped
// snapshot replays to the same decision. marked: a pilot of s is marked as
// the master's (seen).
func (r *Reconciler) enrich(s *cluster.Snapshot, d DemandInfo, marked bool) {
	if s.MinNodes == 0 {
		s.MinNodes = r.cfg.Policy.MinNodes
	}
	if s.MaxNodes == 0 {
		s.MaxNodes = r.cfg.Policy.MaxNodes
	}
	if d.MinNodes != nil {
		s.MinNodes = *d.MinNodes
	}
	if d.MaxNodes != nil {
		s.MaxNodes = *d.MaxNodes
	}
	if s.MaxNodes > 0 && s.MinNodes > s.MaxNodes {
		s.MinNodes = s.MaxNodes
	}
	s.Demand = d.Demand
	if d.Busy == nil && d.Master == "" && !marked {
		// Nothing to mark and no mark to clear (the simulator marks the
		// busy pilots itself): the pilots stay as they are.
		return
	}
	for i := range s.Jobs {
		j := &s.Jobs[i]
		if !j.Pilot {
			continue
		}
		if d.Busy != nil {
			j.Busy = d.Busy[j.ID]
		}
		j.Master = d.Master != "" && j.ID == d.Master
	}
}

func decisionAttrs(d policy.Decision) []any {
	attrs := []any{"case", d.Case, "reason", d.Reason}
	if d.Submit != nil {
		attrs = append(attrs, "submit", d.Submit.Count, "time_limit", d.Submit.TimeLimit.String())
		if d.Submit.Preemptible > 0 {
			attrs = append(attrs, "preemptible", d.Submit.Preemptible)
		}
	}
	if len(d.Release) > 0 {
		attrs = append(attrs, "release", strings.Join(d.Release, ","))
	}
	if len(d.Shrink) > 0 {
		attrs = append(attrs, "shrink", len(d.Shrink))
	}
	return attrs
}

func (r *Reconciler) apply(ctx context.Context, res *RoundResult) {
	dec := res.Decision
	// The per-pilot lines are built only for a logger that writes them:
	// their arguments cost an allocation each, thousands a simulated day.
	info := r.log.Enabled(ctx, slog.LevelInfo)
	if dec.Acts() {
		if info {
			r.log.Info("decision", decisionAttrs(dec)...)
		}
	} else if r.log.Enabled(ctx, slog.LevelDebug) {
		r.log.Debug("decision", decisionAttrs(dec)...)
	}
	if n := len(dec.Release); n > 0 {
		res.Cancelled, res.CancelLatency = make([]string, 0, n), make([]time.Duration, 0, n)
	}
	for _, id := range dec.Release {
		cctx, cancel := r.deadline(ctx, r.cfg.CancelTimeout)
		t0 := time.Now()
		err := r.ad.Cancel(cctx, adapters.PilotID(id))
		cancel()
		res.CancelLatency = append(res.CancelLatency, time.Since(t0))
		if err != nil {
			r.log.Error("cancel pilot failed", "pilot", id, "error", err, "reason", dec.Reason)
			res.Errors = append(res.Errors, fmt.Errorf("cancel %s: %w", id, err))
			continue
		}
		r.ledger.Forget(id)
		res.Cancelled = append(res.Cancelled, id)
		if info {
			r.log.Info("released pilot", "pilot", id, "case", dec.Case)
		}
	}
	for _, sh := range dec.Shrink {
		cctx, cancel := r.deadline(ctx, r.cfg.CancelTimeout)
		err := r.ad.Shrink(cctx, adapters.PilotID(sh.ID), sh.End)
		cancel()
		if err != nil {
			r.log.Error("pulling in a pilot's end failed", "pilot", sh.ID, "end", sh.End, "error", err)
			res.Errors = append(res.Errors, fmt.Errorf("shrink %s: %w", sh.ID, err))
			continue
		}
		res.Shrunk = append(res.Shrunk, sh.ID)
		if sink, ok := r.src.(EndSink); ok {
			if err := sink.PullIn(ctx, sh.ID, sh.End); err != nil {
				r.log.Warn("could not tell the pilot its new end", "pilot", sh.ID, "error", err)
			}
		}
		r.log.Info("pulled in a pilot's end", "pilot", sh.ID, "end", time.Unix(sh.End, 0).UTC(), "in", time.Duration(sh.End-res.Snapshot.Now)*time.Second)
	}
	if dec.Submit == nil {
		return
	}
	spec := adapters.PilotSpec{
		TimeLimit:    dec.Submit.TimeLimit,
		MinTimeLimit: dec.Submit.MinTimeLimit,
		Command:      r.cfg.PilotCommand,
		Env:          r.cfg.PilotEnv,
		WorkDir:      r.cfg.PilotWorkDir,
		Output:       r.cfg.PilotOutput,
	}
	n := dec.Submit.Count
	if max := r.cfg.MaxSubmitPerRound; max > 0 && n > max {
		// The rest come in the next rounds, if the snapshots still want
		// them: a decision for 2,650,000 pilots is not carried out at once.
		r.log.Warn("submitting fewer pilots than decided this round (--max-submit-per-round)", "decided", n, "submitting", max)
		n = max
	}
	res.Submitted, res.SubmitLatency = make([]adapters.PilotID, 0, n), make([]time.Duration, 0, n)
	for i := 0; i < n; i++ {
		// The first go to the floor, the rest to the preemptible tier.
		spec.Preemptible = i >= dec.Submit.Count-dec.Submit.Preemptible
		timeout := r.SubmitTimeout()
		sctx, cancel := r.deadline(ctx, timeout)
		t0 := time.Now()
		id, err := r.ad.Submit(sctx, spec)
		// A timeout is the agent's own deadline passing (or the adapter's
		// saying so); other unknown outcomes (a lost reply, a killed
		// sbatch) say nothing about a slow batch system.
		timedOut := errors.Is(sctx.Err(), context.DeadlineExceeded) || errors.Is(err, context.DeadlineExceeded)
		cancel()
		res.SubmitLatency = append(res.SubmitLatency, time.Since(t0))
		switch {
		case err == nil:
			r.ledger.Submitted(id, spec.TimeLimit, spec.Preemptible, res.Snapshot.Now)
			res.Submitted = append(res.Submitted, id)
			r.setSubmitTimeout(r.cfg.SubmitTimeout)
			if info {
				r.log.Info("submitted pilot", "pilot", id, "time_limit", spec.TimeLimit.String(), "preemptible", spec.Preemptible, "case", dec.Case)
			}
		case timedOut || errors.Is(err, adapters.ErrOutcomeUnknown):
			// The pilot may exist: count it as held until a snapshot tells.
			r.ledger.Unknown(spec.TimeLimit, spec.Preemptible, res.Snapshot.Now)
			res.SubmitTimedOut = true
			if timedOut {
				next := timeout + r.cfg.SubmitTimeoutStep
				r.setSubmitTimeout(next)
				r.log.Warn("submit timed out; ending the round", "timeout", timeout, "next_timeout", next, "error", err)
			} else {
				r.log.Warn("submit outcome unknown (the pilot may exist; the next snapshot tells); ending the round", "error", err)
			}
			res.Errors = append(res.Errors, err)
			return
		default:
			r.log.Error("submit failed; ending the round", "error", err)
			res.Errors = append(res.Errors, err)
			return
		}
	}
}

func (r *Reconciler) setSubmitTimeout(d time.Duration) {
	r.mu.Lock()
	r.submitTimeout = d
	r.mu.Unlock()
}

// RoundContext is what a round decided on besides the snapshot: written
// next to each dumped snapshot so `harvest decide --context` replays the
// round exactly.
type RoundContext struct {
	Config      *policy.Config    `json:"config,omitempty"`
	Upcoming    []policy.Upcoming `json:"upcoming"`
	Recommended int               `json:"recommended"`
	Paused      bool              `json:"paused,omitempty"`
	Drain       *policy.Drain     `json:"drain,omitempty"`
}

// Input is the policy input of the round: the snapshot with this context.
func (rc RoundContext) Input(s cluster.Snapshot) policy.Input {
	return policy.Input{Snapshot: s, Upcoming: rc.Upcoming, Recommended: rc.Recommended, Paused: rc.Paused, Drain: rc.Drain}
}

// ReadRoundContext reads a *.context.json file.
func ReadRoundContext(path string) (RoundContext, error) {
	var rc RoundContext
	b, err := os.ReadFile(path)
	if err != nil {
		return rc, fmt.Errorf("read round context: %w", err)
	}
	if err := jsonkeys.For(reflect.TypeOf(rc), false).Check(b); err != nil {
		return rc, fmt.Errorf("%s: not a round context: %w", path, err)
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&rc); err != nil {
		return rc, fmt.Errorf("%s: not a round context: %w", path, err)
	}
	if rc.Config != nil {
		if err := rc.Config.Validate(); err != nil {
			return rc, fmt.Errorf("%s: %w", path, err)
		}
	}
	if rc.Recommended < 0 {
		return rc, fmt.Errorf("%s: recommended %d is negative", path, rc.Recommended)
	}
	return rc, nil
}

// dump writes the snapshot (the `harvest decide` format), the round's
// context and the decision.
func (r *Reconciler) dump(s cluster.Snapshot, d policy.Decision, rc RoundContext) {
	if r.cfg.DumpDir == "" {
		return
	}
	r.mu.Lock()
	r.dumpSeq++
	seq := r.dumpSeq
	r.mu.Unlock()
	// Names sort in the order the rounds ran: batch-system time, then a
	// sequence number for rounds within the same second.
	base := filepath.Join(r.cfg.DumpDir, fmt.Sprintf("snapshot-%012d-%06d", s.Now, seq%1_000_000))
	if err := writeSnapshot(base+".json", s); err != nil {
		r.log.Warn("dump snapshot failed", "error", err)
		return
	}
	if err := writeJSON(base+".context.json", rc); err != nil {
		r.log.Warn("dump round context failed", "error", err)
	}
	if err := writeJSON(base+".decision.json", d); err != nil {
		r.log.Warn("dump decision failed", "error", err)
	}
	r.pruneDumps(base)
}

func writeJSON(path string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, append(b, '\n'), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

func (r *Reconciler) pruneDumps(current string) {
	// What a crash (or a full disk) cut short is removed first: a
	// temporary file, or a snapshot whose decision was never written.
	// The count below goes by decision files and would never reach them,
	// and a large cluster's snapshot is tens of MB.
	if all, err := filepath.Glob(filepath.Join(r.cfg.DumpDir, "snapshot-*")); err == nil {
		for _, f := range all {
			stem := strings.TrimSuffix(strings.TrimSuffix(strings.TrimSuffix(f, ".tmp"), ".json"), ".context")
			stem = strings.TrimSuffix(stem, ".decision")
			if _, err := os.Stat(stem + ".decision.json"); strings.HasSuffix(f, ".tmp") || stem != current && os.IsNotExist(err) {
				os.Remove(f)
			}
		}
	}
	if r.cfg.DumpKeep <= 0 {
		return
	}
	files, err := filepath.Glob(filepath.Join(r.cfg.DumpDir, "snapshot-*.decision.json"))
	if err != nil || len(files) <= r.cfg.DumpKeep {
		return
	}
	sort.Strings(files)
	for _, f := range files[:len(files)-r.cfg.DumpKeep] {
		os.Remove(f)
		stem := strings.TrimSuffix(f, ".decision.json")
		os.Remove(stem + ".json")
		os.Remove(stem + ".context.json")
	}
}
