// Package policy is the scaling policy of the harvest agent: a pure
// function from a cluster snapshot (plus the ledger of pilots on their way
// and the master's recommendation) to a decision: submit pilots, release
// pilots, or do nothing. It does no I/O, reads no clock (the snapshot's Now
// is the time) and draws no random numbers, so any decision the agent took
// can be replayed with `harvest decide` and become a regression fixture.
//
// The algorithm is the one of DESIGN.md ("The scaling policy"); docs/policy.md
// explains it for operators.
package policy

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/harvest-hpc/harvest/cluster"
)

// Decide runs one round of the policy.
//
// Symbols: I idle nodes, R nodes held by our pilots, J_top the top pending
// foreign job needing N_top nodes, MiniNode the minimum the harvest keeps.
//
// Where the figures come from:
//   - R counts running pilots, queued pilots and the ledger (in.Upcoming):
//     everything already asked for, so nothing is submitted twice.
//   - I is the snapshot's idle nodes minus the nodes the queued and ledger
//     pilots will take, never below zero. Planned nodes (idle, but kept by
//     the backfill scheduler for a pending job) are part of the idle nodes:
//     a pilot there ends before the reservation, as any pilot does.
//   - The floor is the snapshot's min_nodes if non-zero, else cfg.MinNodes;
//     the cap is the snapshot's max_nodes if non-zero, else cfg.MaxNodes.
//   - The backlog cap is ceil((pending+running tasks)/slots_per_node) from
//     the snapshot's demand (slots_per_node 0 is read as 1); no demand, or
//     cfg.HarvestWhileIdle, means an unlimited backlog.
//   - MiniNode = max(floor, in.Recommended), capped by the cap and by the
//     backlog cap: pilots the backlog cannot use are never kept.
//   - Keep, the count no release goes below, is the floor (capped the same
//     way), or MiniNode with cfg.KeepRecommended. The master's
//     recommendation makes the harvest take idle nodes sooner (case 2) but
//     does not hold nodes a waiting job could use: only the admin's floor
//     does. DESIGN.md's cases 3 and 5 read "R - MiniNode"; with the
//     default, read "R - Keep", and case 2 yields to case 3 when J_top can
//     start by releasing pilots above Keep.
//   - Pilot limits are capped by cfg.MaxPilotLimit and the snapshot's
//     max_time_s (the partition's MaxTime) and rounded down to
//     cfg.Granularity.
//
// The round, first match wins:
//
//	caps   R above the cap: release the excess (any pilots);
//	       R above the backlog cap: release idle pilots (queued or not busy);
//	1      no pending foreign job: submit I pilots with the longest limit allowed;
//	2      R < MiniNode: submit I pilots with limit maxTime - margin
//	       (unless 0 < N_top - I <= R - Keep, or case 5 would release
//	       for a backfill job: then those cases act);
//	3      N_top - I <= 0: J_top starts by itself; do nothing;
//	       N_top - I <= R - Keep: release N_top - I pilots so J_top starts now;
//	4      a running job ends within miniTime: wait for its nodes;
//	5      for each pending foreign job J_i with TL_i < maxTime, in priority order:
//	       N_i <= I: the batch system backfills it, do nothing;
//	       N_i - I <= R - Keep: release N_i - I pilots;
//	6      submit I pilots with limit maxTime - margin.
//
// Submissions never exceed I, the cap or the backlog cap, and are skipped
// when the limit is not positive. An invalid snapshot, ledger or config
// yields CaseInvalidInput and no action; Decide never panics on it.
func Decide(in Input, cfg Config) Decision {
	d, _ := DecideShared(in, cfg)
	return d
}

// Decided is a round's input after Decide, with the walks Decide made of
// it: its Steady is Steady(in, cfg) without walking the queue again (the
// simulator asks it after every round that did nothing).
type Decided struct {
	v *view // nil: the input was invalid
}

// DecideShared is Decide, and the round for Steady.
func DecideShared(in Input, cfg Config) (Decision, Decided) {
	return DecideWith(in, cfg, nil)
}

// DecideWith is DecideShared working in buf's arrays (nil: fresh ones);
// see Buffers.
func DecideWith(in Input, cfg Config, buf *Buffers) (Decision, Decided) {
	d := Decision{Release: []string{}, MaxTime: cluster.Unlimited}
	if err := validateInput(&in, cfg); err != nil {
		d.Case = CaseInvalidInput
		d.Reason = "nothing done: " + err.Error()
		return d, Decided{}
	}
	v := newView(&in, cfg)
	v.buf = buf
	d.Held, d.Idle, d.MinNodes, d.KeepNodes = v.held, v.idle, v.miniNode, v.keep
	if in.Drain != nil {
		return v.drain(d, *in.Drain), Decided{v}
	}
	d = v.decide(d)
	if in.Paused && d.Submit != nil {
		d.Submit, d.Case = nil, CasePaused
		d.Reason = "paused by the admin; would have: " + d.Reason
	}
	return d, Decided{v}
}

// Steady is Steady on the round's input (0 for an invalid one).
func (x Decided) Steady() int64 {
	if x.v == nil {
		return 0
	}
	return x.v.steady()
}

func validateInput(in *Input, cfg Config) error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	check := in.Snapshot.Validate
	if in.JobsChecked {
		check = in.Snapshot.ValidateFigures
	}
	if err := check(); err != nil {
		return err
	}
	if mt := in.Snapshot.MaxTime; mt != nil && (*mt == 0 || *mt < cluster.Unlimited) {
		return fmt.Errorf("%w: max_time_s must be positive or null, got %d", cluster.ErrInvalidSnapshot, int64(*mt))
	}
	for _, u := range in.Upcoming {
		if err := u.validate(); err != nil {
			return err
		}
	}
	if in.Recommended < 0 {
		return fmt.Errorf("%w: recommended nodes %d is negative", ErrInvalidConfig, in.Recommended)
	}
	return nil
}

// view holds the figures of one round, derived once from the input.
type view struct {
	in  *Input
	s   *cluster.Snapshot
	cfg Config

	top       int // index of J_top in s.Jobs, -1 if none
	held      int // R
	idle      int // I
	onTheWay  int // queued + ledger pilots
	maxNodes  int // 0 = no cap
	demandCap int // -1 = unlimited backlog
	left      int // pending + running tasks (when demandCap >= 0)
	miniNode  int
	keep      int // no release goes below this
	limitCap  cluster.Limit
	hold      holding // the pilots as the maxTime walk sees them

	// Shared by the round's walks (walk.go), built on first use: what
	// they read of the snapshot, and the batch system's walk without
	// releases.
	base           *walkBase
	batch0, ideal0 *walked
	buf            *Buffers // the arrays to work in (nil: fresh ones)
	rel0           []int    // releasable's answer, once relDone
	relDone        bool
	maxTime0       *cluster.Limit
	// endCap is the end holeLimit last ended new pilots at (aheadNeed).
	endCap int64
	// need0 is the ideal walk's unreservedNeed for needN new pilots
	// (needN 0: not asked yet): Decide's holeLimit and Steady's ask it.
	need0 int64
	needN int

	// What a waiting foreign job sees (see Config.Preemption): the idle
	// nodes it may take (idleF), the nodes the batch system frees for it
	// by preempting pilots (schedFree, 0 when polling), and how many
	// pilots above Keep only we can release for it (spare).
	idleF     int
	schedFree int
	spare     int
	// floorHeld counts the pilots outside the preemptible tier (all of
	// them when polling): a submission first brings them up to Keep.
	floorHeld int
	// keepIdle is how many idle nodes a submission leaves free
	// (Config.IdleMargin while a foreign job waits).
	keepIdle int
	// What Steady reads of the running jobs and queued pilots, gathered in
	// newView's pass (a pass of its own over every job was a thirtieth of
	// a simulated month).
	ends ends
}

// ends is the soonest end among the running jobs (first: the least
// remaining limit above 0; pastMini: the least above Config.MiniTime;
// Unlimited: none), and whether a pilot is queued.
type ends struct {
	first, pastMini cluster.Limit
	queuedPilot     bool
	overdue         bool // a running job is past its limit (overdue: it ends at 1 s)
}

func (e *ends) add(r cluster.Limit, mini int64) {
	if r == 0 {
		e.overdue = true
	}
	if r.IsUnlimited() || r <= 0 {
		return
	}
	e.first = e.first.Min(r)
	if int64(r) > mini {
		e.pastMini = e.pastMini.Min(r)
	}
}

func newView(in *Input, cfg Config) *view {
	s := &in.Snapshot
	v := &view{in: in, s: s, cfg: cfg, top: -1, demandCap: -1, ends: ends{first: cluster.Unlimited, pastMini: cluster.Unlimited}}
	running := 0
	ownOnTheWay := 0 // queued and ledger pilots outside the preemptible tier
	for i := range s.Jobs {
		j := &s.Jobs[i]
		if j.State == cluster.Running {
			v.ends.add(j.Remaining(), cfg.MiniTime)
		}
		if !j.Pilot {
			if v.top < 0 && j.State == cluster.Pending {
				v.top = i // topPending(s), in this pass
			}
			continue
		}
		if j.State == cluster.Pending {
			v.ends.queuedPilot = true
		}
		tier := cfg.Preemption && j.Preemptible
		switch {
		case j.State == cluster.Running:
			running += j.Nodes
			if tier {
				v.schedFree += j.Nodes
			}
		default:
			v.onTheWay += j.Nodes
			if !tier {
				ownOnTheWay += j.Nodes
			}
		}
		if !tier {
			v.floorHeld += j.Nodes
		}
	}
	for _, u := range in.Upcoming {
		v.onTheWay += u.Count
		if !(cfg.Preemption && u.Preemptible) {
			ownOnTheWay += u.Count
			v.floorHeld += u.Count
		}
	}
	v.held = running + v.onTheWay
	v.idle = max(0, s.IdleNodes-v.onTheWay)
	// Queued pilots of the preemptible tier never compete with a foreign
	// job for an idle node (the foreign job's partition goes first).
	v.idleF = max(0, s.IdleNodes-ownOnTheWay)

	v.maxNodes = cfg.MaxNodes
	if s.MaxNodes > 0 {
		v.maxNodes = s.MaxNodes
	}
	floor := cfg.MinNodes
	if s.MinNodes > 0 {
		floor = s.MinNodes
	}
	if s.Demand != nil && !cfg.HarvestWhileIdle {
		slots := max(1, s.Demand.SlotsPerNode)
		v.left = s.Demand.PendingTasks + s.Demand.RunningTasks
		v.demandCap = (v.left + slots - 1) / slots
	}
	capped := func(n int) int {
		if v.maxNodes > 0 {
			n = min(n, v.maxNodes)
		}
		if v.demandCap >= 0 {
			n = min(n, v.demandCap)
		}
		return n
	}
	v.miniNode = capped(max(floor, in.Recommended))
	v.keep = capped(floor)
	if cfg.KeepRecommended {
		v.keep = v.miniNode
	}
	v.limitCap = cfg.MaxPilotLimit.Min(s.PartitionMaxTime())
	if v.top >= 0 {
		v.hold = newHolding(s.Jobs, in.Upcoming, v.keep, cfg.Preemption)
	}
	// Pilots above Keep that we release for a waiting job: all of them
	// when polling; in preemption mode only those outside the preemptible
	// tier (the batch system preempts the others).
	v.spare = max(0, v.held-v.keep)
	if cfg.Preemption {
		v.spare = max(0, v.floorHeld-v.keep)
	}
	return v
}

func (v *view) decide(d Decision) Decision {
	if v.maxNodes > 0 && v.held > v.maxNodes {
		if ids := v.pickRelease(v.held-v.maxNodes, true, false); len(ids) > 0 {
			d.Release, d.Case = ids, CaseAboveMaxNodes
			d.Reason = fmt.Sprintf("pilots hold %s, above the maximum of %d: releasing %s",
				nodesWord(v.held), v.maxNodes, pilotsWord(len(ids)))
			return d
		}
	}
	if v.demandCap >= 0 && v.held > v.demandCap {
		if ids := v.pickRelease(v.held-v.demandCap, false, false); len(ids) > 0 {
			d.Release = ids
			if v.left == 0 {
				d.Case = CaseNoDemand
				d.Reason = fmt.Sprintf("the harvest backlog is empty: releasing %s with no task running", pilotsWord(len(ids)))
			} else {
				d.Case = CaseAboveDemand
				d.Reason = fmt.Sprintf("the backlog of %d tasks can use %d nodes but pilots hold %d: releasing %s with no task running",
					v.left, v.demandCap, v.held, pilotsWord(len(ids)))
			}
			return d
		}
	}

	// Case 1.
	if v.top < 0 {
		return v.submit(d, CaseNoPendingJob, cluster.Unlimited, 0, "no foreign job is pending")
	}
	top := &v.s.Jobs[v.top]
	mt := v.maxTime(top)
	d.TopJob, d.MaxTime = top.ID, mt
	return v.withShrink(v.decideTop(d, top, mt), top, mt)
}

// decideTop is the round from case 2 on, J_top pending and mt its start.
// Cases 3 and 5 are one walk of the pending queue (see walk.go): every job
// the cluster would start now without the pilots above the floor gets its
// nodes in this round.
func (v *view) decideTop(d Decision, top *cluster.Job, mt cluster.Limit) Decision {
	ideal := v.ideal()
	ids, batchStarts, enough, plan := v.releaseFor(ideal)
	topStarts := len(ideal.starts) > 0 && ideal.starts[0] == v.top

	// Cases 3 and 5: release for every job that can start now, and the
	// pilots whose limits would let the batch system start a job that
	// would delay J_top.
	if len(ids) > 0 {
		if !batchStarts {
			d.Release, d.Case = ids, CaseReleaseForBackfill
			if topStarts {
				d.Case = CaseReleaseForTopJob
			}
			d.Reason = fmt.Sprintf("%s %s now (%s, %d idle) if pilots above the minimum of %d make way: releasing %s%s",
				v.jobsPhrase(ideal.starts), canStart(len(ideal.starts)), nodesWord(ideal.nodes), v.idleF, v.keep, pilotsWord(len(ids)), v.preemptClause())
			if !enough {
				d.Reason += " (not enough yet: the other pilots are at the minimum or not visible yet)"
			}
			if plan > 0 {
				d.Reason += fmt.Sprintf(", %d of them for their limits, which push job %s's start later in the batch system's plan", plan, top.ID)
			}
			return d
		}
		d.Release, d.Case = ids, CaseReleaseForPlan
		d.Reason = fmt.Sprintf("pilots holding nodes past when job %s can start %s make the batch system plan it later, so it would backfill jobs that delay it: releasing the %s with the longest limits",
			top.ID, inTime(mt), pilotsWord(len(ids)))
		return d
	}

	// The same at the ends within miniTime: release now what the batch
	// system's pass at the end would need (ahead.go).
	if a := v.releaseAhead(); len(a.ids) > 0 {
		d.Release, d.Case = a.ids, CaseReleaseBeforeEnd
		d.Reason = fmt.Sprintf("%s (%s) %s in %s, when %s its limit, if pilots above the minimum of %d make way: releasing %s now%s",
			v.jobsPhrase(a.starts), nodesWord(a.nodes), canStart(len(a.starts)), fmtLimit(cluster.Limit(a.at)),
			v.endingPhrase(a.at), v.keep, pilotsWord(len(a.ids)), v.preemptClause())
		if !a.enough {
			d.Reason += " (not enough yet: the other pilots are at the minimum or not visible yet)"
		}
		return d
	}

	// The idle margin: arrivals and backfill take these at once.
	if ids, need := v.marginRelease(ideal, batchStarts); len(ids) > 0 {
		d.Release, d.Case = ids, CaseReleaseForMargin
		d.Reason = fmt.Sprintf("job %s waits and %d nodes are idle, fewer than the margin of %d: releasing %s so that a job that arrives, or one a backfill pass may start, finds %s free",
			top.ID, v.cfg.IdleMargin-need, v.cfg.IdleMargin, pilotsWord(len(ids)), nodesWord(v.cfg.IdleMargin))
		return d
	}
	if !v.cfg.Preemption {
		v.keepIdle = v.cfg.IdleMargin
	}

	// Case 2: fewer pilots than MiniNode and nobody to release for.
	if v.held < v.miniNode {
		why := fmt.Sprintf("pilots hold %s, below the minimum of %d, and job %s can start %s",
			nodesWord(v.held), v.miniNode, top.ID, inTime(mt))
		hl := v.holeLimit(ideal, mt)
		return v.submit(d, CaseBelowMinNodes, hl, v.cfg.Margin, why+v.endClause(hl))
	}

	if len(ideal.starts) > 0 && batchStarts {
		who, n := v.jobsPhrase(ideal.starts), len(ideal.starts)
		switch {
		case ideal.nodes > v.idleF && v.schedFree > 0:
			d.Case = CaseSchedulerPreempts
			how := "starts " + themWord(n) + " by preempting"
			if !topStarts {
				how = "backfills " + themWord(n) + " by preempting"
			}
			d.Reason = fmt.Sprintf("%s %s %s, %s more than the %d idle: the batch system %s up to that many of the %d preemptible pilots",
				who, needsWord(n), nodesWord(ideal.nodes), nodesWord(ideal.nodes-v.idleF), v.idleF, how, v.schedFree)
		case topStarts:
			d.Case = CaseTopJobFits
			d.Reason = fmt.Sprintf("%s %s %s and %d are idle: the batch system starts %s",
				who, needsWord(n), nodesWord(ideal.nodes), v.idleF, themWord(n))
		default:
			d.Case = CaseBackfillWillStart
			d.Reason = fmt.Sprintf("%s %s %s and %d are idle before job %s can start %s: the batch system backfills %s",
				who, needsWord(n), nodesWord(ideal.nodes), v.idleF, top.ID, inTime(mt), themWord(n))
		}
		return d
	}

	// Case 4.
	if j := v.endingSoon(); j != nil {
		d.Case = CaseJobEndingSoon
		d.Reason = fmt.Sprintf("job %s ends within %s (mini time %s): waiting for the nodes it frees",
			j.ID, fmtLimit(j.Remaining()), fmtLimit(cluster.Limit(v.cfg.MiniTime)))
		return d
	}

	// Case 6.
	why := fmt.Sprintf("no pending job fits in the hole before job %s can start %s", top.ID, inTime(mt))
	hl := v.holeLimit(ideal, mt)
	return v.submit(d, CaseFillHole, hl, v.cfg.Margin, why+v.endClause(hl))
}

// holeLimit is how long new pilots on the idle nodes may run without
// delaying any job of the ideal walk: until the free nodes of its plan
// (reservations taken) drop below the pilots' count; and no longer than
// the batch system's own plan lets them start now (a pilot that does not
// fit it would only wait in the queue). The batch system's expected start
// of J_top (mt, with Config.UseExpectedStart) bounds it when earlier than
// the walk's.
func (v *view) holeLimit(ideal walked, mt cluster.Limit) cluster.Limit {
	n := v.idle
	if room, _, _ := v.room(); room < n {
		n = room
	}
	n = max(n, 1)
	b := v.batch(nil)
	t := min(ideal.plan.firstShort(n), b.plan.firstShort(n))
	// No pilot outlives J_top's start, even on nodes the plan leaves it:
	// when a running job ends before its limit, J_top can start earlier
	// and needs them, and a pilot the batch system sees running past that
	// makes it plan J_top later and backfill, before our next round, a job
	// that then delays J_top for its whole limit (KTH-SP2: a 33-node job
	// backfilled the second a 40-node job ended early, J_top 1.5 h late).
	t = min(t, ideal.topAt)
	t = min(t, v.idealNeed(n))
	v.endCap = v.aheadNeed(n)
	t = min(t, v.endCap)
	l := cluster.Unlimited
	if t != never {
		l = cluster.Limit(t)
	}
	if v.cfg.UseExpectedStart && !mt.IsUnlimited() && (ideal.topAt == never || int64(mt) < ideal.topAt) {
		l = l.Min(mt)
	}
	return l
}

// jobsPhrase names the jobs of a walk: "job 3", "jobs 3 and 4",
// "jobs 3, 4, 5 and 2 more".
func (v *view) jobsPhrase(idx []int) string {
	const shown = 3
	var names []string
	for k, i := range idx {
		if k == shown {
			break
		}
		names = append(names, v.s.Jobs[i].ID)
	}
	switch {
	case len(idx) == 1:
		return "job " + names[0]
	case len(idx) <= shown:
		return "jobs " + strings.Join(names[:len(names)-1], ", ") + " and " + names[len(names)-1]
	}
	return fmt.Sprintf("jobs %s and %d more", strings.Join(names, ", "), len(idx)-shown)
}

func canStart(n int) string {
	if n == 1 {
		return "can start"
	}
	return "can all start"
}

func needsWord(n int) string {
	if n == 1 {
		return "needs"
	}
	return "need"
}

func themWord(n int) string {
	if n == 1 {
		return "it"
	}
	return "them"
}

// preemptClause adds, in preemption mode, that the batch system preempts
// the rest: " (the batch system preempts 2 more)".
func (v *view) preemptClause() string {
	if v.schedFree == 0 {
		return ""
	}
	return fmt.Sprintf(" (the batch system preempts up to %d preemptible ones)", v.schedFree)
}

// submit fills the idle nodes with pilots of limit base - margin (base
// Unlimited: the longest allowed), within the caps. why starts the reason.
func (v *view) submit(d Decision, c Case, base cluster.Limit, margin int64, why string) Decision {
	limit := cluster.Unlimited
	short := false
	if !base.IsUnlimited() {
		// Subtract before capping: a negative Limit would read as Unlimited.
		if l := int64(base) - margin; l > 0 {
			limit = cluster.Limit(l)
		} else {
			short = true
		}
	}
	if !short {
		limit = roundDown(limit.Min(v.limitCap), v.cfg.Granularity)
		short = limit == 0
	}
	room, capCase, capWhy := v.room()
	// The margin stays idle, except for pilots the admin's floor still lacks.
	free := max(v.idle-v.keepIdle, min(v.idle, v.keep-v.held))
	switch {
	case v.idle == 0:
		d.Case = CaseNoIdleNodes
		d.Reason = why + ", but no idle node is left to take"
	case free <= 0:
		d.Case = CaseNoIdleNodes
		d.Reason = fmt.Sprintf("%s, but the %d idle are the margin kept free while a job waits", why, v.idle)
	case short:
		d.Case = CaseHoleTooShort
		d.Reason = fmt.Sprintf("%s, but that leaves no whole %s of pilot time after the %s margin",
			why, fmtLimit(cluster.Limit(v.cfg.Granularity)), fmtLimit(cluster.Limit(margin)))
	case room <= 0:
		d.Case = capCase
		d.Reason = why + ", but " + capWhy
	default:
		n := min(free, room)
		d.Submit = &Submit{Count: n, TimeLimit: limit}
		d.Case = c
		d.Reason = fmt.Sprintf("%s: submitting %s with %s", why, pilotsWord(n), limitPhrase(limit))
		switch {
		case n < free:
			d.Reason += fmt.Sprintf(" on %d of the %d idle nodes, as %s", n, v.idle, capWhy)
		case n < v.idle:
			d.Reason += fmt.Sprintf(" on %d of the %d idle nodes, keeping a margin of %d free while a job waits", n, v.idle, v.keepIdle)
		}
		if v.cfg.Preemption {
			// The first pilots bring the floor up to Keep; the rest go to
			// the preemptible tier.
			floor := min(n, max(0, v.keep-v.floorHeld))
			d.Submit.Preemptible = n - floor
			d.Reason += fmt.Sprintf(", %d of them preemptible", d.Submit.Preemptible)
		}
		if m := v.cfg.MinPilotLimit; m > 0 && compareLimit(m, limit) < 0 {
			d.Submit.MinTimeLimit = m
			d.Reason += fmt.Sprintf(" the batch system may shorten to %s to fit its own plan", fmtLimit(m))
		}
	}
	return d
}

// withShrink adds to d the pilots whose end to pull in (Config.Shrink):
// J_top cannot start now but will at mt, and some running pilots above
// the floor would still hold nodes it needs then. Rather than cancel them
// when it can start (losing their tasks; polling also loses a round),
// their ends move to mt - ShrinkMargin from now: the master plans no
// batch past the new end, the pilots leave by themselves, and the batch
// system sees the nodes free at mt in its own plan. Releases take
// precedence: a round that releases shrinks nothing.
func (v *view) withShrink(d Decision, top *cluster.Job, mt cluster.Limit) Decision {
	if !v.cfg.Shrink || len(d.Release) > 0 || mt.IsUnlimited() || int64(mt) <= v.cfg.ShrinkMargin {
		return d
	}
	target := cluster.Limit(int64(mt) - v.cfg.ShrinkMargin)
	// Nodes J_top finds at mt without the pilots that would still run.
	entries, taken := v.hold.claims(v.s, v.in.Upcoming, v.cfg.Preemption, nil)
	avail := v.s.IdleNodes - taken
	for _, e := range v.runningHolders(entries) {
		if compareLimit(e.after, mt) <= 0 {
			avail += e.nodes
		}
	}
	floor := map[string]bool{}
	for _, p := range v.hold.floor {
		floor[p.ID] = true
	}
	var inTheWay []cluster.Job
	for i := range v.s.Jobs {
		p := v.s.Jobs[i]
		if !p.Pilot || p.State != cluster.Running || floor[p.ID] {
			continue
		}
		if compareLimit(p.Remaining(), target) <= 0 {
			avail += p.Nodes // ends before J_top needs it anyway
			continue
		}
		inTheWay = append(inTheWay, p)
	}
	need := top.Nodes - avail
	for _, p := range ReleaseOrder(inTheWay) {
		if need <= 0 {
			break
		}
		d.Shrink = append(d.Shrink, Shrink{ID: p.ID, End: v.s.Now + int64(target)})
		need -= p.Nodes
	}
	if len(d.Shrink) > 0 {
		d.Reason += fmt.Sprintf("; pulling in the end of %s to %s from now, when job %s can start",
			pilotsWord(len(d.Shrink)), fmtLimit(target), top.ID)
	}
	return d
}

// room returns how many more pilots the caps allow (a large number if
// none), the case naming the binding cap, and a clause explaining it.
func (v *view) room() (int, Case, string) {
	room, c, why := int(^uint(0)>>1), CaseAtMaxNodes, ""
	if v.maxNodes > 0 {
		room = v.maxNodes - v.held
		why = fmt.Sprintf("pilots hold %d of at most %d nodes", v.held, v.maxNodes)
	}
	if v.demandCap >= 0 && v.demandCap-v.held < room {
		room = v.demandCap - v.held
		c = CaseDemandMet
		why = fmt.Sprintf("the backlog of %d tasks can use %d nodes and pilots hold %d", v.left, v.demandCap, v.held)
		if v.left == 0 {
			c = CaseNoDemand
			why = "the harvest backlog is empty"
		}
	}
	return room, c, why
}

// pickRelease returns the ids of visible pilots to cancel, in release
// order, until they free at least nodes nodes. Busy pilots are candidates
// only if busyToo; pilots of the preemptible tier only if not ownOnly
// (a waiting job gets those from the batch system). Pilots on the ledger
// cannot be cancelled (no id yet).
func (v *view) pickRelease(nodes int, busyToo, ownOnly bool) []string {
	ids := []string{}
	pilots := make([]cluster.Job, 0, len(v.s.Jobs))
	for i := range v.s.Jobs {
		if v.s.Jobs[i].Pilot {
			pilots = append(pilots, v.s.Jobs[i])
		}
	}
	slices.SortFunc(pilots, compareRelease) // ReleaseOrder, on our own copy
	for _, p := range pilots {
		if nodes <= 0 {
			break
		}
		if !busyToo && releaseTier(p) == 2 || ownOnly && p.Preemptible {
			continue
		}
		ids = append(ids, p.ID)
		nodes -= p.Nodes
	}
	return ids
}

// endingSoon returns the running job (foreign or pilot) that ends soonest
// within miniTime, ties broken by id so the input order does not matter.
func (v *view) endingSoon() *cluster.Job {
	var best *cluster.Job
	for i := range v.s.Jobs {
		j := &v.s.Jobs[i]
		r := j.Remaining()
		if j.State != cluster.Running || r.IsUnlimited() || int64(r) > v.cfg.MiniTime {
			continue
		}
		if best == nil {
			best = j
			continue
		}
		if c := compareLimit(r, best.Remaining()); c < 0 || c == 0 && compareIDs(j.ID, best.ID) < 0 {
			best = j
		}
	}
	return best
}

// roundDown rounds a limit down to the granularity g; unlimited stays.
func roundDown(l cluster.Limit, g int64) cluster.Limit {
	if l.IsUnlimited() || g <= 1 {
		return l
	}
	return cluster.Limit(int64(l) / g * g)
}

// fmtLimit writes a limit for reasons: "unlimited" or "19m0s".
func fmtLimit(l cluster.Limit) string {
	if l.IsUnlimited() {
		return "unlimited"
	}
	return (time.Duration(l) * time.Second).String()
}

// inTime writes when the top job can start: "in 19m0s" or "at no
// foreseeable time" (unlimited jobs hold the nodes it needs).
func inTime(l cluster.Limit) string {
	if l.IsUnlimited() {
		return "at no foreseeable time"
	}
	return "in " + fmtLimit(l)
}

// limitPhrase writes a pilot limit: "a 17m0s limit", "no time limit".
func limitPhrase(l cluster.Limit) string {
	if l.IsUnlimited() {
		return "no time limit"
	}
	return "a " + fmtLimit(l) + " limit"
}

func nodesWord(n int) string {
	if n == 1 {
		return "1 node"
	}
	return fmt.Sprintf("%d nodes", n)
}

func pilotsWord(n int) string {
	if n == 1 {
		return "1 pilot"
	}
	return fmt.Sprintf("%d pilots", n)
}
