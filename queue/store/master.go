package store

import (
	"cmp"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/harvest-hpc/harvest/pilotproto"
	"github.com/harvest-hpc/harvest/queue/rules"
)

// ReadyJob is a live job with waiting tasks, as a pull plans with it.
type ReadyJob struct {
	ID                        int64
	Owner, Dataset, OutputDir string
	Command                   []string
	Price                     float64
	Cores, BatchSize, Waiting int
	TimeoutS                  int64
}

// ReadyJobs reads the live jobs with waiting tasks, by price (highest
// first), then FIFO.
func (s *Store) ReadyJobs(ctx context.Context) ([]ReadyJob, error) {
	rows, err := s.r.QueryContext(ctx, `SELECT id, owner, dataset, output_dir, command, price, cores, batch_size, timeout_s, n_waiting
		FROM jobs WHERE state IN ('WAITING', 'RUNNING') AND n_waiting > 0 ORDER BY price DESC, id`)
	if err != nil {
		return nil, fmt.Errorf("list ready jobs: %w", err)
	}
	defer rows.Close()
	var out []ReadyJob
	for rows.Next() {
		var j ReadyJob
		var cmd string
		if err := rows.Scan(&j.ID, &j.Owner, &j.Dataset, &j.OutputDir, &cmd, &j.Price, &j.Cores, &j.BatchSize, &j.TimeoutS, &j.Waiting); err != nil {
			return nil, fmt.Errorf("list ready jobs: %w", err)
		}
		if err := json.Unmarshal([]byte(cmd), &j.Command); err != nil {
			return nil, fmt.Errorf("job %d: stored command: %w", j.ID, err)
		}
		out = append(out, j)
	}
	return out, rows.Err()
}

// Take asks for up to N waiting tasks of a job.
type Take struct {
	Job int64
	N   int
}

// TakenTask is a task handed out: ASSIGNED with its new attempt.
type TakenTask struct {
	ID      int64
	Name    string
	Attempt int
}

// Taken is what Assign handed out.
type Taken struct {
	// Tasks maps a job to its tasks handed out, lowest id (FIFO) first.
	// A job that is no longer live, or has fewer waiting tasks than asked
	// for, gives fewer.
	Tasks   map[int64][]TakenTask
	Changes []JobChange
}

// Assign hands out, for each take, the job's waiting tasks of lowest id,
// marking them ASSIGNED to the lease holder under epoch, in one fenced
// transaction.
func (s *Store) Assign(ctx context.Context, epoch int64, now time.Time, takes []Take) (Taken, error) {
	var out Taken
	err := s.fenced(ctx, epoch, now, func(tx *sql.Tx, l rules.Lease) error {
		out = Taken{Tasks: map[int64][]TakenTask{}}
		upd, err := tx.PrepareContext(ctx, `UPDATE tasks SET state = 'ASSIGNED', attempt = attempt + 1, epoch = ?, pilot = ?, assigned_at = ?, heartbeat_at = ?,
			wait_ms = wait_ms + (? - queued_at)
			WHERE id IN (SELECT id FROM tasks WHERE job_id = ? AND state = 'WAITING' ORDER BY id LIMIT ?) RETURNING id, name, attempt`)
		if err != nil {
			return err
		}
		defer upd.Close()
		for _, t := range takes {
			var state string
			if err := tx.QueryRowContext(ctx, `SELECT state FROM jobs WHERE id = ?`, t.Job).Scan(&state); err != nil && !errors.Is(err, sql.ErrNoRows) {
				return err
			}
			if !rules.JobLive(state) || t.N <= 0 {
				continue
			}
			rows, err := upd.QueryContext(ctx, epoch, l.Holder, ms(now), ms(now), ms(now), t.Job, t.N)
			if err != nil {
				return err
			}
			var got []TakenTask
			for rows.Next() {
				var tk TakenTask
				if err := rows.Scan(&tk.ID, &tk.Name, &tk.Attempt); err != nil {
					rows.Close()
					return err
				}
				got = append(got, tk)
			}
			rows.Close()
			if err := rows.Err(); err != nil {
				return err
			}
			if len(got) == 0 {
				continue
			}
			slices.SortFunc(got, func(a, b TakenTask) int { return cmp.Compare(a.ID, b.ID) })
			out.Tasks[t.Job] = append(out.Tasks[t.Job], got...)
			if _, err := tx.ExecContext(ctx, `UPDATE jobs SET n_waiting = n_waiting - ?, n_active = n_active + ?,
				started_at = CASE WHEN started_at = 0 THEN ? ELSE started_at END WHERE id = ?`, len(got), len(got), ms(now), t.Job); err != nil {
				return err
			}
			from, to, err := refreshJob(ctx, tx, t.Job, now)
			if err != nil {
				return err
			}
			if from != to {
				out.Changes = append(out.Changes, JobChange{t.Job, from, to})
			}
		}
		return nil
	})
	if err != nil {
		return Taken{}, fmt.Errorf("assign: %w", err)
	}
	return out, nil
}

// OwnedEvent is a usage event and whose it is.
type OwnedEvent struct {
	Owner string
	Event UsageEvent
}

// Applied is what a batch of results changed.
type Applied struct {
	Applied, Duplicates, Ignored int
	// Running is the change of running cores per owner.
	Running map[string]int
	// Waiting is the change of waiting tasks per job (requeued tasks).
	Waiting map[int64]int
	// Events are the usage of every recorded result (applied or stale).
	Events  []OwnedEvent
	Changes []JobChange
}

// ApplyResults records results in one transaction, fenced by epoch,
// idempotent by (task, attempt): a result recorded before is a duplicate
// and changes nothing; a result for an attempt that is not current
// (rules.ActiveTask.Current) is recorded for usage but changes no task;
// a current one moves its task as rules.AfterResult says.
func (s *Store) ApplyResults(ctx context.Context, epoch int64, now time.Time, results []pilotproto.Result) (Applied, error) {
	var a Applied
	err := s.fenced(ctx, epoch, now, func(tx *sql.Tx, _ rules.Lease) error {
		a = Applied{Running: map[string]int{}, Waiting: map[int64]int{}}
		touched := map[int64]bool{}
		for _, r := range results {
			if err := applyResult(ctx, tx, r, now, &a, touched); err != nil {
				return err
			}
		}
		for id := range touched {
			from, to, err := refreshJob(ctx, tx, id, now)
			if err != nil {
				return err
			}
			if from != to {
				a.Changes = append(a.Changes, JobChange{id, from, to})
			}
		}
		return nil
	})
	if err != nil {
		return Applied{}, fmt.Errorf("apply results: %w", err)
	}
	return a, nil
}

var counterColumn = map[rules.Counter]string{rules.ToWaiting: "n_waiting", rules.ToDone: "n_done", rules.ToFailed: "n_failed"}

func applyResult(ctx context.Context, tx *sql.Tx, r pilotproto.Result, now time.Time, a *Applied, touched map[int64]bool) error {
	var one int
	err := tx.QueryRowContext(ctx, `SELECT 1 FROM results WHERE task_id = ? AND attempt = ?`, r.TaskID, r.Attempt).Scan(&one)
	if err == nil {
		a.Duplicates++
		return nil
	}
	if !errors.Is(err, sql.ErrNoRows) {
		return err
	}
	var t rules.ActiveTask
	var job int64
	var owner string
	var cores int
	var price float64
	err = tx.QueryRowContext(ctx, `SELECT t.state, t.attempt, t.tries, t.job_id, j.owner, j.cores, j.price, j.max_attempts, j.state
		FROM tasks t JOIN jobs j ON j.id = t.job_id WHERE t.id = ?`, r.TaskID).
		Scan(&t.State, &t.Attempt, &t.Tries, &job, &owner, &cores, &price, &t.MaxAttempts, &t.JobState)
	if errors.Is(err, sql.ErrNoRows) {
		a.Ignored++
		return nil
	}
	if err != nil {
		return err
	}
	current := t.Current(r.Attempt)
	cpu := float64(cores) * float64(r.DurationMS) / 1000
	ev := UsageEvent{At: ms(now), CPU: cpu, Cost: cpu * price}
	if _, err = tx.ExecContext(ctx, `INSERT INTO results (task_id, attempt, job_id, owner, status, exit_code, started_at, duration_ms, pilot, error_tail, cpu_s, cost, received_at, applied)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
		r.TaskID, r.Attempt, job, owner, r.Status, r.ExitCode, r.StartedAt, r.DurationMS, r.Pilot, r.ErrorTail, ev.CPU, ev.Cost, ms(now), current); err != nil {
		return err
	}
	a.Events = append(a.Events, OwnedEvent{owner, ev})
	if !current {
		a.Ignored++
		return nil
	}
	tr := rules.AfterResult(t, r.Status)
	inc, fin := 0, int64(0)
	if tr.CountsTry {
		inc = 1
	}
	if tr.Final() {
		fin = ms(now)
	}
	if _, err = tx.ExecContext(ctx, `UPDATE tasks SET state = ?, tries = tries + ?, exit_code = ?, last_error = ?, finished_at = ?,
		queued_at = CASE WHEN ? THEN ? ELSE queued_at END WHERE id = ?`,
		tr.State, inc, r.ExitCode, r.ErrorTail, fin, !tr.Final(), ms(now), r.TaskID); err != nil {
		return err
	}
	col := counterColumn[tr.Counter]
	if _, err = tx.ExecContext(ctx, `UPDATE jobs SET n_active = n_active - 1, `+col+` = `+col+` + 1 WHERE id = ?`, job); err != nil {
		return err
	}
	a.Applied++
	a.Running[owner] -= cores
	if !tr.Final() {
		a.Waiting[job]++
	}
	touched[job] = true
	return nil
}

// Heartbeat renews the lease of epoch and keeps the listed attempts alive
// (ASSIGNED or ZOMBIE become RUNNING), in one fenced transaction. It
// returns the renewed lease.
func (s *Store) Heartbeat(ctx context.Context, epoch int64, now time.Time, ttl time.Duration, refs []pilotproto.TaskRef) (rules.Lease, error) {
	var next rules.Lease
	err := s.fenced(ctx, epoch, now, func(tx *sql.Tx, l rules.Lease) error {
		next = l
		next.Expires = now.Add(ttl)
		if err := saveLease(ctx, tx, next); err != nil {
			return err
		}
		if len(refs) == 0 {
			return nil
		}
		stmt, err := tx.PrepareContext(ctx, `UPDATE tasks SET state = 'RUNNING', heartbeat_at = ? WHERE id = ? AND attempt = ? AND state IN ('ASSIGNED', 'RUNNING', 'ZOMBIE')`)
		if err != nil {
			return err
		}
		defer stmt.Close()
		for _, r := range refs {
			if _, err := stmt.ExecContext(ctx, ms(now), r.TaskID, r.Attempt); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return rules.Lease{}, fmt.Errorf("heartbeat: %w", err)
	}
	return next, nil
}

// ActiveTasksBefore lists the active tasks assigned under an epoch older
// than epoch.
func (s *Store) ActiveTasksBefore(ctx context.Context, epoch int64) ([]pilotproto.TaskRef, error) {
	rows, err := s.r.QueryContext(ctx, `SELECT id, attempt FROM tasks WHERE state IN ('ASSIGNED', 'RUNNING', 'ZOMBIE') AND epoch < ?`, epoch)
	if err != nil {
		return nil, fmt.Errorf("find tasks of older epochs: %w", err)
	}
	defer rows.Close()
	var out []pilotproto.TaskRef
	for rows.Next() {
		var r pilotproto.TaskRef
		if err := rows.Scan(&r.TaskID, &r.Attempt); err != nil {
			return nil, fmt.Errorf("find tasks of older epochs: %w", err)
		}
		out = append(out, r)
	}
	return out, rows.Err()
}
