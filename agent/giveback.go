package agent

import (
	"fmt"

	"github.com/harvest-hpc/harvest/adapters"
	"github.com/harvest-hpc/harvest/agent/policy"
	"github.com/harvest-hpc/harvest/cluster"
)

// GiveBackMode is how pilots make way for foreign jobs.
type GiveBackMode string

const (
	// GiveBackAuto is preemption where the adapter reports a usable
	// preemptible tier, polling otherwise.
	GiveBackAuto GiveBackMode = "auto"
	// GiveBackPolling: the agent cancels pilots a waiting job could use
	// (any batch system). A foreign job waits up to one poll plus the
	// scheduler's latency.
	GiveBackPolling GiveBackMode = "polling"
	// GiveBackPreemption: pilots above the floor run in the batch system's
	// preemptible tier, which it preempts the moment a foreign job needs
	// their nodes; the agent only sizes, caps and drains.
	GiveBackPreemption GiveBackMode = "preemption"
)

// GiveBackRequest is what the admin asked for.
type GiveBackRequest struct {
	Mode GiveBackMode
	// Shrink pulls in the end of pilots a pending job will need later.
	Shrink bool
	// MinPilotLimit, when positive, is each pilot's minimum limit, for a
	// batch system that sizes pilots to its own plan with it.
	MinPilotLimit cluster.Limit
}

// GiveBack is the give-back set-up chosen at start from the request and
// the adapter's Info.
type GiveBack struct {
	Mode GiveBackMode
	// Preemption is the tier pilots above the floor go to (preemption
	// mode), else nil.
	Preemption *adapters.Preemption
	Shrink     bool
	// MinPilotLimit is 0 unless the adapter sizes pilots with it.
	MinPilotLimit cluster.Limit
	// Describe says it in one line, for the agent's log and /status.
	Describe string
	// Warnings are settings asked for that do not apply here, and
	// settings of the batch system the site should change.
	Warnings []string
}

// ChooseGiveBack picks the give-back set-up. Asking for preemption where
// the adapter has no usable preemptible tier, or for shrinking where it
// cannot shrink, is an error: the agent must not start believing it gives
// nodes back faster than it does. A minimum limit the batch system would
// not honour is dropped with a warning (SLURM before 25.11 sets a
// --time-min job's limit to the minimum).
func ChooseGiveBack(info adapters.Info, req GiveBackRequest) (GiveBack, error) {
	g := GiveBack{Mode: req.Mode}
	pre := info.Preemption
	usable := pre != nil && pre.Usable
	why := "no preemptible partition over the harvested nodes"
	if pre != nil && !pre.Usable {
		why = fmt.Sprintf("preemptible partition %s is not usable: %s", pre.Partition, pre.Problem)
	}
	switch req.Mode {
	case GiveBackAuto, "":
		g.Mode = GiveBackPolling
		if usable {
			g.Mode = GiveBackPreemption
		}
	case GiveBackPolling:
	case GiveBackPreemption:
		if !usable {
			return g, fmt.Errorf("give-back preemption: %s (see docs/slurm.md for what a site must configure)", why)
		}
	default:
		return g, fmt.Errorf("give-back mode %q is not auto, polling or preemption", req.Mode)
	}
	if req.Shrink && !info.Shrink {
		return g, fmt.Errorf("--shrink: the %s adapter cannot pull in a pilot's end", info.Name)
	}
	if req.MinPilotLimit < 0 {
		return g, fmt.Errorf("minimum pilot limit %v is negative", req.MinPilotLimit)
	}
	g.Shrink = req.Shrink
	if req.MinPilotLimit > 0 {
		if info.TimeMinSizing {
			g.MinPilotLimit = req.MinPilotLimit
		} else {
			g.Warnings = append(g.Warnings, fmt.Sprintf("the minimum pilot limit is not used: %s %s does not size jobs to its plan with it", info.Name, info.Version))
		}
	}
	if g.Mode == GiveBackPreemption {
		g.Preemption = pre
		if pre.Problem != "" {
			// Usable, with something the site should change (SLURM:
			// preempt_youngest_first missing).
			g.Warnings = append(g.Warnings, fmt.Sprintf("preemptible partition %s: %s (docs/admin.md)", pre.Partition, pre.Problem))
		}
		g.Describe = fmt.Sprintf("preemption: pilots above the floor run in partition %s (PreemptMode %s, GraceTime %d s), preempted the moment a foreign job needs their nodes",
			pre.Partition, pre.Mode, pre.GraceTime)
	} else {
		g.Describe = "polling: the agent cancels pilots a waiting job could use, within one poll (" + why + ")"
		if usable {
			g.Describe = "polling: the agent cancels pilots a waiting job could use, within one poll (preemptible partition " + pre.Partition + " is available: --give-back preemption)"
		}
	}
	if g.Shrink {
		g.Describe += "; ends pulled in for pending jobs"
	}
	if g.MinPilotLimit > 0 {
		g.Describe += fmt.Sprintf("; pilots sized by the batch system, at least %v", g.MinPilotLimit)
	}
	return g, nil
}

// Apply sets the policy for the chosen set-up.
func (g GiveBack) Apply(p *policy.Config) {
	p.Preemption = g.Mode == GiveBackPreemption
	p.Shrink = g.Shrink
	p.MinPilotLimit = g.MinPilotLimit
}
