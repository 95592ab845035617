package queue

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strconv"

	"github.com/harvest-hpc/harvest/pilotproto"
	"github.com/harvest-hpc/harvest/queue/fairshare"
)

// readyJob is a live job with waiting tasks, as a pull sees it.
type readyJob struct {
	id, timeoutS                       int64
	owner, dataset, outputDir, command string
	price                              float64
	cores, batchSize, waiting          int
	argv                               []string
	next                               []pendingTask // fetched, not yet picked
	exhausted                          bool
	fetchN                             int   // next fetch size: small first, doubling
	lastID                             int64 // highest task id fetched (picked ones are still WAITING in the table)

}

type pendingTask struct {
	id      int64
	name    string
	attempt int
}

// candidate is a user competing in one pull.
type candidate struct {
	name   string
	limits fairshare.Limits
	usage  fairshare.Usage
	jobs   []*readyJob // price desc, then FIFO
	picked int
}

type pick struct {
	job  *readyJob
	task pendingTask
}

// Pull hands out up to req.Max waiting tasks in fair-share order: the user
// with the highest computedPriority gets the next task, then that user's
// priority is recomputed with the task's cores counted as running, so users
// of equal standing interleave within one pull. Within a user: higher
// price first, then FIFO. Tasks become ASSIGNED to the caller's epoch.
func (q *Queue) Pull(ctx context.Context, req pilotproto.PullRequest) (pilotproto.PullResponse, error) {
	if req.Max < 1 || req.Max > q.cfg.MaxPull {
		return pilotproto.PullResponse{}, invalid("max must be 1..%d, got %d", q.cfg.MaxPull, req.Max)
	}
	if err := q.checkEpoch(req.Epoch); err != nil {
		return pilotproto.PullResponse{}, err
	}
	q.pullMu.Lock()
	defer q.pullMu.Unlock()
	picks, err := q.planPull(ctx, req.Max)
	if err != nil {
		return pilotproto.PullResponse{}, err
	}
	tasks, err := q.assign(ctx, req.Epoch, picks)
	if err != nil {
		return pilotproto.PullResponse{}, err
	}
	cancelled, err := q.cancelledSince(ctx)
	if err != nil {
		return pilotproto.PullResponse{}, err
	}
	return pilotproto.PullResponse{Tasks: tasks, CancelledJobs: cancelled}, nil
}

// planPull reads (no write lock) and decides which tasks to hand out.
func (q *Queue) planPull(ctx context.Context, want int) ([]pick, error) {
	rows, err := q.r.QueryContext(ctx, `SELECT id, owner, dataset, output_dir, command, price, cores, batch_size, timeout_s, n_waiting
		FROM jobs WHERE state IN ('WAITING', 'RUNNING') AND n_waiting > 0 ORDER BY price DESC, id`)
	if err != nil {
		return nil, fmt.Errorf("pull: list jobs: %w", err)
	}
	byUser := map[string]*candidate{}
	var users []*candidate
	for rows.Next() {
		j := &readyJob{}
		if err := rows.Scan(&j.id, &j.owner, &j.dataset, &j.outputDir, &j.command, &j.price, &j.cores, &j.batchSize, &j.timeoutS, &j.waiting); err != nil {
			rows.Close()
			return nil, fmt.Errorf("pull: list jobs: %w", err)
		}
		if err := json.Unmarshal([]byte(j.command), &j.argv); err != nil {
			rows.Close()
			return nil, fmt.Errorf("pull: job %d command: %w", j.id, err)
		}
		c := byUser[j.owner]
		if c == nil {
			c = &candidate{name: j.owner}
			byUser[j.owner] = c
			users = append(users, c)
		}
		c.jobs = append(c.jobs, j)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("pull: list jobs: %w", err)
	}
	if len(users) == 0 {
		return nil, nil
	}
	now := q.now()
	q.mu.Lock()
	highest := q.highest
	for _, c := range users {
		u := q.userLocked(c.name)
		c.limits = u.limits
		c.usage = q.usageLocked(u, now)
	}
	q.mu.Unlock()

	var picks []pick
	for len(picks) < want {
		var best *candidate
		bestPrio := 0.0
		for _, c := range users {
			if len(c.jobs) == 0 {
				continue
			}
			p := fairshare.ComputedPriority(c.limits, c.usage, highest)
			if p < 0 {
				continue
			}
			if best == nil || p > bestPrio || (p == bestPrio && (c.picked < best.picked || (c.picked == best.picked && c.name < best.name))) {
				best, bestPrio = c, p
			}
		}
		if best == nil {
			break
		}
		j := best.jobs[0]
		if len(j.next) == 0 && !j.exhausted {
			// Many users competing take a few tasks each: fetch little
			// first, more each time a job turns out to be drawn from a lot.
			j.fetchN = min(max(2*j.fetchN, 8), 1000, want)
			if err := q.fetchWaiting(ctx, j, j.fetchN); err != nil {
				return nil, err
			}
		}
		if len(j.next) == 0 {
			best.jobs = best.jobs[1:]
			continue
		}
		picks = append(picks, pick{job: j, task: j.next[0]})
		j.next = j.next[1:]
		best.picked++
		best.usage.RunningCores += j.cores
	}
	return picks, nil
}

func (q *Queue) fetchWaiting(ctx context.Context, j *readyJob, n int) error {
	rows, err := q.r.QueryContext(ctx, `SELECT id, name, attempt FROM tasks WHERE job_id = ? AND state = 'WAITING' AND id > ? ORDER BY id LIMIT ?`, j.id, j.lastID, n)
	if err != nil {
		return fmt.Errorf("pull: tasks of job %d: %w", j.id, err)
	}
	defer rows.Close()
	got := 0
	for rows.Next() {
		var t pendingTask
		if err := rows.Scan(&t.id, &t.name, &t.attempt); err != nil {
			return fmt.Errorf("pull: tasks of job %d: %w", j.id, err)
		}
		j.next = append(j.next, t)
		j.lastID = t.id
		got++
	}
	if got < n {
		j.exhausted = true
	}
	return rows.Err()
}

// assign marks the picked tasks ASSIGNED in short transactions of
// WriteChunk tasks; a task or job that changed since the plan (cancelled)
// is skipped. Running cores are counted as each chunk commits.
func (q *Queue) assign(ctx context.Context, epoch int64, picks []pick) ([]pilotproto.Task, error) {
	out := make([]pilotproto.Task, 0, len(picks))
	q.mut.Lock()
	defer q.mut.Unlock()
	for len(picks) > 0 {
		chunk := picks[:min(len(picks), q.cfg.WriteChunk)]
		picks = picks[len(chunk):]
		q.mu.Lock()
		err := q.checkEpochLocked(epoch)
		holder := q.lease.holder
		q.mu.Unlock()
		if err != nil {
			if len(out) > 0 {
				break // what is assigned is handed out; the master is fenced next time
			}
			return nil, err
		}
		now := q.now()
		var got []pilotproto.Task
		cores := map[string]int{}
		err = q.write(ctx, func(tx *sql.Tx) error {
			got = got[:0]
			clear(cores)
			live := map[int64]bool{}
			perJob := map[int64]int{}
			upd, err := tx.PrepareContext(ctx, `UPDATE tasks SET state = 'ASSIGNED', attempt = attempt + 1, epoch = ?, pilot = ?, assigned_at = ?, heartbeat_at = ?,
				wait_ms = wait_ms + (? - queued_at) WHERE id = ? AND state = 'WAITING' RETURNING attempt`)
			if err != nil {
				return err
			}
			defer upd.Close()
			for _, p := range chunk {
				ok, seen := live[p.job.id]
				if !seen {
					var st string
					if err := tx.QueryRowContext(ctx, `SELECT state FROM jobs WHERE id = ?`, p.job.id).Scan(&st); err != nil && err != sql.ErrNoRows {
						return err
					}
					ok = st == "WAITING" || st == "RUNNING"
					live[p.job.id] = ok
				}
				if !ok {
					continue
				}
				var attempt int
				err := upd.QueryRowContext(ctx, epoch, holder, ms(now), ms(now), ms(now), p.task.id).Scan(&attempt)
				if err == sql.ErrNoRows {
					continue
				}
				if err != nil {
					return err
				}
				perJob[p.job.id]++
				cores[p.job.owner] += p.job.cores
				got = append(got, taskOf(p, attempt))
			}
			for id, n := range perJob {
				if _, err := tx.ExecContext(ctx, `UPDATE jobs SET n_waiting = n_waiting - ?, n_active = n_active + ?,
					started_at = CASE WHEN started_at = 0 THEN ? ELSE started_at END WHERE id = ?`, n, n, ms(now), id); err != nil {
					return err
				}
				if err := q.refreshJob(ctx, tx, id, ms(now)); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			return out, fmt.Errorf("pull: assign: %w", err)
		}
		q.mu.Lock()
		for owner, c := range cores {
			u := q.userLocked(owner)
			u.running += c
			u.dirty = true
		}
		q.mu.Unlock()
		out = append(out, got...)
	}
	return out, nil
}

func taskOf(p pick, attempt int) pilotproto.Task {
	j := p.job
	return pilotproto.Task{
		ID: p.task.id, JobID: j.id, Owner: j.owner, Attempt: attempt, Name: p.task.name,
		Input: filepath.Join(j.dataset, p.task.name), Output: filepath.Join(j.outputDir, p.task.name),
		OutputDir: j.outputDir, Command: j.argv, BatchSize: j.batchSize, Cores: j.cores, TimeoutS: j.timeoutS,
		Env: []string{"HARVEST_JOB=" + strconv.FormatInt(j.id, 10), "HARVEST_TASK=" + strconv.FormatInt(p.task.id, 10)},
	}
}
