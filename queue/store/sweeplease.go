package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/harvest-hpc/harvest/queue/rules"
)

// Several agents may serve one database (Config.Shared); the sweeps run
// at one at a time. Their lease is a leases row under a name no site can
// have: the holder names the agent, the epoch (the fencing token) rises
// with every change of holder, and it lapses unless renewed.
const sweepPool = "~sweeps"

// TakeSweep grants the sweep lease to holder, or renews it, until now+ttl,
// when nobody else holds it alive. It returns the lease's epoch and
// whether holder holds it now (the epoch changes when the holder does).
func (s *Store) TakeSweep(ctx context.Context, holder string, now time.Time, ttl time.Duration) (epoch int64, held bool, err error) {
	err = s.write(ctx, func(tx *wtx) error {
		l, err := s.readLeaseTx(ctx, tx, sweepPool, "FOR UPDATE")
		if err != nil || l.Holder != holder && l.Expires.After(now) {
			return err // another agent's, alive
		}
		if l.Holder != holder {
			l.Epoch++
		}
		epoch = l.Epoch
		err = s.saveLease(ctx, tx, sweepPool, rules.Lease{Epoch: l.Epoch, Holder: holder, Expires: now.Add(ttl)})
		held = err == nil
		return err
	})
	if err != nil {
		return 0, false, fmt.Errorf("sweep lease: %w", err)
	}
	return epoch, held, nil
}

// ErrSweepLost is the error of a write made under SweepFenced after the
// sweep lease passed to another agent: the write changed nothing.
var ErrSweepLost = errors.New("the sweep lease has passed to another agent")

type sweepFenceKey struct{}

type sweepFence struct {
	holder string
	epoch  int64
}

// SweepFenced returns ctx for a sweep's writes: each write transaction
// under it first checks that holder still holds the sweep lease at epoch,
// else fails with ErrSweepLost, changing nothing. A lapsed lease nobody
// took keeps its epoch: its holder may still sweep. (PostgreSQL: FOR
// SHARE in a SERIALIZABLE transaction, as fenced.)
func SweepFenced(ctx context.Context, holder string, epoch int64) context.Context {
	return context.WithValue(ctx, sweepFenceKey{}, sweepFence{holder, epoch})
}

// checkSweep is SweepFenced's check, inside tx.
func (s *Store) checkSweep(ctx context.Context, tx *wtx, f sweepFence) error {
	l, err := s.readLeaseTx(ctx, tx, sweepPool, "FOR SHARE")
	if err != nil {
		return err
	}
	if l.Epoch != f.epoch || l.Holder != f.holder {
		return fmt.Errorf("%w (epoch %d of %s, not %d of %s)", ErrSweepLost, l.Epoch, l.Holder, f.epoch, f.holder)
	}
	return nil
}

// ReleaseSweep gives up holder's sweep lease (if held), so another agent
// takes the sweeps at its next round, not after the TTL.
func (s *Store) ReleaseSweep(ctx context.Context, holder string) error {
	_, err := s.do(ctx, "release the sweep lease", `UPDATE leases SET expires_at = 0 WHERE pool = ? AND holder = ?`, sweepPool, holder)
	return err
}

// SubmittingBefore lists the jobs whose submission started before cut and
// never completed: with several agents on one database, a submission
// still SUBMITTING long after it started is one whose agent died.
func (s *Store) SubmittingBefore(ctx context.Context, cut time.Time) ([]int64, error) {
	return s.ids(ctx, "find stale submissions", `SELECT id FROM jobs WHERE state = ? AND submitted_at < ?`, rules.JobSubmitting, ms(cut))
}

// SiteRound is what a site's agent saw at its last round (pilots held,
// nodes idle, when), kept for the other agents of a shared database: each
// plans the sites' shares from every site's round, not only from the
// rounds it heard itself.
type SiteRound struct {
	Held int   `json:"held"`
	Idle int   `json:"idle"`
	AtMS int64 `json:"at_ms"`
}

// siteRoundKey prefixes the settings rows of the sites' rounds.
const siteRoundKey = "round:"

// PutSiteRound records a site's latest round.
func (s *Store) PutSiteRound(ctx context.Context, site string, r SiteRound) error {
	v, err := json.Marshal(r)
	if err != nil {
		return err
	}
	return s.putSetting(ctx, siteRoundKey+site, string(v))
}

// SiteRounds reads every site's latest round.
func (s *Store) SiteRounds(ctx context.Context) (map[string]SiteRound, error) {
	out := map[string]SiteRound{}
	return out, s.each(ctx, "read the sites' rounds", func(rs *sql.Rows) error {
		var k, v string
		var r SiteRound
		if err := rs.Scan(&k, &v); err != nil {
			return err
		}
		if err := json.Unmarshal([]byte(v), &r); err != nil {
			return fmt.Errorf("the round of site %s: %w", strings.TrimPrefix(k, siteRoundKey), err)
		}
		out[strings.TrimPrefix(k, siteRoundKey)] = r
		return nil
	}, `SELECT key, value FROM settings WHERE key LIKE ?`, siteRoundKey+"%")
}

// ErrSubmissionTaken is ActivateJob's error for a submission this agent
// no longer stores: another agent took it over (TakeOverSubmission).
var ErrSubmissionTaken = errors.New("the submission is no longer stored by this agent (another agent took it over)")

// agentPool prefixes the leases rows that say an agent of a shared
// database is alive (no site name starts with ~): the holder is the
// agent's name, expires_at when it is known dead unless renewed.
const agentPool = "~agent:"

// BeatAgent renews this agent's (Share's holder) liveness row until
// now+ttl.
func (s *Store) BeatAgent(ctx context.Context, now time.Time, ttl time.Duration) error {
	_, err := s.do(ctx, "renew this agent's liveness", `INSERT INTO leases (pool, epoch, holder, address, expires_at) VALUES (?, 0, ?, '', ?)
		ON CONFLICT (pool) DO UPDATE SET expires_at = excluded.expires_at`, agentPool+s.holder, s.holder, ms(now.Add(ttl)))
	return err
}

// ReleaseAgent removes this agent's liveness row (an agent that stops):
// its submissions under way, if any, may be taken over at once.
func (s *Store) ReleaseAgent(ctx context.Context) error {
	_, err := s.do(ctx, "remove this agent's liveness", `DELETE FROM leases WHERE pool = ?`, agentPool+s.holder)
	return err
}

// PruneAgents removes the liveness rows that lapsed before cut (killed
// agents leave theirs). A missing row counts as a dead agent.
func (s *Store) PruneAgents(ctx context.Context, cut time.Time) error {
	_, err := s.do(ctx, "prune the liveness of dead agents", `DELETE FROM leases WHERE pool LIKE ? AND expires_at < ?`, agentPool+"%", ms(cut))
	return err
}

// TakeOverSubmission frees the idempotency key of the SUBMITTING job id
// if its storer is dead (liveness row lapsed or gone), so a retry here
// stores a new job, and takes the storer away (a resumed storer gets
// ErrSubmissionTaken); the caller drops the job. ok is false, nothing
// changed, while the storer lives or the job is no longer SUBMITTING.
func (s *Store) TakeOverSubmission(ctx context.Context, id int64, now time.Time) (ok bool, err error) {
	n, err := s.do(ctx, fmt.Sprintf("take over the submission of job %d", id), `UPDATE jobs SET idem_key = '', storer = ''
		WHERE id = ? AND state = ? AND storer <> ? AND NOT EXISTS (SELECT 1 FROM leases WHERE pool = CAST(? AS TEXT) || jobs.storer AND expires_at > ?)`,
		id, rules.JobSubmitting, s.holder, agentPool, ms(now))
	return n == 1, err
}
