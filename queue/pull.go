package queue

import (
	"context"
	"errors"
	"path/filepath"
	"strconv"

	"github.com/harvest-hpc/harvest/pilotproto"
	"github.com/harvest-hpc/harvest/queue/api"
	"github.com/harvest-hpc/harvest/queue/fairshare"
	"github.com/harvest-hpc/harvest/queue/store"
)

// candidate is a user competing in one pull.
type candidate struct {
	name   string
	limits fairshare.Limits
	usage  fairshare.Usage
	jobs   []*plannedJob // price desc, then FIFO
	picked int
}

type plannedJob struct {
	store.ReadyJob
	planned int // tasks of this job picked so far
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
	if err := q.precheckEpoch(ctx, req.Epoch); err != nil {
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

// planPull reads the ready jobs (no write lock) and decides, task by task,
// whose job the next task comes from.
func (q *Queue) planPull(ctx context.Context, want int) ([]*plannedJob, error) {
	ready, err := q.st.ReadyJobs(ctx)
	if err != nil {
		return nil, err
	}
	if len(ready) == 0 {
		return nil, nil
	}
	byUser := map[string]*candidate{}
	var users []*candidate
	for _, j := range ready {
		c := byUser[j.Owner]
		if c == nil {
			c = &candidate{name: j.Owner}
			byUser[j.Owner] = c
			users = append(users, c)
		}
		c.jobs = append(c.jobs, &plannedJob{ReadyJob: j})
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

	var picks []*plannedJob
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
		if j.planned >= j.Waiting {
			best.jobs = best.jobs[1:]
			continue
		}
		picks = append(picks, j)
		j.planned++
		best.picked++
		best.usage.RunningCores += j.Cores
	}
	return picks, nil
}

// assign hands the planned tasks out in fenced transactions of WriteChunk
// tasks; a job that changed since the plan (cancelled, fewer waiting
// tasks) gives fewer. Running cores are counted as each chunk commits.
func (q *Queue) assign(ctx context.Context, epoch int64, picks []*plannedJob) ([]pilotproto.Task, error) {
	out := make([]pilotproto.Task, 0, len(picks))
	for len(picks) > 0 {
		chunk := picks[:min(len(picks), q.cfg.WriteChunk)]
		picks = picks[len(chunk):]
		var takes []store.Take
		at := map[int64]int{}
		for _, j := range chunk {
			i, ok := at[j.ID]
			if !ok {
				i = len(takes)
				at[j.ID] = i
				takes = append(takes, store.Take{Job: j.ID})
			}
			takes[i].N++
		}
		q.hook("assign")
		q.mu.Lock()
		taken, err := q.st.Assign(ctx, epoch, q.now(), takes)
		if err == nil {
			cores := map[string]int{}
			for _, j := range chunk {
				if ts := taken.Tasks[j.ID]; len(ts) > 0 {
					out = append(out, taskOf(j.ReadyJob, ts[0]))
					taken.Tasks[j.ID] = ts[1:]
					cores[j.Owner] += j.Cores
				}
			}
			q.addRunningLocked(cores)
		}
		q.mu.Unlock()
		if err != nil {
			if len(out) > 0 && (errors.Is(err, api.ErrStaleEpoch) || errors.Is(err, api.ErrLeaseExpired)) {
				break // what is assigned is handed out; the master is fenced next time
			}
			return out, err
		}
		q.logChanges(taken.Changes)
	}
	return out, nil
}

func (q *Queue) logChanges(cs []store.JobChange) {
	for _, c := range cs {
		q.log.Info("job state changed", "job", c.Job, "from", c.From, "to", c.To)
	}
}

func taskOf(j store.ReadyJob, t store.TakenTask) pilotproto.Task {
	return pilotproto.Task{
		ID: t.ID, JobID: j.ID, Owner: j.Owner, Attempt: t.Attempt, Name: t.Name,
		Input: filepath.Join(j.Dataset, t.Name), Output: filepath.Join(j.OutputDir, t.Name),
		OutputDir: j.OutputDir, Command: j.Command, BatchSize: j.BatchSize, Cores: j.Cores, TimeoutS: j.TimeoutS,
		Env: []string{"HARVEST_JOB=" + strconv.FormatInt(j.ID, 10), "HARVEST_TASK=" + strconv.FormatInt(t.ID, 10)},
	}
}
