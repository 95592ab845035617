package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/harvest-hpc/harvest/pilotproto"
	"github.com/harvest-hpc/harvest/queue/api"
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
	if err := s.settle(ctx); err != nil {
		return nil, err
	}
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

// waitingSQL lists, per job, up to n WAITING task ids above after, lowest
// first, from the index of waiting tasks alone (it covers them): one seek
// per job, then neighbouring entries.
var waitingSQL = hot(`WITH RECURSIVE w(job, n, after) AS (SELECT value->>0, value->>1, value->>2 FROM jsonb_each(?1)),
			pick(job, n, id) AS (
				SELECT job, n, (SELECT id FROM tasks WHERE job_id = w.job AND state = 'WAITING' AND id > w.after ORDER BY id LIMIT 1) FROM w
				UNION ALL
				SELECT job, n - 1, (SELECT id FROM tasks WHERE job_id = pick.job AND state = 'WAITING' AND id > pick.id ORDER BY id LIMIT 1)
				FROM pick WHERE n > 1 AND id IS NOT NULL)
			SELECT job, id FROM pick WHERE id IS NOT NULL`)

// readAhead is how many WAITING task ids beyond a take a job's index read
// keeps (overlay.ahead): with many users a pull takes one task of each of
// many jobs, and one seek then serves the job's next pulls.
const readAhead = 16

// pickWaiting returns, per job of want ([job, n]), its n waiting tasks of
// lowest id (fewer when it has fewer), as copies in id order, merging
// three sources: the overlay's WAITING tasks (requeued), the ids read
// ahead, and the table's index above the job's cursor (less the tasks the
// overlay holds). The index is asked only when the first two have fewer
// than n, or the overlay holds a WAITING task above the cursor (requeued
// after it was read back from the table: lower ids may wait in the
// index). c gets the new cursors and read-ahead lists.
func (s *Store) pickWaiting(ctx context.Context, tx *sql.Tx, want [][2]int64, c *change) (map[int64][]*taskRow, error) {
	o := &s.ov
	from := map[int64][]int64{} // ids from the index, per job, ascending
	after := map[int64]int64{}
	var need [][2]int64
	target := map[int64]int{} // ids wanted from the index per job
	for _, w := range want {
		l := o.waiting[w[0]]
		if len(l)+len(o.ahead[w[0]]) < int(w[1]) || (len(l) > 0 && l[len(l)-1] > o.cursor[w[0]]) {
			target[w[0]] = int(w[1]) + readAhead
			need = append(need, [2]int64{w[0], int64(target[w[0]])})
		}
	}
	for len(need) > 0 {
		q := make([][3]int64, 0, len(need))
		for _, w := range need {
			a, seen := after[w[0]]
			if !seen {
				a = o.cursor[w[0]]
			}
			q = append(q, [3]int64{w[0], w[1], a})
		}
		got := map[int64]int{}
		err := s.eachRow(ctx, tx, waitingSQL, q, func(rows *sql.Rows) error {
			var job, id int64
			if err := rows.Scan(&job, &id); err != nil {
				return err
			}
			got[job]++
			after[job] = max(after[job], id)
			if o.tasks[id] == nil { // else the overlay's row is the task's
				from[job] = append(from[job], id)
			}
			return nil
		})
		if err != nil {
			return nil, err
		}
		// A job whose ids were all there but some are the overlay's may
		// have more above them.
		var again [][2]int64
		for _, w := range need {
			if short := target[w[0]] - len(from[w[0]]); short > 0 && got[w[0]] == int(w[1]) {
				again = append(again, [2]int64{w[0], int64(short)})
			}
		}
		need = again
	}
	c.cursor = map[int64]int64{}
	for job, id := range after {
		c.cursor[job] = id // every id the index gave is now the overlay's or ahead
	}
	c.ahead = map[int64][]int64{}
	type pick struct {
		job, id int64
		row     *taskRow // the overlay's, else read below
	}
	var picks []pick
	var read []int64
	for _, w := range want {
		job, n := w[0], int(w[1])
		listed := o.waiting[job]
		// ahead and the index's ids are disjoint and both ascending, all
		// of the index's above the old cursor: one list.
		table := append(slices.Clone(o.ahead[job]), from[job]...)
		taken := 0
		for taken < n && (len(table) > 0 || len(listed) > 0) {
			if len(listed) > 0 && (len(table) == 0 || listed[0] < table[0]) {
				picks = append(picks, pick{job: job, id: listed[0], row: o.tasks[listed[0]]})
				listed = listed[1:]
			} else {
				picks = append(picks, pick{job: job, id: table[0]})
				read = append(read, table[0])
				table = table[1:]
			}
			taken++
		}
		if _, had := o.ahead[job]; had || len(table) > 0 {
			c.ahead[job] = table
		}
	}
	rows, err := s.readTaskRows(ctx, tx, read)
	if err != nil {
		return nil, err
	}
	out := make(map[int64][]*taskRow, len(want))
	for _, p := range picks {
		var t *taskRow
		if p.row != nil {
			cp := *p.row
			t = &cp
		} else if t = rows[p.id]; t == nil {
			return nil, fmt.Errorf("task %d: listed waiting, but not in the table", p.id)
		}
		out[p.job] = append(out[p.job], t)
	}
	return out, nil
}

// Assign hands out, for each take, the job's waiting tasks of lowest id,
// marking them ASSIGNED to the pool's lease holder under epoch, in one
// fenced transaction that journals the tasks and jobs it changed.
func (s *Store) Assign(ctx context.Context, pool string, epoch int64, now time.Time, takes []Take) (Taken, error) {
	s.hot.Lock()
	defer s.hot.Unlock()
	if err := s.beforeHot(ctx); err != nil {
		return Taken{}, fmt.Errorf("assign: %w", err)
	}
	// Plan on a reader, outside the write transaction: s.hot keeps the
	// tables and the overlay still meanwhile. The holder written into
	// the tasks is the cached lease's, checked again inside the fence.
	l, err := s.Lease(ctx, pool)
	if err == nil {
		err = rules.CheckEpoch(l, epoch, now)
	}
	if err != nil {
		return Taken{}, fmt.Errorf("assign: %w", err)
	}
	out, c, err := s.planAssign(ctx, pool, epoch, l.Holder, now, takes)
	if err != nil {
		return Taken{}, fmt.Errorf("assign: %w", err)
	}
	c.encode()
	err = s.fenced(ctx, pool, epoch, now, func(tx *sql.Tx, l2 rules.Lease) error {
		if l2.Holder != l.Holder {
			return fmt.Errorf("%w: the lease changed hands", api.ErrStaleEpoch)
		}
		return s.journal(ctx, tx, &c)
	})
	if err != nil {
		return Taken{}, fmt.Errorf("assign: %w", err)
	}
	s.ov.apply(&c)
	return out, nil
}

// planAssign picks the tasks of takes and computes what handing them out
// changes (s.hot held).
func (s *Store) planAssign(ctx context.Context, pool string, epoch int64, holder string, now time.Time, takes []Take) (Taken, change, error) {
	out, c := Taken{Tasks: map[int64][]TakenTask{}}, change{}
	ids := make([]int64, 0, len(takes))
	for _, t := range takes {
		ids = append(ids, t.Job)
	}
	jobs, err := s.jobRows(ctx, nil, ids)
	if err != nil {
		return out, c, err
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
		return out, c, nil
	}
	picked, err := s.pickWaiting(ctx, nil, want, &c)
	if err != nil {
		return out, c, err
	}
	at := ms(now)
	for id, ts := range picked {
		if len(ts) == 0 {
			continue
		}
		for _, t := range ts {
			t.state, t.attempt, t.epoch, t.pilot, t.pool = api.TaskAssigned, t.attempt+1, epoch, holder, pool
			t.assignedAt, t.heartbeatAt, t.waitMS = at, at, t.waitMS+(at-t.queuedAt)
			out.Tasks[id] = append(out.Tasks[id], TakenTask{ID: t.id, Name: t.name, Attempt: t.attempt})
			c.tasks = append(c.tasks, t)
		}
		j := jobs[id]
		j.c.Waiting -= len(ts)
		j.c.Active += len(ts)
		if j.started == 0 {
			j.started = at
		}
		if ch := settleJob(j, now); ch != nil {
			out.Changes = append(out.Changes, *ch)
		}
		c.jobs = append(c.jobs, j)
	}
	return out, c, nil
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
	s.hot.Lock()
	defer s.hot.Unlock()
	if err := s.beforeHot(ctx); err != nil {
		return Applied{}, fmt.Errorf("apply results: %w", err)
	}
	// Early refusal from the cached lease, then the plan on a reader,
	// outside the write transaction (s.hot keeps everything still); the
	// fence is checked again inside it.
	l, err := s.Lease(ctx, pool)
	if err == nil {
		err = rules.CheckEpoch(l, epoch, now)
	}
	if err != nil {
		return Applied{}, fmt.Errorf("apply results: %w", err)
	}
	var c change
	a, err := s.applyResults(ctx, nil, pool, results, now, &c)
	if err != nil {
		return Applied{}, fmt.Errorf("apply results: %w", err)
	}
	c.encode()
	err = s.fenced(ctx, pool, epoch, now, func(tx *sql.Tx, _ rules.Lease) error {
		return s.journal(ctx, tx, &c)
	})
	if err != nil {
		return Applied{}, fmt.Errorf("apply results: %w", err)
	}
	s.ov.apply(&c)
	return a, nil
}

// poolCounter is the job_pools column a result's status counts in.
var poolCounter = map[string]int{pilotproto.StatusDone: 0, pilotproto.StatusFailed: 1, pilotproto.StatusTimeout: 1}

// recordedSQL lists which of the (task, attempt) keys have a stored result.
var recordedSQL = hot(`SELECT r.key FROM jsonb_each(?) AS r
		WHERE EXISTS (SELECT 1 FROM results x WHERE x.task_id = r.value->>0 AND x.attempt = r.value->>1)`)

func (s *Store) applyResults(ctx context.Context, tx *sql.Tx, pool string, results []pilotproto.Result, now time.Time, c *change) (Applied, error) {
	a := Applied{Running: map[string]int{}, Waiting: map[int64]int{}}
	keys := make([][2]int64, len(results))
	taskIDs := make([]int64, len(results))
	for i, r := range results {
		keys[i] = [2]int64{r.TaskID, int64(r.Attempt)}
		taskIDs[i] = r.TaskID
	}
	tasks, err := s.taskRows(ctx, tx, taskIDs)
	if err != nil {
		return a, err
	}
	// Which results are recorded already: pending ones are in the
	// overlay; a task active with the result's attempt has none (a result
	// of an attempt is recorded when it ends the attempt, or when the
	// task has moved on from it, and hand-outs only raise the attempt);
	// the table is asked about the rest.
	var ask [][2]int64
	var askAt []int
	recorded := make([]bool, len(results))
	for i, r := range results {
		switch t := tasks[r.TaskID]; {
		case s.ov.results[keys[i]] != nil:
			recorded[i] = true
		case t != nil && taskActive(t.state) && t.attempt == r.Attempt:
		default:
			ask = append(ask, keys[i])
			askAt = append(askAt, i)
		}
	}
	if len(ask) > 0 {
		err := s.eachRow(ctx, tx, recordedSQL, ask, func(rows *sql.Rows) error {
			var k int
			if err := rows.Scan(&k); err != nil {
				return err
			}
			recorded[askAt[k]] = true
			return nil
		})
		if err != nil {
			return a, err
		}
	}
	jobIDs := make([]int64, 0, len(tasks))
	for _, t := range tasks {
		jobIDs = append(jobIDs, t.job)
	}
	jobs, err := s.jobRows(ctx, tx, jobIDs)
	if err != nil {
		return a, err
	}
	c.results = map[[2]int64][]byte{}
	perJob := map[int64]*[2]int{} // done and failed attempts of this pool per job
	touchedT := map[int64]*taskRow{}
	touched := map[int64]*jobRow{}
	for i, r := range results {
		if recorded[i] || c.results[keys[i]] != nil {
			a.Duplicates++
			continue
		}
		t := tasks[r.TaskID]
		var j *jobRow
		if t != nil {
			j = jobs[t.job]
		}
		if t == nil || j == nil || (r.Attempt == t.attempt && t.pool != pool) {
			a.Ignored++
			continue
		}
		act := rules.ActiveTask{State: t.state, Attempt: t.attempt, Tries: t.tries, MaxAttempts: j.maxTries, JobState: j.from}
		current := act.Current(r.Attempt)
		cpu := float64(j.cores) * float64(r.DurationMS) / 1000
		ev := UsageEvent{At: ms(now), CPU: cpu, Cost: cpu * j.price}
		c.results[keys[i]] = appendResult(nil, r, t.job, j.owner, ev, ms(now), current, pool)
		a.Events = append(a.Events, OwnedEvent{j.owner, ev})
		if r.Status == pilotproto.StatusInterrupted {
			a.LostMS += r.DurationMS
		}
		if !current {
			a.Ignored++
			continue
		}
		tr := rules.AfterResult(act, r.Status)
		t.state, t.exitCode = tr.State, r.ExitCode
		if tr.CountsTry {
			// The error of the last attempt that counted (failed, timed
			// out; the sweep writes an expiry's): Failures reads it.
			t.tries++
			t.lastError = lastError(r.ErrorTail)
		}
		t.finishedAt = 0
		if tr.Final() {
			t.finishedAt = ms(now)
		} else {
			t.queuedAt = ms(now)
		}
		touchedT[t.id] = t
		j.c.Active--
		switch tr.Counter {
		case rules.ToWaiting:
			j.c.Waiting++
			a.Waiting[t.job]++
		case rules.ToDone:
			j.c.Done++
		case rules.ToFailed:
			j.c.Failed++
		}
		touched[t.job] = j
		if col, ok := poolCounter[r.Status]; ok {
			pc := perJob[t.job]
			if pc == nil {
				pc = &[2]int{}
				perJob[t.job] = pc
			}
			pc[col]++
		}
		a.Outcomes = append(a.Outcomes, Outcome{Job: t.job, Status: r.Status, TurnaroundMS: max(0, ms(now)-t.assignedAt), DurationMS: r.DurationMS})
		a.Applied++
		a.Running[j.owner] -= j.cores
	}
	if len(perJob) > 0 {
		pk := make([]poolKey, 0, len(perJob))
		for job := range perJob {
			pk = append(pk, poolKey{job, pool})
		}
		rows, err := s.poolRows(ctx, tx, pk)
		if err != nil {
			return a, err
		}
		c.pools = rows
		for job, n := range perJob {
			p := rows[poolKey{job, pool}]
			p.done += n[0]
			p.failed += n[1]
		}
	}
	for _, t := range touchedT {
		c.tasks = append(c.tasks, t)
	}
	for _, j := range touched {
		if ch := settleJob(j, now); ch != nil {
			a.Changes = append(a.Changes, *ch)
		}
		c.jobs = append(c.jobs, j)
	}
	return a, nil
}

// appendResult encodes a result's row of the results table (the order of
// foldResultsSQL).
func appendResult(b []byte, r pilotproto.Result, job int64, owner string, ev UsageEvent, received int64, applied bool, pool string) []byte {
	b = append(b, '[')
	for _, v := range []int64{r.TaskID, int64(r.Attempt), job} {
		b = strconv.AppendInt(b, v, 10)
		b = append(b, ',')
	}
	b = appendString(b, owner)
	b = append(b, ',')
	b = appendString(b, r.Status)
	for _, v := range []int64{int64(r.ExitCode), r.StartedAt, r.DurationMS} {
		b = append(b, ',')
		b = strconv.AppendInt(b, v, 10)
	}
	b = append(b, ',')
	b = appendString(b, r.Pilot)
	b = append(b, ',')
	b = appendString(b, r.ErrorTail)
	b = append(b, ',')
	b = appendFloat(b, ev.CPU)
	b = append(b, ',')
	b = appendFloat(b, ev.Cost)
	b = append(b, ',')
	b = strconv.AppendInt(b, received, 10)
	b = append(b, ',')
	if applied {
		b = append(b, '1')
	} else {
		b = append(b, '0')
	}
	b = append(b, ',')
	b = appendString(b, pool)
	return append(b, ']')
}

// Heartbeat renews the pool's lease of epoch and keeps the listed attempts
// of the pool alive (ASSIGNED or ZOMBIE become RUNNING), in one fenced
// transaction. It returns the renewed lease.
func (s *Store) Heartbeat(ctx context.Context, pool string, epoch int64, now time.Time, ttl time.Duration, refs []pilotproto.TaskRef) (rules.Lease, error) {
	s.hot.Lock()
	defer s.hot.Unlock()
	if err := s.beforeHot(ctx); err != nil {
		return rules.Lease{}, fmt.Errorf("heartbeat: %w", err)
	}
	var c change
	var quiet []*taskRow // RUNNING, in the overlay, journalled less than hbEvery ago
	if len(refs) > 0 {
		ids := make([]int64, len(refs))
		for i, r := range refs {
			ids[i] = r.TaskID
		}
		tasks, err := s.taskRows(ctx, nil, ids)
		if err != nil {
			return rules.Lease{}, fmt.Errorf("heartbeat: %w", err)
		}
		for _, r := range refs {
			t := tasks[r.TaskID]
			if t == nil || t.attempt != r.Attempt || t.pool != pool || !taskActive(t.state) {
				continue
			}
			delete(tasks, r.TaskID) // listed twice: once
			if t.state == api.TaskRunning && ms(now)-t.syncedHB < s.hbEvery.Milliseconds() {
				quiet = append(quiet, t) // its time moves in memory, below
				continue
			}
			t.state, t.heartbeatAt = api.TaskRunning, ms(now)
			c.tasks = append(c.tasks, t)
		}
		c.encode()
	}
	var next rules.Lease
	err := s.fenced(ctx, pool, epoch, now, func(tx *sql.Tx, l rules.Lease) error {
		next = l
		next.Expires = now.Add(ttl)
		if err := s.saveLease(ctx, tx, pool, next); err != nil {
			return err
		}
		return s.journal(ctx, tx, &c)
	})
	if err != nil {
		return rules.Lease{}, fmt.Errorf("heartbeat: %w", err)
	}
	s.ov.apply(&c)
	for _, t := range quiet {
		s.ov.beat(t, ms(now))
	}
	s.cacheLease(pool, next)
	return next, nil
}

// SetHeartbeatJournal sets how long a RUNNING task's heartbeat may move
// in memory only: a heartbeat journals a task only when its state changes
// or its last journalled heartbeat is at least every old (0, the default:
// every heartbeat). The master renews every few seconds, and every task it
// lists was a row of the journal and of a fold each time; the sweeps get
// the times from memory (a cold write writes them first), a crash loses
// at most every of them.
func (s *Store) SetHeartbeatJournal(every time.Duration) {
	s.hot.Lock()
	defer s.hot.Unlock()
	s.hbEvery = every
}

func taskActive(state string) bool {
	return state == api.TaskAssigned || state == api.TaskRunning || state == api.TaskZombie
}

// ActiveTasksBefore lists the pool's active tasks handed out under an
// epoch older than epoch.
func (s *Store) ActiveTasksBefore(ctx context.Context, pool string, epoch int64) ([]pilotproto.TaskRef, error) {
	return s.taskRefs(ctx, "find tasks of older epochs",
		`SELECT id, attempt FROM tasks WHERE state IN ('ASSIGNED', 'RUNNING', 'ZOMBIE') AND pool = ? AND epoch < ?`, pool, epoch)
}

// ActiveTasksOfEpochBefore lists the pool's active tasks handed out under
// epoch before t.
func (s *Store) ActiveTasksOfEpochBefore(ctx context.Context, pool string, epoch int64, t time.Time) ([]pilotproto.TaskRef, error) {
	return s.taskRefs(ctx, "find tasks handed out before the open",
		`SELECT id, attempt FROM tasks WHERE state IN ('ASSIGNED', 'RUNNING', 'ZOMBIE') AND pool = ? AND epoch = ? AND assigned_at < ?`, pool, epoch, ms(t))
}

// AssignedBefore lists the tasks of pool still ASSIGNED to epoch (no
// heartbeat has listed them) that were handed out before t.
func (s *Store) AssignedBefore(ctx context.Context, pool string, epoch int64, t time.Time) ([]pilotproto.TaskRef, error) {
	return s.taskRefs(ctx, "find tasks never acknowledged", `SELECT id, attempt FROM tasks INDEXED BY tasks_active
		WHERE state IN ('ASSIGNED', 'RUNNING', 'ZOMBIE') AND state = 'ASSIGNED' AND pool = ? AND epoch = ? AND assigned_at < ?`, pool, epoch, ms(t))
}

// taskRefs folds what is pending and lists the (id, attempt) rows of query
// on the reader pool; what names the search in its errors.
func (s *Store) taskRefs(ctx context.Context, what, query string, args ...any) ([]pilotproto.TaskRef, error) {
	if err := s.settle(ctx); err != nil {
		return nil, err
	}
	rows, err := s.r.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	defer rows.Close()
	var out []pilotproto.TaskRef
	for rows.Next() {
		var r pilotproto.TaskRef
		if err := rows.Scan(&r.TaskID, &r.Attempt); err != nil {
			return nil, fmt.Errorf("%s: %w", what, err)
		}
		out = append(out, r)
	}
	return out, rows.Err()
}

// Outstanding counts the active tasks (handed out, not finished) of each
// pool, from memory (overlay.active).
func (s *Store) Outstanding(ctx context.Context) (map[string]int, error) {
	s.hot.Lock()
	defer s.hot.Unlock()
	if s.ov.activeStale {
		if err := s.countActive(ctx); err != nil {
			return nil, err
		}
	}
	out := make(map[string]int, len(s.ov.active))
	for pool, n := range s.ov.active {
		if n > 0 {
			out[pool] = n
		}
	}
	return out, nil
}

// JobPools returns, per pool, the done and failed attempts of a job: where
// its tasks ran.
func (s *Store) JobPools(ctx context.Context, job int64) (map[string][2]int, error) {
	var out map[string][2]int
	read := func() error {
		rows, err := s.r.QueryContext(ctx, `SELECT pool, done, failed FROM job_pools WHERE job_id = ?`, job)
		if err != nil {
			return err
		}
		defer rows.Close()
		out = map[string][2]int{}
		for rows.Next() {
			var pool string
			var d, f int
			if err := rows.Scan(&pool, &d, &f); err != nil {
				return err
			}
			out[pool] = [2]int{d, f}
		}
		return rows.Err()
	}
	// The overlay's counts are the latest (absolute, dirty or not); a
	// pool the overlay does not hold may be one that left it.
	patch := func() bool {
		for k, p := range s.ov.pools {
			if k.job == job {
				out[k.pool] = [2]int{p.done, p.failed}
			}
		}
		return false
	}
	if err := s.readPatched(read, patch); err != nil {
		return nil, fmt.Errorf("job %d per pool: %w", job, err)
	}
	return out, nil
}

// lastErrorBytes bounds the error a task's row keeps (the end of its last
// attempt's tail; the result's row keeps the whole tail). The row is
// journaled again at every change, a hand-out of the retried task
// included: with whole tails, up to 64 KiB each, a pull of 100 retried
// tasks wrote 6.5 MB under the write lock.
const lastErrorBytes = 256

// lastError is the end of tail, at most lastErrorBytes, cut at a
// character's start.
func lastError(tail string) string {
	if len(tail) <= lastErrorBytes {
		return tail
	}
	i := len(tail) - lastErrorBytes
	for j := 0; j < utf8.UTFMax && i < len(tail) && !utf8.RuneStart(tail[i]); j++ {
		i++
	}
	return tail[i:]
}
