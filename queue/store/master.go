package store

import (
	"cmp"
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"github.com/harvest-hpc/harvest/pilotproto"
	"github.com/harvest-hpc/harvest/queue/rules"
)

// ReadyJob is a live job (WAITING or RUNNING) as a pull plans with it:
// what its tasks are made of, and how many wait.
type ReadyJob struct {
	ID                        int64
	Owner, Dataset, OutputDir string
	Command                   []string
	Price                     float64
	Cores, BatchSize, Waiting int
	TimeoutS                  int64
}

// LiveJobs reads every live job (WAITING or RUNNING), by price (highest
// first), then FIFO.
func (s *Store) LiveJobs(ctx context.Context) ([]ReadyJob, error) {
	rows, err := s.r.QueryContext(ctx, `SELECT id, owner, dataset, output_dir, command, price, cores, batch_size, timeout_s, n_waiting
		FROM jobs WHERE state IN ('WAITING', 'RUNNING') ORDER BY price DESC, id`)
	if err != nil {
		return nil, fmt.Errorf("list live jobs: %w", err)
	}
	defer rows.Close()
	var out []ReadyJob
	for rows.Next() {
		var j ReadyJob
		var cmd string
		if err := rows.Scan(&j.ID, &j.Owner, &j.Dataset, &j.OutputDir, &cmd, &j.Price, &j.Cores, &j.BatchSize, &j.TimeoutS, &j.Waiting); err != nil {
			return nil, fmt.Errorf("list live jobs: %w", err)
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
	Tasks map[int64][]TakenTask
	// Gone lists the jobs asked for that are no longer live.
	Gone    []int64
	Changes []JobChange
}

var assignSQL = hot(`WITH RECURSIVE w(job, n) AS (SELECT value->>0, value->>1 FROM jsonb_each(?1)),
			pick(job, n, id) AS (
				SELECT job, n, (SELECT id FROM tasks WHERE job_id = w.job AND state = 'WAITING' ORDER BY id LIMIT 1) FROM w
				UNION ALL
				SELECT job, n - 1, (SELECT id FROM tasks WHERE job_id = pick.job AND state = 'WAITING' AND id > pick.id ORDER BY id LIMIT 1)
				FROM pick WHERE n > 1 AND id IS NOT NULL)
			UPDATE tasks SET state = 'ASSIGNED', attempt = attempt + 1, epoch = ?2, pilot = ?3, assigned_at = ?4, heartbeat_at = ?4,
				wait_ms = wait_ms + (?4 - queued_at), pool = ?5
			WHERE id IN (SELECT id FROM pick WHERE id IS NOT NULL) RETURNING id, job_id, name, attempt`)

// Assign hands out, for each take, the job's waiting tasks of lowest id,
// marking them ASSIGNED to the pool's lease holder under epoch, in one
// fenced transaction of four statements whatever the number of takes.
func (s *Store) Assign(ctx context.Context, pool string, epoch int64, now time.Time, takes []Take) (Taken, error) {
	var out Taken
	err := s.fenced(ctx, pool, epoch, now, func(tx *sql.Tx, l rules.Lease) error {
		out = Taken{Tasks: map[int64][]TakenTask{}}
		ids := make([]int64, 0, len(takes))
		for _, t := range takes {
			ids = append(ids, t.Job)
		}
		jobs, err := s.readJobs(ctx, tx, ids)
		if err != nil {
			return err
		}
		want := make([][2]int64, 0, len(takes))
		for _, t := range takes {
			j := jobs[t.Job]
			if j == nil || !rules.JobLive(j.state) {
				out.Gone = append(out.Gone, t.Job)
				delete(jobs, t.Job)
				continue
			}
			if t.N > 0 {
				want = append(want, [2]int64{t.Job, int64(t.N)})
			}
		}
		if len(want) == 0 {
			return nil
		}
		arg, err := jsonArg(want)
		if err != nil {
			return err
		}
		// pick walks each job's WAITING tasks in id order through the
		// (job_id, state, id) index: one seek per task handed out.
		rows, err := s.query(ctx, tx, assignSQL, arg, epoch, l.Holder, ms(now), pool)
		if err != nil {
			return err
		}
		for rows.Next() {
			var tk TakenTask
			var job int64
			if err := rows.Scan(&tk.ID, &job, &tk.Name, &tk.Attempt); err != nil {
				rows.Close()
				return err
			}
			out.Tasks[job] = append(out.Tasks[job], tk)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
		for id, ts := range out.Tasks {
			slices.SortFunc(ts, func(a, b TakenTask) int { return cmp.Compare(a.ID, b.ID) })
			j := jobs[id]
			j.c.Waiting -= len(ts)
			j.c.Active += len(ts)
			if j.started == 0 {
				j.started = ms(now)
			}
		}
		for id := range jobs {
			if len(out.Tasks[id]) == 0 {
				delete(jobs, id) // nothing changed
			}
		}
		out.Changes, err = s.writeJobs(ctx, tx, jobs, now)
		return err
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
	// Outcomes are the applied results, for the per-site figures.
	Outcomes []Outcome
	// LostMS is the run time of the interrupted attempts recorded: task
	// time lost to pilots that ended under their tasks.
	LostMS int64
}

// Outcome is one applied result: its job, its status, how long it took
// from its hand-out to its result and how long it ran.
type Outcome struct {
	Job                      int64
	Status                   string
	TurnaroundMS, DurationMS int64
}

// ApplyResults records a pool's results in one transaction, fenced by the
// pool's epoch, idempotent by (task, attempt): a result recorded before is
// a duplicate and changes nothing; a result for an attempt that is not
// current (rules.ActiveTask.Current) is recorded for usage but changes no
// task; a current one moves its task as rules.AfterResult says. A result
// for the current attempt of a task handed to another pool is ignored and
// not recorded, so it cannot take the place of the real one. Six
// statements whatever the number of results.
func (s *Store) ApplyResults(ctx context.Context, pool string, epoch int64, now time.Time, results []pilotproto.Result) (Applied, error) {
	var a Applied
	err := s.fenced(ctx, pool, epoch, now, func(tx *sql.Tx, _ rules.Lease) error {
		var err error
		a, err = s.applyResults(ctx, tx, pool, results, now)
		return err
	})
	if err != nil {
		return Applied{}, fmt.Errorf("apply results: %w", err)
	}
	return a, nil
}

// resultTask is what applying a result needs of its task.
type resultTask struct {
	found, recorded bool
	task            rules.ActiveTask
	job             int64
	pool            string
	assigned        int64 // Unix ms
}

// poolCounter is the job_pools column a result's status counts in.
var poolCounter = map[string]int{pilotproto.StatusDone: 0, pilotproto.StatusFailed: 1, pilotproto.StatusTimeout: 1}

var finishTasksSQL = hot(`UPDATE tasks SET state = d.v->>1, tries = tries + (d.v->>2), exit_code = d.v->>3, last_error = d.v->>4, finished_at = d.v->>5,
			queued_at = CASE WHEN d.v->>6 THEN ?2 ELSE queued_at END
			FROM (SELECT value AS v FROM jsonb_each(?1)) AS d WHERE tasks.id = d.v->>0`)

var countPoolsSQL = hot(`INSERT INTO job_pools (job_id, pool, done, failed)
			SELECT value->>0, ?2, value->>1, value->>2 FROM jsonb_each(?1) WHERE true
			ON CONFLICT (job_id, pool) DO UPDATE SET done = done + excluded.done, failed = failed + excluded.failed`)

var insertResultsSQL = hot(`INSERT INTO results (task_id, attempt, job_id, owner, status, exit_code, started_at, duration_ms, pilot, error_tail, cpu_s, cost, received_at, applied, pool)
			SELECT value->>0, value->>1, value->>2, value->>3, value->>4, value->>5, value->>6, value->>7, value->>8, value->>9, value->>10, value->>11, ?2, value->>12, value->>13
			FROM jsonb_each(?1)`)

var resultTasksSQL = hot(`SELECT r.key, t.id IS NOT NULL, coalesce(t.state, ''), coalesce(t.attempt, 0), coalesce(t.tries, 0), coalesce(t.job_id, 0),
			coalesce(t.pool, ''), coalesce(t.assigned_at, 0),
			EXISTS (SELECT 1 FROM results x WHERE x.task_id = r.value->>0 AND x.attempt = r.value->>1)
		FROM jsonb_each(?) AS r LEFT JOIN tasks t ON t.id = r.value->>0`)

func (s *Store) applyResults(ctx context.Context, tx *sql.Tx, pool string, results []pilotproto.Result, now time.Time) (Applied, error) {
	a := Applied{Running: map[string]int{}, Waiting: map[int64]int{}}
	keys := make([][2]int64, len(results))
	for i, r := range results {
		keys[i] = [2]int64{r.TaskID, int64(r.Attempt)}
	}
	arg, err := jsonArg(keys)
	if err != nil {
		return a, err
	}
	rows, err := s.query(ctx, tx, resultTasksSQL, arg)
	if err != nil {
		return a, err
	}
	info := make([]resultTask, len(results))
	var jobIDs []int64
	for rows.Next() {
		var i int
		var rt resultTask
		if err := rows.Scan(&i, &rt.found, &rt.task.State, &rt.task.Attempt, &rt.task.Tries, &rt.job, &rt.pool, &rt.assigned, &rt.recorded); err != nil {
			rows.Close()
			return a, err
		}
		info[i] = rt
		if rt.found {
			jobIDs = append(jobIDs, rt.job)
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return a, err
	}
	jobs, err := s.readJobs(ctx, tx, jobIDs)
	if err != nil {
		return a, err
	}
	var inserts, updates [][]any
	perJob := map[int64]*[2]int{} // done and failed attempts of this pool per job
	seen := make(map[[2]int64]bool, len(results))
	touched := map[int64]*jobRow{}
	for i, r := range results {
		rt := info[i]
		if rt.recorded || seen[keys[i]] {
			a.Duplicates++
			continue
		}
		j := jobs[rt.job]
		if !rt.found || j == nil || (r.Attempt == rt.task.Attempt && rt.pool != pool) {
			a.Ignored++
			continue
		}
		seen[keys[i]] = true
		rt.task.MaxAttempts, rt.task.JobState = j.maxTries, j.from
		current := rt.task.Current(r.Attempt)
		cpu := float64(j.cores) * float64(r.DurationMS) / 1000
		ev := UsageEvent{At: ms(now), CPU: cpu, Cost: cpu * j.price}
		inserts = append(inserts, []any{r.TaskID, r.Attempt, rt.job, j.owner, r.Status, r.ExitCode, r.StartedAt, r.DurationMS, r.Pilot, r.ErrorTail, ev.CPU, ev.Cost, current, pool})
		a.Events = append(a.Events, OwnedEvent{j.owner, ev})
		if r.Status == pilotproto.StatusInterrupted {
			a.LostMS += r.DurationMS
		}
		if !current {
			a.Ignored++
			continue
		}
		tr := rules.AfterResult(rt.task, r.Status)
		inc, fin := 0, int64(0)
		if tr.CountsTry {
			inc = 1
		}
		if tr.Final() {
			fin = ms(now)
		}
		updates = append(updates, []any{r.TaskID, tr.State, inc, r.ExitCode, r.ErrorTail, fin, !tr.Final()})
		j.c.Active--
		switch tr.Counter {
		case rules.ToWaiting:
			j.c.Waiting++
			a.Waiting[rt.job]++
		case rules.ToDone:
			j.c.Done++
		case rules.ToFailed:
			j.c.Failed++
		}
		touched[rt.job] = j
		if col, ok := poolCounter[r.Status]; ok {
			c := perJob[rt.job]
			if c == nil {
				c = &[2]int{}
				perJob[rt.job] = c
			}
			c[col]++
		}
		a.Outcomes = append(a.Outcomes, Outcome{Job: rt.job, Status: r.Status, TurnaroundMS: max(0, ms(now)-rt.assigned), DurationMS: r.DurationMS})
		a.Applied++
		a.Running[j.owner] -= j.cores
	}
	if len(inserts) > 0 {
		arg, err := jsonArg(inserts)
		if err != nil {
			return a, err
		}
		if _, err := s.exec(ctx, tx, insertResultsSQL, arg, ms(now)); err != nil {
			return a, fmt.Errorf("record results: %w", err)
		}
	}
	if len(perJob) > 0 {
		counts := make([][3]int64, 0, len(perJob))
		for job, c := range perJob {
			counts = append(counts, [3]int64{job, int64(c[0]), int64(c[1])})
		}
		arg, err := jsonArg(counts)
		if err != nil {
			return a, err
		}
		if _, err := s.exec(ctx, tx, countPoolsSQL, arg, pool); err != nil {
			return a, fmt.Errorf("count results per pool: %w", err)
		}
	}
	if len(updates) > 0 {
		arg, err := jsonArg(updates)
		if err != nil {
			return a, err
		}
		if _, err := s.exec(ctx, tx, finishTasksSQL, arg, ms(now)); err != nil {
			return a, fmt.Errorf("update tasks: %w", err)
		}
	}
	a.Changes, err = s.writeJobs(ctx, tx, touched, now)
	return a, err
}

var heartbeatTasksSQL = hot(`UPDATE tasks SET state = 'RUNNING', heartbeat_at = ?2
			FROM (SELECT value AS v FROM jsonb_each(?1)) AS d
			WHERE tasks.id = d.v->>0 AND tasks.attempt = d.v->>1 AND tasks.pool = ?3 AND tasks.state IN ('ASSIGNED', 'RUNNING', 'ZOMBIE')`)

// Heartbeat renews the pool's lease of epoch and keeps the listed attempts
// of the pool alive (ASSIGNED or ZOMBIE become RUNNING), in one fenced
// transaction. It returns the renewed lease.
func (s *Store) Heartbeat(ctx context.Context, pool string, epoch int64, now time.Time, ttl time.Duration, refs []pilotproto.TaskRef) (rules.Lease, error) {
	var next rules.Lease
	err := s.fenced(ctx, pool, epoch, now, func(tx *sql.Tx, l rules.Lease) error {
		next = l
		next.Expires = now.Add(ttl)
		if err := s.saveLease(ctx, tx, pool, next); err != nil {
			return err
		}
		if len(refs) == 0 {
			return nil
		}
		keys := make([][2]int64, len(refs))
		for i, r := range refs {
			keys[i] = [2]int64{r.TaskID, int64(r.Attempt)}
		}
		arg, err := jsonArg(keys)
		if err != nil {
			return err
		}
		_, err = s.exec(ctx, tx, heartbeatTasksSQL, arg, ms(now), pool)
		return err
	})
	if err != nil {
		return rules.Lease{}, fmt.Errorf("heartbeat: %w", err)
	}
	return next, nil
}

// ActiveTasksBefore lists the pool's active tasks assigned under an epoch
// older than epoch.
func (s *Store) ActiveTasksBefore(ctx context.Context, pool string, epoch int64) ([]pilotproto.TaskRef, error) {
	rows, err := s.r.QueryContext(ctx, `SELECT id, attempt FROM tasks WHERE state IN ('ASSIGNED', 'RUNNING', 'ZOMBIE') AND pool = ? AND epoch < ?`, pool, epoch)
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

// Outstanding counts the active tasks (handed out, not finished) of each
// pool.
func (s *Store) Outstanding(ctx context.Context) (map[string]int, error) {
	rows, err := s.r.QueryContext(ctx, `SELECT pool, count(*) FROM tasks WHERE state IN ('ASSIGNED', 'RUNNING', 'ZOMBIE') GROUP BY pool`)
	if err != nil {
		return nil, fmt.Errorf("count tasks per pool: %w", err)
	}
	defer rows.Close()
	out := map[string]int{}
	for rows.Next() {
		var pool string
		var n int
		if err := rows.Scan(&pool, &n); err != nil {
			return nil, fmt.Errorf("count tasks per pool: %w", err)
		}
		out[pool] = n
	}
	return out, rows.Err()
}

// JobPools returns, per pool, the done and failed attempts of a job: where
// its tasks ran.
func (s *Store) JobPools(ctx context.Context, job int64) (map[string][2]int, error) {
	rows, err := s.r.QueryContext(ctx, `SELECT pool, done, failed FROM job_pools WHERE job_id = ?`, job)
	if err != nil {
		return nil, fmt.Errorf("job %d per pool: %w", job, err)
	}
	defer rows.Close()
	out := map[string][2]int{}
	for rows.Next() {
		var pool string
		var d, f int
		if err := rows.Scan(&pool, &d, &f); err != nil {
			return nil, fmt.Errorf("job %d per pool: %w", job, err)
		}
		out[pool] = [2]int{d, f}
	}
	return out, rows.Err()
}
