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
	q := p.q
	if req.Max < 1 || req.Max > q.cfg.MaxPull {
		return pilotproto.PullResponse{}, invalid("max must be 1..%d, got %d", q.cfg.MaxPull, req.Max)
	}
	if err := q.precheckEpoch(ctx, p.site, req.Epoch); err != nil {
		return pilotproto.PullResponse{}, err
	}
	q.seen(p.site)
	q.pullMu.Lock()
	defer q.pullMu.Unlock()
	want, err := q.pullRoom(ctx, p.site, req.Max)
	if err != nil {
		return pilotproto.PullResponse{}, err
	}
	tasks := []pilotproto.Task{}
	if want > 0 {
		if tasks, err = q.pull(ctx, p.site, req.Epoch, want); err != nil {
			return pilotproto.PullResponse{}, err
		}
	}
	cancelled, err := q.cancelledSince(ctx)
	if err != nil {
		return pilotproto.PullResponse{}, err
	}
	return pilotproto.PullResponse{Tasks: tasks, CancelledJobs: cancelled}, nil
}

// pull plans and assigns chunk by chunk (WriteChunk picks): each chunk is
// planned from the mirror and assigned in one fenced transaction under one
// hold of mu, so the mirror sees exactly what was handed out. The
// tie-break counts of the pull last across its chunks.
func (q *Queue) pull(ctx context.Context, site string, epoch int64, want int) ([]pilotproto.Task, error) {
	out := make([]pilotproto.Task, 0, min(want, 1024))
	defer func() {
		q.mu.Lock()
		q.order.EndPull()
		q.mu.Unlock()
	}()
	for len(out) < want {
		q.hook("assign")
		got, more, err := q.pullChunk(ctx, site, epoch, want-len(out))
		out = append(out, got...)
		if err != nil {
			if len(out) > 0 && (errors.Is(err, api.ErrStaleEpoch) || errors.Is(err, api.ErrLeaseExpired)) {
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
// assigns them in one transaction; more is false when the plan ran out of
// work.
func (q *Queue) pullChunk(ctx context.Context, site string, epoch int64, n int) (tasks []pilotproto.Task, more bool, err error) {
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
		return nil, false, nil
	}
	taken, err := q.st.Assign(ctx, site, epoch, now, takes)
	if err != nil {
		for _, p := range picks {
			p.j.Waiting += p.n
			q.users[p.j.Owner].running -= p.n * p.j.Cores
			q.listLocked(p.j)
			q.touchLocked(q.users[p.j.Owner])
		}
		return nil, false, err
	}
	for _, id := range taken.Gone {
		q.dropJobLocked(id)
	}
	q.jobChangesLocked(taken.Changes)
	tasks = make([]pilotproto.Task, 0, planned)
	envs := make([]string, 0, 2*planned) // every task's two variables, in one array
	short := map[int64]bool{}
	for _, p := range picks {
		ts := taken.Tasks[p.j.ID]
		k := min(p.n, len(ts))
		dirs := [2]bool{pilotproto.PlainDir(p.j.Dataset), pilotproto.PlainDir(p.j.OutputDir)} // once per pick, not per task
		for _, t := range ts[:k] {
			envs = pilotproto.AppendTaskEnv(envs, p.j.ID, t.ID)
			tasks = append(tasks, taskOf(p.j, t, dirs, envs[len(envs)-2:len(envs):len(envs)]))
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
	return tasks, !dry, nil
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
