package slurm

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/harvest-hpc/harvest/adapters"
)

// ownPilot checks with a fresh squeue that job sid is one of ours (our
// user, name == tag) before Cancel or Shrink acts on it, and refuses any
// other job with ErrNotPilot. A job that is purged or not listed gives
// nil, nil: there is nothing to act on.
func (a *Adapter) ownPilot(ctx context.Context, verb, sid string) (*JobCheck, error) {
	if _, err := atoiNonNeg(sid); err != nil {
		return nil, fmt.Errorf("%s %q: not a pilot job id: %w", verb, sid, adapters.ErrNotPilot)
	}
	out, err := a.query(ctx, a.cfg.binary("squeue", a.cfg.Squeue), []string{"-h", "-t", "all", "-j", sid, "-o", jobCheckFormat})
	var ce *cmdError
	if errors.As(err, &ce) && strings.Contains(ce.stderr, "Invalid job id specified") {
		return nil, nil // purged long ago
	}
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", verb, sid, err)
	}
	jobs, err := ParseJobCheck(out)
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", verb, sid, err)
	}
	if len(jobs) == 0 {
		return nil, nil
	}
	if len(jobs) != 1 || jobs[0].ID != sid {
		return nil, fmt.Errorf("%s %s: squeue shows %d jobs for this id: %w", verb, sid, len(jobs), adapters.ErrNotPilot)
	}
	j := jobs[0]
	if j.User != a.user || j.Name != a.cfg.Tag {
		return nil, fmt.Errorf("%s %s: job of user %q named %q, pilots are %q's named %q: %w",
			verb, sid, j.User, trunc(j.Name), a.user, a.cfg.Tag, adapters.ErrNotPilot)
	}
	return &j, nil
}

// endTimeLayout is scontrol's time format; the adapter writes it in UTC
// and runs scontrol with TZ=UTC, so the agent's and the client's time
// zones cannot disagree.
const endTimeLayout = "2006-01-02T15:04:05"

// Shrink pulls a running pilot's end in with `scontrol update JobId=N
// EndTime=T`, which SLURM allows a job's owner to the second (job_mgr.c
// _update_job; docs/slurm.md). The pilot is checked to be ours first, as
// for Cancel, and its current end (squeue %e) to be later than T: SLURM
// refuses to extend a job for its owner ("Access/permission denied") but
// not for an operator such as root. A job that stopped running meanwhile
// ("Job is not running", "Job has already finished") changes nothing and
// is not an error.
func (a *Adapter) Shrink(ctx context.Context, id adapters.PilotID, end int64) error {
	sid := string(id)
	if now := a.now().Unix(); end <= now {
		return fmt.Errorf("shrink %s: end %d is not after now %d: %w", sid, end, now, adapters.ErrInvalidSpec)
	}
	j, err := a.ownPilot(ctx, "shrink", sid)
	if err != nil || j == nil || j.State != "RUNNING" {
		return err
	}
	// SLURM lets an operator (root, SlurmUser, admins) push an end out
	// too, so the adapter checks the current end itself.
	out, err := a.query(ctx, a.cfg.binary("squeue", a.cfg.Squeue), []string{"-h", "-t", "all", "-j", sid, "-o", "%e"}, "SLURM_TIME_FORMAT=%s")
	if err != nil {
		return fmt.Errorf("shrink %s: %w", sid, err)
	}
	cur, err := parseEpoch(strings.TrimSpace(string(out)))
	if err != nil {
		return fmt.Errorf("shrink %s: end: %w", sid, err)
	}
	if cur > 0 && end >= cur {
		return nil
	}
	stamp := time.Unix(end, 0).UTC().Format(endTimeLayout)
	cctx, cancel := context.WithTimeout(ctx, a.cfg.Timeout)
	defer cancel()
	res, err := a.run(cctx, a.cfg.binary("scontrol", a.cfg.Scontrol),
		[]string{"update", "JobId=" + sid, "EndTime=" + stamp}, a.environ("TZ=UTC"), nil, nil)
	var ce *cmdError
	switch {
	case err == nil:
		return nil
	case errors.Is(err, context.DeadlineExceeded):
		// Pulling the same end in twice is harmless: the next round may retry.
		return fmt.Errorf("scontrol update %s: no answer within %s: %w", sid, a.cfg.Timeout, adapters.ErrOutcomeUnknown)
	case errors.As(err, &ce):
		switch {
		case bytesHasAny(res.stderr, "Access/permission denied", "Job is not running", "Job has already finished", "Invalid job id specified"):
			return nil // later than its end, or no longer running: nothing to pull in
		case bytesHasAny(res.stderr, "Invalid time specified"):
			return fmt.Errorf("shrink %s to %s UTC: %s: %w", sid, stamp, firstErrorLine(res.stderr), adapters.ErrInvalidSpec)
		case bytesHasAny(res.stderr, unreachableMarkers...):
			return fmt.Errorf("scontrol update %s: %s: %w", sid, firstErrorLine(res.stderr), adapters.ErrUnreachable)
		}
		return fmt.Errorf("scontrol update %s (exit %d): %s", sid, ce.code, firstErrorLine(res.stderr))
	default:
		return fmt.Errorf("scontrol update %s: %v: %w", sid, err, adapters.ErrUnreachable)
	}
}
