package policy

import (
	"fmt"

	"github.com/harvest-hpc/harvest/cluster"
)

// Input is everything one round decides on.
type Input struct {
	// Snapshot is the cluster as the adapter saw it, with the agent's
	// min_nodes, max_nodes and demand filled in.
	Snapshot cluster.Snapshot
	// Upcoming are pilots submitted in earlier rounds that the snapshot
	// does not show yet (the ledger). They count as held and as taking
	// idle nodes, so a round never submits twice for the same hole.
	Upcoming []Upcoming
	// Recommended is the master's MiniNode recommendation; 0 = none.
	Recommended int
	// Paused is the admin's pause (harvest admin pause): the round
	// submits nothing; releases, caps and shrinks go on.
	Paused bool
	// Drain, when set, is the admin's drain (harvest admin drain): every
	// pilot is released and nothing is submitted.
	Drain *Drain
	// JobsChecked says the caller validated Snapshot's jobs
	// (cluster.Snapshot.Validate) and changed none of their ids, states,
	// nodes, limits or run times since: Decide and Steady then check the
	// rest of the input only. The agent validates each snapshot as the
	// adapter returns it; a second pass over the jobs every round was a
	// tenth of a simulated month's CPU.
	JobsChecked bool
}

// Drain is a drain in force. Busy pilots are released once their batch
// is done (they show idle in a later round), or at once with Now.
type Drain struct {
	Now bool `json:"now"`
}

// Upcoming is one ledger entry: Count one-node pilots submitted at
// SubmittedAt (the snapshot clock's seconds) with limit TimeLimit, to the
// preemptible tier if Preemptible.
type Upcoming struct {
	Count       int           `json:"count"`
	TimeLimit   cluster.Limit `json:"time_limit_s"`
	SubmittedAt int64         `json:"submitted_at"`
	Preemptible bool          `json:"preemptible,omitempty"`
}

// validate checks the ledger; the snapshot has its own Validate.
func (u Upcoming) validate() error {
	if u.Count < 0 {
		return fmt.Errorf("%w: upcoming pilots: count %d is negative", cluster.ErrInvalidSnapshot, u.Count)
	}
	if u.TimeLimit == 0 || u.TimeLimit < cluster.Unlimited {
		return fmt.Errorf("%w: upcoming pilots: time limit must be positive or unlimited, got %d",
			cluster.ErrInvalidSnapshot, int64(u.TimeLimit))
	}
	return nil
}

// Submit asks for Count one-node pilots with limit TimeLimit.
type Submit struct {
	Count int `json:"count"`
	// TimeLimit is already rounded down to the granularity; Unlimited
	// (JSON null) asks for the longest the partition allows.
	TimeLimit cluster.Limit `json:"time_limit_s"`
	// Preemptible is how many of the Count go to the preemptible tier
	// (Config.Preemption); the others bring the floor up to Keep.
	Preemptible int `json:"preemptible,omitempty"`
	// MinTimeLimit, when set (Config.MinPilotLimit), lets the batch
	// system shorten the limit down to it to fit its own plan.
	MinTimeLimit cluster.Limit `json:"min_time_limit_s,omitempty"`
}

// Shrink pulls a running pilot's end in to End (the snapshot clock's
// seconds).
type Shrink struct {
	ID  string `json:"id"`
	End int64  `json:"end"`
}

// Decision is the outcome of one round. Submit and Release are never both
// set. Its JSON is the `harvest decide` contract: "submit", "release" and
// "reason" are stable; the other fields explain the figures used.
type Decision struct {
	// Submit is nil when nothing is submitted (JSON null).
	Submit *Submit `json:"submit"`
	// Release lists pilot ids to cancel, in cancel order; never nil.
	Release []string `json:"release"`
	// Shrink lists running pilots whose end to pull in (Config.Shrink).
	Shrink []Shrink `json:"shrink,omitempty"`
	// Reason explains the decision in one sentence.
	Reason string `json:"reason"`
	// Case names the branch that decided.
	Case Case `json:"case"`
	// TopJob is the id of the top pending foreign job, if any.
	TopJob string `json:"top_job,omitempty"`
	// MaxTime is the time until TopJob can start, as used (Unlimited when
	// there is no pending foreign job or nothing was computed).
	MaxTime cluster.Limit `json:"max_time_s"`
	// MinNodes is the MiniNode used: max(floor, recommendation), capped
	// by max nodes and by what the backlog can use.
	MinNodes int `json:"min_nodes"`
	// KeepNodes is the number of pilots no release goes below: the
	// admin's floor (or MinNodes with Config.KeepRecommended).
	KeepNodes int `json:"keep_nodes"`
	// Held is R: nodes held by pilots, visible or on their way.
	Held int `json:"held"`
	// Idle is I: idle nodes not already claimed by pilots on their way.
	Idle int `json:"idle"`
}

// Case is a typed reason: which branch of the policy decided.
type Case string

// The cases, in the order Decide considers them. Cases 1 to 6 are those of
// DESIGN.md; the caps come first because they bound everything else, and
// the submit outcomes say why a branch that wanted pilots got none.
const (
	// CaseInvalidInput: the snapshot, ledger or config is inconsistent;
	// nothing is done.
	CaseInvalidInput Case = "invalid-input"
	// CaseAboveMaxNodes: more pilots are held than max nodes allows;
	// release the excess.
	CaseAboveMaxNodes Case = "above-max-nodes"
	// CaseNoDemand: the backlog is empty; release the idle pilots.
	CaseNoDemand Case = "no-demand"
	// CaseAboveDemand: more pilots are held than the backlog can use;
	// release idle ones.
	CaseAboveDemand Case = "above-demand"

	// CaseNoPendingJob (1): nobody waits; fill the idle nodes with pilots
	// of the longest limit allowed.
	CaseNoPendingJob Case = "no-pending-job"
	// CaseBelowMinNodes (2): fewer pilots than MiniNode; take the idle nodes.
	CaseBelowMinNodes Case = "below-min-nodes"
	// CaseTopJobFits (3, need <= 0): the top job fits in the idle nodes;
	// the batch system starts it, nothing to do.
	CaseTopJobFits Case = "top-job-fits"
	// CaseReleaseForTopJob (3): releasing pilots above MiniNode lets the
	// top job start now.
	CaseReleaseForTopJob Case = "release-for-top-job"
	// CaseSchedulerPreempts (3 or 5, preemption mode): the top job, or one
	// that would backfill, needs nodes that preemptible pilots hold; the
	// batch system preempts them by itself.
	CaseSchedulerPreempts Case = "scheduler-preempts"
	// CaseJobEndingSoon (4): a running job ends within miniTime; wait.
	CaseJobEndingSoon Case = "job-ending-soon"
	// CaseBackfillWillStart (5): a pending job fits in the hole and the
	// idle nodes; the batch system will backfill it.
	CaseBackfillWillStart Case = "backfill-will-start"
	// CaseReleaseForBackfill (5): a pending job fits in the hole if some
	// pilots above MiniNode make room; release them.
	CaseReleaseForBackfill Case = "release-for-backfill"
	// CaseReleaseForPlan (3 and 5): pilots whose limits reach past the
	// time their nodes are needed make the batch system plan a reserved
	// job later, and so start a job now that would delay it; release them.
	CaseReleaseForPlan Case = "release-for-plan"
	// CaseReleaseBeforeEnd (3 and 5, ahead): a running job reaches its
	// limit within miniTime and the batch system, at that second, would
	// start a job the cluster without pilots starts then, but for the
	// pilots on its nodes; release them now, since the round after the end
	// comes after the batch system's pass.
	CaseReleaseBeforeEnd Case = "release-before-end"
	// CaseFillHole (6): no foreign job can use the hole; fill it with
	// pilots ending margin before the top job can start.
	CaseFillHole Case = "fill-hole"
	// CaseReleaseForMargin: a foreign job waits and fewer than
	// Config.IdleMargin nodes are idle: pilots go to restore the margin.
	CaseReleaseForMargin Case = "release-for-margin"

	// CaseHoleTooShort: a branch wanted pilots, but the limit left after
	// the margin and the rounding is not positive.
	CaseHoleTooShort Case = "hole-too-short"
	// CaseNoIdleNodes: a branch wanted pilots, but no idle node is left.
	CaseNoIdleNodes Case = "no-idle-nodes"
	// CaseAtMaxNodes: a branch wanted pilots, but max nodes are held.
	CaseAtMaxNodes Case = "at-max-nodes"
	// CaseDemandMet: a branch wanted pilots, but the pilots held are all
	// the backlog can use.
	CaseDemandMet Case = "demand-met"

	// CasePaused: a branch wanted pilots, but the admin paused harvesting.
	CasePaused Case = "paused"
	// CaseDrain: the admin drains the harvest; release every pilot (busy
	// ones after their batch unless the drain is --now).
	CaseDrain Case = "drain"
)

// Acts reports whether the decision submits, releases or shrinks anything.
func (d Decision) Acts() bool { return d.Submit != nil || len(d.Release) > 0 || len(d.Shrink) > 0 }
