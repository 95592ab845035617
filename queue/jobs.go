package queue

import (
	"context"
	"fmt"
	"maps"
	"slices"

	"github.com/harvest-hpc/harvest/pilotproto"
	"github.com/harvest-hpc/harvest/queue/api"
)

// Job returns one job and where its tasks ran. A user asking for another
// user's job gets api.ErrNotFound, exactly as for a job that does not
// exist, so job ids do not leak who runs what; admins see every job.
func (q *Queue) Job(ctx context.Context, caller string, admin bool, id int64) (api.Job, error) {
	j, err := q.st.Job(ctx, id)
	if err != nil {
		return api.Job{}, err
	}
	if !admin && j.Owner != caller {
		return api.Job{}, fmt.Errorf("%w: job %d", api.ErrNotFound, id)
	}
	pools, err := q.st.JobPools(ctx, id)
	if err != nil {
		return api.Job{}, err
	}
	for _, site := range slices.Sorted(maps.Keys(pools)) {
		j.Sites = append(j.Sites, api.JobSite{Site: site, Done: pools[site][0], Failed: pools[site][1]})
	}
	return j, nil
}

// Failures returns a page of the job's tasks that failed at least once,
// in task order after cursor (0: from the first), at most limit (0: the
// default page). Only the job's owner and admins may read it. Each
// result-backed entry names its log file under the job's output
// directory, as the worker writes it.
func (q *Queue) Failures(ctx context.Context, caller string, admin bool, id, cursor int64, limit int) (api.FailureList, error) {
	limit, err := pageLimit(limit, cursor)
	if err != nil {
		return api.FailureList{}, err
	}
	j, err := q.st.Job(ctx, id)
	if err != nil {
		return api.FailureList{}, err
	}
	if !admin && j.Owner != caller {
		return api.FailureList{}, fmt.Errorf("%w: job %d", api.ErrNotFound, id)
	}
	fs, err := q.st.Failures(ctx, id, cursor, limit+1)
	if err != nil {
		return api.FailureList{}, err
	}
	out := api.FailureList{}
	out.Failures, out.NextCursor = page(fs, limit, func(f api.Failure) int64 { return f.TaskID })
	for i, f := range out.Failures {
		// A task's runner names a log file only if the task wrote to it:
		// with no stderr there is no file to point to.
		if f.Attempt > 0 && f.ErrorTail != "" {
			out.Failures[i].Log = pilotproto.LogPath(j.OutputDir, f.TaskID, f.Attempt, "err")
		}
	}
	return out, nil
}

// ListFilter selects jobs for ListJobs.
type ListFilter struct {
	Owner  string // "" = all (admin only)
	State  string // "" = any
	Cursor int64  // list ids below this (0 = from the newest)
	Limit  int
}

// ListJobs returns a page of jobs, newest first.
func (q *Queue) ListJobs(ctx context.Context, f ListFilter) (api.JobList, error) {
	var err error
	if f.Limit, err = pageLimit(f.Limit, f.Cursor); err != nil {
		return api.JobList{}, err
	}
	if f.State != "" && !knownJobState(f.State) {
		return api.JobList{}, invalid("unknown job state %q", f.State)
	}
	if f.Owner != "" {
		if err := validUserName(f.Owner); err != nil {
			return api.JobList{}, err
		}
	}
	cursor := f.Cursor
	if cursor == 0 {
		cursor = 1<<63 - 1
	}
	jobs, err := q.st.ListJobs(ctx, f.Owner, f.State, cursor, f.Limit+1)
	if err != nil {
		return api.JobList{}, err
	}
	out := api.JobList{}
	out.Jobs, out.NextCursor = page(jobs, f.Limit, func(j api.Job) int64 { return j.ID })
	return out, nil
}

// pageLimit checks a page's limit (0: the default) and cursor, and
// returns the limit to use. The store is asked for limit+1 rows: page
// tells from the extra one whether another page follows.
func pageLimit(limit int, cursor int64) (int, error) {
	if limit <= 0 {
		limit = api.DefaultPageLim
	}
	if limit > api.MaxPageLimit {
		return 0, invalid("limit %d exceeds %d", limit, api.MaxPageLimit)
	}
	if cursor < 0 {
		return 0, invalid("cursor must not be negative")
	}
	return limit, nil
}

// page cuts up to limit+1 rows read to limit, with the cursor of the next
// page (the last row's id) if there was one more, else 0.
func page[T any](rows []T, limit int, id func(T) int64) ([]T, int64) {
	if len(rows) <= limit {
		return rows, 0
	}
	return rows[:limit], id(rows[limit-1])
}

func knownJobState(s string) bool {
	switch s {
	case api.JobWaiting, api.JobRunning, api.JobDone, api.JobDoneWarn, api.JobFailed, api.JobKilled, api.JobErrorEW:
		return true
	}
	return false
}

// Cancel kills a job: its waiting tasks will never run and its running
// tasks are stopped by the master, which learns it at its next exchange.
// Cancelling a KILLED job again succeeds and changes nothing (a client's
// retry of a cancel that took effect; it finishes a kill of the tasks
// that a crash cut); cancelling another final job is a conflict and
// changes nothing.
func (q *Queue) Cancel(ctx context.Context, caller string, admin bool, id int64) (api.Job, error) {
	j, err := q.Job(ctx, caller, admin, id)
	if err != nil {
		return j, err
	}
	if api.JobFinal(j.State) && j.State != api.JobKilled {
		return j, fmt.Errorf("%w: job %d is already %s", api.ErrConflict, id, j.State)
	}
	now := q.now()
	q.mu.Lock()
	c, err := q.st.CancelJob(ctx, id, now)
	if err == nil && !c.Already {
		q.addRunningLocked(map[string]int{c.Owner: -c.Active * c.Cores})
		q.dropJobLocked(id)
	}
	q.mu.Unlock()
	if err != nil {
		return j, err
	}
	// The job is KILLED already (pulls skip it, results and sweeps leave
	// its tasks alone); its tasks follow in short writes, and a crash
	// among them is finished at the next Open (finishKills).
	q.hook("cancel-kill")
	if err := q.st.KillTasks(ctx, id, now, q.cfg.InsertChunk); err != nil {
		return j, err
	}
	if !c.Already {
		q.log.Info("job cancelled", "job", id, "by", caller, "running_tasks", c.Active)
	}
	return q.Job(ctx, caller, admin, id)
}

// finishKills kills the tasks that a cancel or an expiry recorded and a
// crash kept it from killing (store.PendingKills): at Open, before the
// usage is reconciled from the tasks.
func (q *Queue) finishKills(ctx context.Context) error {
	ids, err := q.st.PendingKills(ctx)
	if err != nil {
		return err
	}
	for _, id := range ids {
		if err := q.st.KillTasks(ctx, id, q.now(), q.cfg.InsertChunk); err != nil {
			return err
		}
		q.log.Warn("finished the kill of a cancelled or expired job's tasks that a stop had cut", "job", id)
	}
	return nil
}

// cancelledSince lists jobs cancelled in the last CancelNotice, which the
// master must stop (repeated at every exchange in that window, so a lost
// answer costs nothing).
func (q *Queue) cancelledSince(ctx context.Context) ([]int64, error) {
	ids, err := q.st.CancelledSince(ctx, q.now().Add(-q.cfg.CancelNotice))
	if err != nil || !q.cfg.Shared {
		return ids, err
	}
	// With other agents on the database, add the cancels syncPeers read
	// (those made through the others).
	q.mu.Lock()
	ids = append(ids, q.peerCancelled...)
	q.mu.Unlock()
	slices.Sort(ids)
	return slices.Compact(ids), nil
}
