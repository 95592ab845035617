package queue

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/harvest-hpc/harvest/pilotproto"
	"github.com/harvest-hpc/harvest/queue/api"
)

const maxErrorTail = 64 << 10

func validateResult(i int, r pilotproto.Result) error {
	switch {
	case r.TaskID <= 0:
		return invalid("result %d: task_id must be positive", i)
	case r.Attempt < 1:
		return invalid("result %d: attempt must be at least 1", i)
	case r.DurationMS < 0:
		return invalid("result %d: duration_ms must not be negative", i)
	case len(r.ErrorTail) > maxErrorTail:
		return invalid("result %d: error_tail exceeds %d bytes", i, maxErrorTail)
	case len(r.Pilot) > 256:
		return invalid("result %d: pilot id exceeds 256 bytes", i)
	}
	switch r.Status {
	case pilotproto.StatusDone, pilotproto.StatusFailed, pilotproto.StatusTimeout, pilotproto.StatusInterrupted, pilotproto.StatusKilled:
		return nil
	}
	return invalid("result %d: unknown status %q (done, failed, timeout, interrupted, killed)", i, r.Status)
}

// ReportResults applies results, idempotent by (task, attempt): a result
// reported before is acknowledged as a duplicate and not applied again; a
// result for an attempt that is no longer current (the task was requeued,
// killed or finished) is recorded for usage but changes no task
// (counted in Ignored). The whole request is validated before anything
// is written.
func (q *Queue) ReportResults(ctx context.Context, req pilotproto.ResultsRequest) (pilotproto.ResultsResponse, error) {
	var resp pilotproto.ResultsResponse
	if len(req.Results) > 100_000 {
		return resp, invalid("at most 100000 results per request")
	}
	for i, r := range req.Results {
		if err := validateResult(i, r); err != nil {
			return resp, err
		}
	}
	if err := q.checkEpoch(req.Epoch); err != nil {
		return resp, err
	}
	return q.applyResults(ctx, req.Results)
}

// applyResults applies validated results in short per-chunk transactions.
func (q *Queue) applyResults(ctx context.Context, results []pilotproto.Result) (pilotproto.ResultsResponse, error) {
	var resp pilotproto.ResultsResponse
	q.mut.Lock()
	defer q.mut.Unlock()
	for len(results) > 0 {
		chunk := results[:min(len(results), q.cfg.WriteChunk)]
		results = results[len(chunk):]
		var applied, dup, ignored int
		running := map[string]int{}
		var events []ownedEvent
		now := q.now()
		err := q.write(ctx, func(tx *sql.Tx) error {
			applied, dup, ignored = 0, 0, 0
			clear(running)
			events = events[:0]
			jobs := map[int64]bool{}
			for _, r := range chunk {
				outcome, owner, cores, ev, job, err := q.applyResult(ctx, tx, r, ms(now))
				if err != nil {
					return err
				}
				switch outcome {
				case outcomeDuplicate:
					dup++
					continue
				case outcomeUnknown:
					ignored++
					continue
				case outcomeStale:
					ignored++
				case outcomeApplied:
					applied++
					running[owner] -= cores
					jobs[job] = true
				}
				events = append(events, ownedEvent{owner, ev})
			}
			for id := range jobs {
				if err := q.refreshJob(ctx, tx, id, ms(now)); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			return resp, fmt.Errorf("apply results: %w", err)
		}
		resp.Applied += applied
		resp.Duplicates += dup
		resp.Ignored += ignored
		q.mu.Lock()
		for owner, c := range running {
			u := q.userLocked(owner)
			u.running += c
			u.dirty = true
		}
		for _, e := range events {
			u := q.userLocked(e.owner)
			u.events = append(u.events, e.ev)
			u.dirty = true
		}
		q.mu.Unlock()
	}
	return resp, nil
}

type ownedEvent struct {
	owner string
	ev    usageEvent
}

type outcome int

const (
	outcomeApplied outcome = iota
	outcomeDuplicate
	outcomeStale
	outcomeUnknown
)

func (q *Queue) applyResult(ctx context.Context, tx *sql.Tx, r pilotproto.Result, now int64) (o outcome, owner string, cores int, ev usageEvent, job int64, err error) {
	var one int
	err = tx.QueryRowContext(ctx, `SELECT 1 FROM results WHERE task_id = ? AND attempt = ?`, r.TaskID, r.Attempt).Scan(&one)
	if err == nil {
		return outcomeDuplicate, "", 0, ev, 0, nil
	}
	if !errors.Is(err, sql.ErrNoRows) {
		return 0, "", 0, ev, 0, err
	}
	var state string
	var attempt, tries, maxAttempts int
	var price float64
	err = tx.QueryRowContext(ctx, `SELECT t.state, t.attempt, t.tries, t.job_id, j.owner, j.cores, j.price, j.max_attempts
		FROM tasks t JOIN jobs j ON j.id = t.job_id WHERE t.id = ?`, r.TaskID).
		Scan(&state, &attempt, &tries, &job, &owner, &cores, &price, &maxAttempts)
	if errors.Is(err, sql.ErrNoRows) {
		return outcomeUnknown, "", 0, ev, 0, nil
	}
	if err != nil {
		return 0, "", 0, ev, 0, err
	}
	current := attempt == r.Attempt && (state == api.TaskAssigned || state == api.TaskRunning || state == api.TaskZombie)
	cpu := float64(cores) * float64(r.DurationMS) / 1000
	ev = usageEvent{at: now, cpu: cpu, cost: cpu * price}
	if _, err = tx.ExecContext(ctx, `INSERT INTO results (task_id, attempt, job_id, owner, status, exit_code, started_at, duration_ms, pilot, error_tail, cpu_s, cost, received_at, applied)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
		r.TaskID, r.Attempt, job, owner, r.Status, r.ExitCode, r.StartedAt, r.DurationMS, r.Pilot, r.ErrorTail, ev.cpu, ev.cost, now, current); err != nil {
		return 0, "", 0, ev, 0, err
	}
	if !current {
		return outcomeStale, owner, cores, ev, job, nil
	}
	next, counter := api.TaskDone, "n_done"
	countsTry := false
	switch r.Status {
	case pilotproto.StatusFailed, pilotproto.StatusTimeout:
		countsTry = true
		if tries+1 >= maxAttempts {
			next, counter = api.TaskErrorE, "n_failed"
		} else {
			next, counter = api.TaskWaiting, "n_waiting"
		}
	case pilotproto.StatusInterrupted, pilotproto.StatusKilled:
		// Not the task's fault (pilot ended, or a cancel that did not come
		// from this job): requeue at once without counting an attempt.
		next, counter = api.TaskWaiting, "n_waiting"
	}
	inc := 0
	if countsTry {
		inc = 1
	}
	fin := int64(0)
	if next != api.TaskWaiting {
		fin = now
	}
	if _, err = tx.ExecContext(ctx, `UPDATE tasks SET state = ?, tries = tries + ?, exit_code = ?, last_error = ?, finished_at = ?,
		queued_at = CASE WHEN ? = 'WAITING' THEN ? ELSE queued_at END WHERE id = ?`,
		next, inc, r.ExitCode, r.ErrorTail, fin, next, now, r.TaskID); err != nil {
		return 0, "", 0, ev, 0, err
	}
	if _, err = tx.ExecContext(ctx, `UPDATE jobs SET n_active = n_active - 1, `+counter+` = `+counter+` + 1 WHERE id = ?`, job); err != nil {
		return 0, "", 0, ev, 0, err
	}
	return outcomeApplied, owner, cores, ev, job, nil
}

// Heartbeat keeps the listed attempts alive (ASSIGNED or ZOMBIE become
// RUNNING), renews the lease, records pilot status and lists the jobs
// cancelled recently.
func (q *Queue) Heartbeat(ctx context.Context, req pilotproto.HeartbeatRequest) (pilotproto.HeartbeatResponse, error) {
	var resp pilotproto.HeartbeatResponse
	if len(req.Running) > 1_000_000 || len(req.Pilots) > 100_000 {
		return resp, invalid("too many running tasks or pilots in one heartbeat")
	}
	for i, p := range req.Pilots {
		if p.PilotID == "" || len(p.PilotID) > 256 {
			return resp, invalid("pilot %d: pilot_id is required (at most 256 bytes)", i)
		}
	}
	q.mu.Lock()
	if err := q.checkEpochLocked(req.Epoch); err != nil {
		q.mu.Unlock()
		return resp, err
	}
	if err := q.renewLocked(ctx); err != nil {
		q.mu.Unlock()
		return resp, fmt.Errorf("renew lease: %w", err)
	}
	now := q.now()
	for _, p := range req.Pilots {
		q.pilots[p.PilotID] = pilotSeen{status: p, at: now}
	}
	resp.LeaseExpires = q.lease.expires.Unix()
	q.mu.Unlock()

	refs := req.Running
	for len(refs) > 0 {
		chunk := refs[:min(len(refs), q.cfg.WriteChunk*4)]
		refs = refs[len(chunk):]
		err := q.write(ctx, func(tx *sql.Tx) error {
			stmt, err := tx.PrepareContext(ctx, `UPDATE tasks SET state = 'RUNNING', heartbeat_at = ? WHERE id = ? AND attempt = ? AND state IN ('ASSIGNED', 'RUNNING', 'ZOMBIE')`)
			if err != nil {
				return err
			}
			defer stmt.Close()
			for _, r := range chunk {
				if _, err := stmt.ExecContext(ctx, ms(now), r.TaskID, r.Attempt); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			return resp, fmt.Errorf("heartbeat: %w", err)
		}
	}
	if err := q.requeueOrphans(ctx, req); err != nil {
		return resp, err
	}
	var err error
	resp.CancelledJobs, err = q.cancelledSince(ctx)
	return resp, err
}

// requeueOrphans runs on the first heartbeat of a new master. Its heartbeat
// lists every task it holds (restored from its checkpoint or pulled
// since), so a task still active under an older epoch and not listed was
// pulled by a master that died before it could checkpoint the pull (the
// answer was lost): nobody will ever run or report it. It is requeued at
// once, as interrupted (no attempt counted), instead of waiting for the
// zombie timeout.
func (q *Queue) requeueOrphans(ctx context.Context, req pilotproto.HeartbeatRequest) error {
	q.mu.Lock()
	done := q.orphansChecked >= req.Epoch
	q.mu.Unlock()
	if done {
		return nil
	}
	listed := make(map[int64]bool, len(req.Running))
	for _, r := range req.Running {
		listed[r.TaskID] = true
	}
	rows, err := q.r.QueryContext(ctx, `SELECT id, attempt FROM tasks WHERE state IN ('ASSIGNED', 'RUNNING', 'ZOMBIE') AND epoch < ?`, req.Epoch)
	if err != nil {
		return fmt.Errorf("find orphaned tasks: %w", err)
	}
	var orphans []pilotproto.Result
	now := q.now().UnixMilli()
	for rows.Next() {
		var id int64
		var attempt int
		if err := rows.Scan(&id, &attempt); err != nil {
			rows.Close()
			return fmt.Errorf("find orphaned tasks: %w", err)
		}
		if !listed[id] {
			orphans = append(orphans, pilotproto.Result{TaskID: id, Attempt: attempt, Status: pilotproto.StatusInterrupted,
				StartedAt: now, ErrorTail: "requeued: its master stopped before recording it"})
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return fmt.Errorf("find orphaned tasks: %w", err)
	}
	if len(orphans) > 0 {
		if _, err := q.applyResults(ctx, orphans); err != nil {
			return fmt.Errorf("requeue orphaned tasks: %w", err)
		}
		q.log.Warn("requeued tasks no master holds", "tasks", len(orphans), "epoch", req.Epoch)
	}
	q.mu.Lock()
	q.orphansChecked = max(q.orphansChecked, req.Epoch)
	q.mu.Unlock()
	return nil
}

// Recommend stores the master's MiniNode recommendation and demand figures.
func (q *Queue) Recommend(ctx context.Context, req pilotproto.RecommendationRequest) error {
	if req.MinNodes < 0 || req.PendingTasks < 0 || req.RunningTasks < 0 || req.SlotsPerNode < 0 {
		return invalid("recommendation figures must not be negative")
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	if err := q.checkEpochLocked(req.Epoch); err != nil {
		return err
	}
	q.rec = recommendation{minNodes: req.MinNodes, pending: req.PendingTasks, running: req.RunningTasks, slots: req.SlotsPerNode, at: q.now()}
	return nil
}
