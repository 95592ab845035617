package queue

import (
	"context"
	"errors"

	"github.com/harvest-hpc/harvest/pilotproto"
	"github.com/harvest-hpc/harvest/queue/api"
	"github.com/harvest-hpc/harvest/queue/store"
)

// Pull is the local site's Pool.Pull.
func (q *Queue) Pull(ctx context.Context, req pilotproto.PullRequest) (pilotproto.PullResponse, error) {
	return q.Pool(q.cfg.LocalSite).Pull(ctx, req)
}

// Pull hands out up to req.Max waiting tasks in fair-share order, a job's
// batch at a time: the user with the highest computedPriority gets the
// next batch of their first job (higher price first, then FIFO): a
// contiguous run of min(the job's batch size, its waiting tasks, the
// user's room under the cores quota / the job's cores, what is left of
// the pull) tasks, all counted as running before that user's priority is
// recomputed, so users of equal standing alternate by batches within one
// pull and a job of batch size 1 goes task by task. Tasks become ASSIGNED
// to the pool's epoch. With
// several live sites a pool holds at most its allowance (its slots and an
// ahead margin by its weight, siteshare.Allowance); beyond it the pull
// gives nothing until tasks come back.
//
// The order comes from the mirror's fair-share index (mirror.go), which
// updates one user per pick: a pull costs O(batches x log users) in
// memory plus its transactions, whatever the number of users.
func (p Pool) Pull(ctx context.Context, req pilotproto.PullRequest) (pilotproto.PullResponse, error) {
	runs, cancelled, err := p.pullRuns(ctx, req)
	if err != nil {
		return pilotproto.PullResponse{}, err
	}
	return pilotproto.PullResponse{Tasks: tasksOf(runs), CancelledJobs: cancelled}, nil
}

// PullWire is Pull in the compact wire form (pilotproto.PullWire), made
// from the picks themselves: each job's fields once, its entries' ids,
// names and attempts, without making every task's record (paths,
// environment) only for pilotproto.Pack to check and drop it. Unpacked,
// it is what Pull answers.
func (p Pool) PullWire(ctx context.Context, req pilotproto.PullRequest) (pilotproto.PullWire, error) {
	runs, cancelled, err := p.pullRuns(ctx, req)
	if err != nil {
		return pilotproto.PullWire{}, err
	}
	return pilotproto.PullWire{Packed: packRuns(runs), CancelledJobs: cancelled}, nil
}

func (p Pool) pullRuns(ctx context.Context, req pilotproto.PullRequest) ([]run, []int64, error) {
	q := p.q
	if req.Max < 1 || req.Max > q.cfg.MaxPull {
		return nil, nil, invalid("max must be 1..%d, got %d", q.cfg.MaxPull, req.Max)
	}
	if err := q.precheckEpoch(ctx, p.site, req.Epoch); err != nil {
		return nil, nil, err
	}
	q.seen(p.site)
	q.pullMu.Lock()
	defer q.pullMu.Unlock()
	want, err := q.pullRoom(ctx, p.site, req.Max)
	if err != nil {
		return nil, nil, err
	}
	var runs []run
	if want > 0 {
		if runs, err = q.pull(ctx, p.site, req.Epoch, want); err != nil {
			return nil, nil, err
		}
	}
	cancelled, err := q.cancelledSince(ctx)
	if err != nil {
		return nil, nil, err
	}
	return runs, cancelled, nil
}

// run is a pick as handed out: a contiguous run of one job's tasks, with
// the job's fields as they were (a copy: the mirror's job changes).
type run struct {
	j     liveJob
	tasks []store.TakenTask
}

// tasksOf is the tasks of runs, in order.
func tasksOf(runs []run) []pilotproto.Task {
	n := 0
	for _, r := range runs {
		n += len(r.tasks)
	}
	tasks := make([]pilotproto.Task, 0, n)
	envs := make([]string, 0, 2*n) // every task's two variables, in one array
	for i := range runs {
		r := &runs[i]
		dirs := [2]bool{pilotproto.PlainDir(r.j.Dataset), pilotproto.PlainDir(r.j.OutputDir)} // once per pick, not per task
		for _, t := range r.tasks {
			envs = pilotproto.AppendTaskEnv(envs, r.j.ID, t.ID)
			tasks = append(tasks, taskOf(&r.j, t, dirs, envs[len(envs)-2:len(envs):len(envs)]))
		}
	}
	return tasks
}

// packRuns is tasksOf(runs) packed (pilotproto.Pack), made from the runs:
// a job's entries in one JobTasks, with an order when its runs are not
// one after another.
func packRuns(runs []run) pilotproto.Packed {
	var p pilotproto.Packed
	at := map[int64]int{} // job -> its place in p.Jobs
	var counts []int
	n := 0
	for _, r := range runs {
		if len(r.tasks) == 0 {
			continue
		}
		k, seen := at[r.j.ID]
		if !seen {
			k = len(counts)
			at[r.j.ID] = k
			counts = append(counts, 0)
		}
		counts[k] += len(r.tasks)
		n += len(r.tasks)
	}
	if n == 0 {
		return p
	}
	ids, names, attempts := make([]int64, n), make([]string, n), make([]int, n)
	p.Jobs = make([]pilotproto.JobTasks, len(counts))
	o := 0
	for _, r := range runs {
		if len(r.tasks) == 0 {
			continue
		}
		j := &p.Jobs[at[r.j.ID]]
		if j.IDs == nil {
			c := counts[at[r.j.ID]]
			*j = pilotproto.JobTasks{JobID: r.j.ID, Owner: r.j.Owner, Command: r.j.Command, Dataset: r.j.Dataset,
				OutputDir: r.j.OutputDir, BatchSize: r.j.BatchSize, Cores: r.j.Cores, TimeoutS: r.j.TimeoutS,
				IDs: ids[o : o : o+c], Names: names[o : o : o+c], Attempts: attempts[o : o : o+c]}
			o += c
		}
		for _, t := range r.tasks {
			j.IDs = append(j.IDs, t.ID)
			j.Names = append(j.Names, t.Name)
			j.Attempts = append(j.Attempts, t.Attempt)
		}
	}
	last := 0
	for _, r := range runs {
		if len(r.tasks) > 0 && at[r.j.ID] < last {
			p.Order = orderOf(runs, at, n) // not job after job: say the order
			break
		}
		if len(r.tasks) > 0 {
			last = at[r.j.ID]
		}
	}
	return p
}

// orderOf is the job of each task of runs, in order (pilotproto.Packed.Order).
func orderOf(runs []run, at map[int64]int, n int) []int {
	order := make([]int, 0, n)
	for _, r := range runs {
		for range r.tasks {
			order = append(order, at[r.j.ID])
		}
	}
	return order
}

// pull plans and assigns chunk by chunk (WriteChunk picks): each chunk is
// planned from the mirror and assigned in one fenced transaction under one
// hold of mu, so the mirror sees exactly what was handed out. The
// tie-break counts of the pull last across its chunks.
func (q *Queue) pull(ctx context.Context, site string, epoch int64, want int) ([]run, error) {
	var out []run
	got := 0
	defer func() {
		q.mu.Lock()
		q.order.EndPull()
		q.mu.Unlock()
	}()
	for got < want {
		q.hook("assign")
		runs, n, more, err := q.pullChunk(ctx, site, epoch, want-got)
		out, got = append(out, runs...), got+n
		if err != nil {
			if got > 0 && (errors.Is(err, api.ErrStaleEpoch) || errors.Is(err, api.ErrLeaseExpired)) {
				break // what is assigned is handed out; the master is fenced next time
			}
			return nil, err
		}
		if !more {
			break
		}
	}
	return out, nil
}

// pick is one fair-share pick: a contiguous run of n tasks of one job.
type pick struct {
	j *liveJob
	n int
}

// batchOf is how many tasks the next pick gives job j of user u when
// left tasks remain in the chunk: the job's batch size, bounded by its
// waiting tasks, by the user's room under the cores quota and by left. A
// user in the order is under quota, so a pick gives at least one task
// (a task of more cores than the room left goes whole, as a single-task
// pick always did).
func batchOf(u *userState, j *liveJob, left int) int {
	n := min(max(j.BatchSize, 1), j.Waiting, left)
	if j.Cores > 0 {
		n = min(n, max((u.limits.MaxParallelJobs-u.running)/j.Cores, 1))
	}
	return max(n, 1)
}

// pullChunk plans up to n tasks in at most WriteChunk picks (grants) and
// assigns them in one transaction: the runs handed out, got tasks in all;
// more is false when the plan ran out of work.
func (q *Queue) pullChunk(ctx context.Context, site string, epoch int64, n int) (runs []run, got int, more bool, err error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	now := q.now()
	q.slideLocked(now)
	// Plan: each pick counts at once (running cores, waiting tasks), so
	// the next pick sees it; a failed transaction gives every pick back.
	var picks []pick
	takes := map[int64]int{} // per job, the tasks planned
	planned, dry := 0, false
	for planned < n && len(picks) < q.cfg.WriteChunk {
		name, _, ok := q.order.Next()
		if !ok {
			dry = true
			break
		}
		u := q.users[name]
		j := u.ready[0]
		k := batchOf(u, j, n-planned)
		picks = append(picks, pick{j, k})
		planned += k
		takes[j.ID] += k
		j.Waiting -= k
		u.running += k * j.Cores
		q.order.Picked(name)
		q.listLocked(j) // touches u
		q.touchLocked(u)
	}
	if len(picks) == 0 {
		return nil, 0, false, nil
	}
	taken, err := q.st.Assign(ctx, site, epoch, now, takes)
	if err != nil {
		for _, p := range picks {
			p.j.Waiting += p.n
			q.users[p.j.Owner].running -= p.n * p.j.Cores
			q.listLocked(p.j)
			q.touchLocked(q.users[p.j.Owner])
		}
		return nil, 0, false, err
	}
	for _, id := range taken.Gone {
		q.dropJobLocked(id)
	}
	q.jobChangesLocked(taken.Changes)
	runs = make([]run, 0, len(picks))
	short := map[int64]bool{}
	for _, p := range picks {
		ts := taken.Tasks[p.j.ID]
		k := min(p.n, len(ts))
		if k > 0 {
			runs = append(runs, run{j: *p.j, tasks: ts[:k:k]})
			got += k
		}
		taken.Tasks[p.j.ID] = ts[k:]
		if k == p.n {
			continue
		}
		// The mirror counted tasks the table did not have: give the
		// cores back and believe the table (no more waiting tasks).
		u := q.users[p.j.Owner]
		u.running -= (p.n - k) * p.j.Cores
		q.touchLocked(u)
		short[p.j.ID] = true
	}
	for id := range short {
		if j := q.jobs[id]; j != nil {
			q.log.Warn("a job had fewer waiting tasks than counted in memory; corrected", "job", id)
			j.Waiting = 0
			q.listLocked(j)
		}
	}
	q.logChanges(taken.Changes)
	return runs, got, !dry, nil
}

func (q *Queue) logChanges(cs []store.JobChange) {
	for _, c := range cs {
		q.log.Info("job state changed", "job", c.Job, "from", c.From, "to", c.To)
	}
}

// taskOf is task t of job j; plain says whether the job's dataset and
// output directory are pilotproto.PlainDir, env is the task's
// environment (pilotproto.TaskEnv).
func taskOf(j *liveJob, t store.TakenTask, plain [2]bool, env []string) pilotproto.Task {
	return pilotproto.Task{
		ID: t.ID, JobID: j.ID, Owner: j.Owner, Attempt: t.Attempt, Name: t.Name,
		Input: pilotproto.JoinName(j.Dataset, plain[0], t.Name), Output: pilotproto.JoinName(j.OutputDir, plain[1], t.Name),
		OutputDir: j.OutputDir, Command: j.Command, BatchSize: j.BatchSize, Cores: j.Cores, TimeoutS: j.TimeoutS,
		Env: env,
	}
}
