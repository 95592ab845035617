package queue

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/harvest-hpc/harvest/pilotproto"
	"github.com/harvest-hpc/harvest/queue/api"
	"github.com/harvest-hpc/harvest/queue/siteshare"
	"github.com/harvest-hpc/harvest/queue/store"
)

const maxErrorTail = 64 << 10

// chunkBytes bounds what one transaction of results stores: 100 results
// with 64 KiB error tails held the store's write lock over 50 ms.
const chunkBytes = 64 << 10

const resultOverhead = 128 // a result's size without its strings

// resultsChunk is how many of rs, from the first, one transaction of
// results applies: at most limit rows written, at most 4 x limit
// results and chunkBytes, at least one. A fresh success (attempt 1,
// done, nothing to say) writes no row of its own, only its grant's mark
// and its job's counters: it counts as a row only when its job is not
// the one of the result before it (a job's counters, a grant). So a
// pilot's report of plain successes of one job goes in one transaction
// of up to 4 x limit, not one per limit results (each transaction is a
// lock, a lease read, the job's rows read and written back and a
// commit), while results of as many jobs, or results with rows of their
// own, go as before.
func resultsChunk(rs []pilotproto.Result, limit int) int {
	limit = max(limit, 1)
	n, size, rows := 0, 0, 0
	for n < min(len(rs), 4*limit) {
		r := &rs[n]
		size += resultOverhead + len(r.ErrorTail) + len(r.Pilot)
		if !freshDone(r) || n == 0 || rs[n-1].TaskID>>32 != r.TaskID>>32 { // a task id is job<<32 | entry
			rows++
		}
		if n > 0 && (size > chunkBytes || rows > limit) {
			break
		}
		n++
	}
	return n
}

// freshDone says r is a success of a first attempt with nothing to
// keep but its times: the store writes no exception row for it.
func freshDone(r *pilotproto.Result) bool {
	return r.Attempt == 1 && r.Status == pilotproto.StatusDone && r.ExitCode == 0 && r.ErrorTail == ""
}

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

// ReportResults is the local site's Pool.ReportResults.
func (q *Queue) ReportResults(ctx context.Context, req pilotproto.ResultsRequest) (pilotproto.ResultsResponse, error) {
	return q.Pool(q.cfg.LocalSite).ReportResults(ctx, req)
}

// ReportResults applies the pool's results, idempotent by (task, attempt): a result
// reported before is acknowledged as a duplicate and not applied again; a
// result for an attempt that is no longer current (the task was requeued,
// killed or finished) is recorded for usage but changes no task
// (counted in Ignored). The whole request is validated before anything
// is written; each chunk's transaction checks the epoch. The applied
// results feed the site's turnaround and yield.
func (p Pool) ReportResults(ctx context.Context, req pilotproto.ResultsRequest) (pilotproto.ResultsResponse, error) {
	q := p.q
	var resp pilotproto.ResultsResponse
	if len(req.Results) > pilotproto.MaxResults {
		return resp, invalid("at most %d results per request", pilotproto.MaxResults)
	}
	for i, r := range req.Results {
		if err := validateResult(i, r); err != nil {
			return resp, err
		}
	}
	if err := q.precheckEpoch(ctx, p.site, req.Epoch); err != nil {
		return resp, err
	}
	q.seen(p.site)
	return q.applyResults(ctx, p.site, req.Epoch, req.Results)
}

// applyResults applies validated results in short fenced transactions of
// at most WriteChunk results and about 64 KiB of error tails
// (resultsChunk), updating the mirror with each.
func (q *Queue) applyResults(ctx context.Context, site string, epoch int64, results []pilotproto.Result) (pilotproto.ResultsResponse, error) {
	var resp pilotproto.ResultsResponse
	for len(results) > 0 {
		chunk := results[:resultsChunk(results, q.cfg.WriteChunk)]
		results = results[len(chunk):]
		q.hook("results")
		q.mu.Lock()
		a, err := q.st.ApplyResults(ctx, site, epoch, q.now(), chunk)
		if err == nil {
			q.applyMirrorLocked(a)
			q.observeLocked(site, a.Outcomes)
		}
		q.mu.Unlock()
		if err != nil {
			return resp, err
		}
		q.logChanges(a.Changes)
		resp.Applied += len(a.Outcomes)
		resp.Duplicates += a.Duplicates
		resp.Ignored += a.Ignored
	}
	return resp, nil
}

// applyMirrorLocked brings the in-memory mirror in step with a batch of
// results the store applied. q.mu must be held.
func (q *Queue) applyMirrorLocked(a store.Applied) {
	q.lostMS += a.LostMS
	for owner, e := range a.Usage {
		u := q.userLocked(owner)
		q.addEventLocked(u, e)
		q.touchLocked(u)
	}
	q.movedLocked(a.Moved)
}

// Heartbeat is the local site's Pool.Heartbeat.
func (q *Queue) Heartbeat(ctx context.Context, req pilotproto.HeartbeatRequest) (pilotproto.HeartbeatResponse, error) {
	return q.Pool(q.cfg.LocalSite).Heartbeat(ctx, req)
}

// Heartbeat keeps the pool's listed attempts alive (ASSIGNED or ZOMBIE
// become RUNNING), renews its lease, records its pilots' status and lists
// the jobs cancelled recently.
func (p Pool) Heartbeat(ctx context.Context, req pilotproto.HeartbeatRequest) (pilotproto.HeartbeatResponse, error) {
	q := p.q
	var resp pilotproto.HeartbeatResponse
	if len(req.Running) > maxHeld || len(req.Pilots) > 100_000 {
		return resp, invalid("too many running tasks or pilots in one heartbeat")
	}
	held, err := heldRanges(req)
	if err != nil {
		return resp, err
	}
	if req.LostMS < 0 {
		return resp, invalid("lost_ms %d is negative", req.LostMS)
	}
	for i, p := range req.Pilots {
		if p.PilotID == "" || len(p.PilotID) > 256 {
			return resp, invalid("pilot %d: pilot_id is required (at most 256 bytes)", i)
		}
	}
	rest := held
	at := q.now()
	for first := true; first || len(rest) > 0; first = false {
		chunk := rest[:min(len(rest), q.cfg.WriteChunk*4)]
		rest = rest[len(chunk):]
		q.hook("heartbeat")
		now := q.now()
		if err := q.st.Heartbeat(ctx, p.site, req.Epoch, now, q.cfg.LeaseTTL, chunk); err != nil {
			return resp, err
		}
		resp.LeaseExpires = now.Add(q.cfg.LeaseTTL).Unix()
	}
	q.mu.Lock()
	q.beats[p.site] = poolBeat{epoch: req.Epoch, at: at}
	q.lostMS += req.LostMS
	q.sites.Pilots(p.site, req.Pilots, q.now())
	for _, pi := range req.Pilots {
		k := pilotKey{p.site, pi.PilotID}
		if end, ok := q.ends[k]; ok {
			if pi.Deadline > 0 && pi.Deadline <= end {
				delete(q.ends, k) // the master knows
				continue
			}
			if resp.Deadlines == nil {
				resp.Deadlines = map[string]int64{}
			}
			resp.Deadlines[pi.PilotID] = end
		}
	}
	q.mu.Unlock()
	if err := q.requeueOrphans(ctx, p.site, req.Epoch, held); err != nil {
		return resp, err
	}
	resp.CancelledJobs, err = q.cancelledSince(ctx)
	return resp, err
}

// requeueOrphans runs on the first heartbeat of a new master (and on the
// pool's first heartbeat after the queue process opened). Its heartbeat
// lists every task it holds (restored from its checkpoint or pulled
// since), so a task still active under an older epoch and not listed was
// pulled by a master that died before it could checkpoint the pull (the
// answer was lost): nobody will ever run or report it. It is requeued at
// once, as interrupted (no attempt counted), instead of waiting for the
// zombie timeout.
func (q *Queue) requeueOrphans(ctx context.Context, site string, epoch int64, held []pilotproto.TaskRange) error {
	q.mu.Lock()
	done := q.orphansChecked[site] >= epoch
	q.mu.Unlock()
	if done {
		return nil
	}
	listed := heldIDs(held)
	// The pool's first heartbeat since this queue process opened also
	// answers for the tasks its own epoch was handed before the open: a
	// holder renews its epoch even past expiry, so a pull whose answer the
	// restart cut (committed, never received) would otherwise wait for the
	// zombie timeout. Tasks handed out since the open are not asked about:
	// their answer may still be on its way.
	var opened time.Time
	if q.orphansChecked[site] == 0 {
		opened = q.opened
	}
	older, err := q.st.ActiveTasksBefore(ctx, site, epoch, opened)
	if err != nil {
		return err
	}
	var orphans []pilotproto.Result
	now := q.now().UnixMilli()
	for _, t := range older {
		if !listed(t.TaskID) {
			orphans = append(orphans, pilotproto.Result{TaskID: t.TaskID, Attempt: t.Attempt, Status: pilotproto.StatusInterrupted,
				StartedAt: now, ErrorTail: "requeued: its master stopped before recording it"})
		}
	}
	if len(orphans) > 0 {
		if _, err := q.applyResults(ctx, site, epoch, orphans); err != nil {
			return fmt.Errorf("requeue orphaned tasks: %w", err)
		}
		q.log.Warn("requeued tasks no master holds", "site", site, "tasks", len(orphans), "epoch", epoch)
	}
	q.mu.Lock()
	q.orphansChecked[site] = max(q.orphansChecked[site], epoch)
	q.mu.Unlock()
	return nil
}

// Recommend is the local site's Pool.Recommend.
func (q *Queue) Recommend(ctx context.Context, req pilotproto.RecommendationRequest) error {
	return q.Pool(q.cfg.LocalSite).Recommend(ctx, req)
}

// Recommend stores the pool master's MiniNode recommendation, its slots
// and its capacity cap. The epoch is checked at a point serialised with
// every write (an empty fenced transaction); a recommendation of an older
// epoch never replaces a newer one.
func (p Pool) Recommend(ctx context.Context, req pilotproto.RecommendationRequest) error {
	q := p.q
	if req.MinNodes < 0 || req.PendingTasks < 0 || req.RunningTasks < 0 || req.SlotsPerNode < 0 || req.Slots < 0 || req.MaxNodes < 0 {
		return invalid("recommendation figures must not be negative")
	}
	if req.MinNodes > api.MaxNodes || req.MaxNodes > api.MaxNodes {
		// A floor of a billion nodes was kept: the agent's MiniNode.
		return invalid("recommendation min_nodes and max_nodes must not exceed %d", api.MaxNodes)
	}
	if len(req.CapacityPhase) > 32 {
		return invalid("capacity_phase is longer than 32 bytes")
	}
	q.hook("recommend")
	if err := q.st.CheckEpoch(ctx, p.site, req.Epoch, q.now()); err != nil {
		return err
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	q.sites.Master(p.site, siteshare.MasterReport{Epoch: req.Epoch, MinNodes: req.MinNodes, Cap: req.MaxNodes,
		Phase: req.CapacityPhase, Slots: req.Slots, SlotsPerNode: req.SlotsPerNode}, q.now())
	if rec := [2]int{req.MinNodes, req.MaxNodes}; p.site == q.cfg.LocalSite && rec != q.localRec {
		q.localRec = rec
		q.movePlanLocked()
	}
	return nil
}

// movePlanLocked leaves a token for PlanMoved (one waits at most).
func (q *Queue) movePlanLocked() {
	select {
	case q.planMoved <- struct{}{}:
	default: // a token is waiting already
	}
}

// PlanMoved receives when the local master's recommendation or capacity
// cap changes, or a job arrives while the queue has none (the first
// pilots are then submitted at once, not up to a poll later). The hosting agent runs a round at once then, not up to a
// poll later: a new master's first cap (4 nodes) otherwise found the
// pilots started for the whole cluster registering and taking tasks, and
// the capacity rule judged those tasks at the passing sizes (11, 12)
// instead of the cap's, so the pool grew about 10 s later.
func (q *Queue) PlanMoved() <-chan struct{} { return q.planMoved }

// maxHeld bounds the tasks one heartbeat lists.
const maxHeld = 1_000_000

// heldRanges is what a heartbeat lists as held: its ranges, and its
// task-by-task list (an older master's) merged into ranges.
func heldRanges(req pilotproto.HeartbeatRequest) ([]pilotproto.TaskRange, error) {
	var held []pilotproto.TaskRange
	if req.Ranges != nil {
		var err error
		if held, err = req.Ranges.Unpack(maxHeld - len(req.Running)); err != nil {
			return nil, invalid("heartbeat: %v", err)
		}
	}
	return append(held, pilotproto.RangesOf(req.Running)...), nil
}

// heldIDs reports whether held names a task id, at any attempt.
func heldIDs(held []pilotproto.TaskRange) func(int64) bool {
	spans := slices.SortedFunc(slices.Values(held), func(a, b pilotproto.TaskRange) int { return cmp.Compare(a.First, b.First) })
	var union []pilotproto.TaskRange // disjoint, in order
	for _, r := range spans {
		if n := len(union); n > 0 && r.First <= union[n-1].Last {
			union[n-1].Last = max(union[n-1].Last, r.Last)
			continue
		}
		union = append(union, r)
	}
	return func(id int64) bool {
		i, _ := slices.BinarySearchFunc(union, id, func(r pilotproto.TaskRange, id int64) int { return cmp.Compare(r.Last, id) })
		return i < len(union) && union[i].First <= id
	}
}
