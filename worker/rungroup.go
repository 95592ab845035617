package worker

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/harvest-hpc/harvest/internal/safefs"
	"github.com/harvest-hpc/harvest/pilotproto"
	"github.com/harvest-hpc/harvest/worker/confine"
)

// A GroupRunner runs many tasks of one job together (StartGroup): the
// worker hands them over at once, and hears of their ends in waves,
// instead of a goroutine and an exchange per task.
type GroupRunner interface {
	// GroupKey says which tasks may run in one group: those of the same
	// non-empty key ("": t runs alone, through Run).
	GroupKey(t pilotproto.Task) string
	// StartGroup starts ts (of one key), at most slots of them at once,
	// each stopped at its timeout. ended gets the outcomes of the tasks
	// that ended (their indexes in ts), a wave at a time, each task's
	// once; it may be called before StartGroup returns, from StartGroup's
	// goroutine (tasks that could not be handed over) or another.
	StartGroup(ts []pilotproto.Task, slots int, ended func(idx []int, os []Outcome)) TaskGroup
}

// A TaskGroup is the tasks a GroupRunner runs together.
type TaskGroup interface {
	// SetSlots sets how many of the group's tasks may run at once.
	SetSlots(n int)
	// Stop stops the tasks idx: those not started never start, the
	// others get SIGTERM, then SIGKILL after the kill grace.
	Stop(idx ...int)
}

// GroupKey implements GroupRunner: the confined tasks of a job with an
// output directory (its runner makes their files), one task per run.
func (r *ExecRunner) GroupKey(t pilotproto.Task) string {
	if !r.confined() || t.OutputDir == "" || pilotproto.Batched(t.Command) {
		return ""
	}
	return r.jobKey(t)
}

// confined reports whether tasks run confined, by a runner per job: the
// kernel asked once (a system call per task otherwise).
func (r *ExecRunner) confined() bool {
	if r.Jail == nil || r.Jail.Mode == confine.ModeOff {
		return false
	}
	r.probe.Do(func() { r.landlock = confine.Probe().Confined(confine.ModeAuto) })
	return r.Jail.Mode != confine.ModeAuto || r.landlock
}

// execGroup is a group of one job's tasks in its runner.
type execGroup struct {
	r     *ExecRunner
	job   *jobFiles
	ts    []pilotproto.Task
	ended func([]int, []Outcome)

	mu      sync.Mutex
	tasks   []*confine.Task            // by index; nil: not handed to the runner
	retries map[int]context.CancelFunc // tasks run again alone (their files could not be made)
	stopped map[int]bool               // asked to stop (a retry does not start)
	left    int                        // tasks not ended: the job is released at 0
	slots   int                        // this group's share of the runner's slots
}

// StartGroup implements GroupRunner.
func (r *ExecRunner) StartGroup(ts []pilotproto.Task, slots int, ended func([]int, []Outcome)) TaskGroup {
	g := &execGroup{r: r, ts: ts, ended: ended, tasks: make([]*confine.Task, len(ts)), left: len(ts),
		retries: map[int]context.CancelFunc{}, stopped: map[int]bool{}}
	now := time.Now()
	var failed []int
	var outs []Outcome
	fail := func(i, code int, err error) {
		failed = append(failed, i)
		outs = append(outs, Outcome{Status: pilotproto.StatusFailed, ExitCode: code, StartedAt: now, ErrorTail: err.Error()})
	}
	job, err := r.jobs.acquire(r, ts[0])
	if err == nil && (job.runner == nil || job.logs == nil) {
		r.jobs.release(job, false)
		err = errors.New("the job's tasks are not confined by a runner")
	}
	if err != nil {
		for i := range ts {
			fail(i, -1, err)
		}
		g.left = 0
		ended(failed, outs)
		return g
	}
	g.job = job
	specs := make([]confine.Spec, 0, len(ts))
	tags := make([]int, 0, len(ts))
	// The group's inputs lie in its job's dataset directory (GroupKey),
	// checked once for all of them.
	res := safefs.NewResolver(r.Roots)
	defer res.Close()
	for i, t := range ts {
		var read []string
		if t.Input != "" {
			var real string
			var err error
			if len(r.Roots) > 0 {
				real, err = res.ResolveIn(t.Input)
			} else {
				real, err = safefs.ResolveIn(t.Input, []string{filepath.Dir(t.Input)})
			}
			if err != nil {
				fail(i, -1, fmt.Errorf("input: %w", err))
				continue
			}
			if real != t.Input {
				if err := r.ownerMayRead(t, real); err != nil {
					fail(i, -1, fmt.Errorf("input: %w", err))
					continue
				}
			}
			if real != t.Input && len(r.Roots) > 0 {
				read = []string{real}
			}
		}
		argv := Substitute(t.Command, t)
		if len(argv) == 0 || argv[0] == "" {
			fail(i, -1, errors.New("empty command"))
			continue
		}
		prog, err := job.lookPath(argv[0], r.Path)
		if err != nil {
			code := -1
			if errors.Is(err, os.ErrNotExist) {
				code = 127
			}
			fail(i, code, fmt.Errorf("start %s: %w", argv[0], err))
			continue
		}
		name := tmpName(t)
		outputParent(job, t)
		specs = append(specs, confine.Spec{Path: prog, Argv: argv, Env: r.Env(t, job.tmpRoot+"/"+name), Read: read,
			Out: pilotproto.LogName(t.ID, t.Attempt, "out"), Err: pilotproto.LogName(t.ID, t.Attempt, "err"), Tmp: name})
		tags = append(tags, i)
	}
	if len(specs) > 0 {
		g.setSlots(slots)
		// (Bounded well below time.Duration's range.)
		timeout := time.Duration(min(ts[0].TimeoutS, 100*365*24*3600)) * time.Second
		qts, err := job.runner.Queue(specs, tags, timeout, g.wave)
		if err != nil {
			for _, i := range tags {
				fail(i, -1, fmt.Errorf("start %s: %w", specs[0].Argv[0], err))
			}
		} else {
			g.mu.Lock()
			for k, t := range qts {
				g.tasks[tags[k]] = t
			}
			g.mu.Unlock()
		}
	}
	if len(failed) > 0 {
		g.done(len(failed))
		ended(failed, outs)
	}
	return g
}

// SetSlots implements TaskGroup.
func (g *execGroup) SetSlots(n int) {
	if g.job != nil {
		g.setSlots(n)
	}
}

// setSlots sets the group's share of its job's runner's slots: the
// runner runs as many queued tasks as its groups' shares sum to.
func (g *execGroup) setSlots(n int) {
	c := &g.r.jobs
	c.mu.Lock()
	g.job.slots += n - g.slots
	g.slots = n
	total := g.job.slots
	c.mu.Unlock()
	g.job.runner.SetSlots(max(total, 1))
}

// Stop implements TaskGroup.
func (g *execGroup) Stop(idx ...int) {
	g.mu.Lock()
	var ts []*confine.Task
	for _, i := range idx {
		g.stopped[i] = true
		if cancel := g.retries[i]; cancel != nil {
			cancel()
		} else if t := g.tasks[i]; t != nil {
			ts = append(ts, t)
		}
	}
	g.mu.Unlock()
	if len(ts) > 0 {
		g.job.runner.Stop(ts...)
	}
}

// done counts n tasks ended; the last releases the job.
func (g *execGroup) done(n int) {
	g.mu.Lock()
	g.left -= n
	last := g.left == 0
	g.mu.Unlock()
	if last {
		c := &g.r.jobs
		c.mu.Lock()
		g.job.slots -= g.slots
		g.slots = 0
		c.mu.Unlock()
		// Not on the runner's reader, which calls done: a release may
		// close the job's runner, and that waits for its reader to end.
		// A runner that ended is not handed out again from now on.
		ended := g.job.runner.Ended()
		if ended {
			g.r.jobs.retire(g.job)
		}
		go g.r.jobs.release(g.job, ended)
	}
}

// wave turns a wave of the runner's ended tasks into outcomes.
func (g *execGroup) wave(ts []*confine.Task) {
	now := time.Now()
	idx := make([]int, 0, len(ts))
	outs := make([]Outcome, 0, len(ts))
	for _, ct := range ts {
		i := ct.Tag()
		t := g.ts[i]
		ws, werr := ct.Wait()
		ran := ct.Ran()
		o := Outcome{StartedAt: now.Add(-ran), Duration: ran, ExitCode: -1}
		if se := (*confine.StartError)(nil); errors.As(werr, &se) {
			g.mu.Lock()
			retry := se.Files && !g.stopped[i]
			var ctx context.Context
			if retry {
				var cancel context.CancelFunc
				ctx, cancel = context.WithCancel(context.Background())
				g.retries[i] = cancel
			}
			g.mu.Unlock()
			if retry {
				// The job's output directory removed or replaced since it
				// was opened: this task once more, alone, with the job's
				// files made afresh.
				g.r.jobs.retire(g.job)
				go func() {
					o := g.r.run(ctx, []pilotproto.Task{t}, Substitute(t.Command, t), false)
					g.done(1)
					g.ended([]int{i}, []Outcome{o})
				}()
				continue
			}
			o.Status, o.ExitCode, o.ErrorTail = pilotproto.StatusFailed, se.Code, fmt.Sprintf("start %s: %v", t.Command[0], se)
			idx, outs = append(idx, i), append(outs, o)
			continue
		}
		if ct.TmpLeft() {
			os.RemoveAll(g.job.tmpRoot + "/" + tmpName(t))
		}
		switch {
		case ct.Skipped():
			o.Status, o.ErrorTail = pilotproto.StatusFailed, "[harvest] stopped before it started"
			idx, outs = append(idx, i), append(outs, o)
			continue
		case werr != nil:
		case ws.Exited():
			o.ExitCode = ws.ExitStatus()
		case ws.Signaled():
			o.Signal = ws.Signal()
		}
		switch {
		case ct.TimedOut():
			o.Status = pilotproto.StatusTimeout
		case werr == nil && ws.Exited() && ws.ExitStatus() == 0:
			o.Status = pilotproto.StatusDone
		default:
			o.Status = pilotproto.StatusFailed
		}
		if o.Status != pilotproto.StatusDone {
			p := prepared{job: g.job, byRunner: true, errName: pilotproto.LogName(t.ID, t.Attempt, "err")}
			o.ErrorTail = p.tail(g.r.TailBytes)
			if werr != nil {
				o.ErrorTail += "\n[harvest] " + werr.Error()
			}
			if ct.TimedOut() {
				o.ErrorTail += fmt.Sprintf("\n[harvest] killed after the task timeout of %ds", min(t.TimeoutS, 100*365*24*3600))
			}
		}
		idx, outs = append(idx, i), append(outs, o)
	}
	if len(idx) > 0 {
		g.done(len(idx))
		g.ended(idx, outs)
	}
}
