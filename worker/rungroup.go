package worker

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
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
	var gs groupSpecs
	gs.init(r, job.tmpRoot, ts)
	tags := make([]int, 0, len(ts))
	// The group's inputs lie in its job's dataset directory (GroupKey),
	// checked once for all of them.
	res := safefs.NewResolver(r.Roots)
	defer res.Close()
	var name0, prog0 string // the last program looked up, and where it is
	for i := range ts {
		t := &ts[i]
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
				if err := r.ownerMayRead(*t, real); err != nil {
					fail(i, -1, fmt.Errorf("input: %w", err))
					continue
				}
			}
			if real != t.Input && len(r.Roots) > 0 {
				read = []string{real}
			}
		}
		var arg0 string
		if len(t.Command) > 0 {
			arg0 = t.Command[0]
			if strings.IndexByte(arg0, '{') >= 0 {
				arg0 = string(appendExpanded(nil, arg0, t))
			}
		}
		if arg0 == "" {
			fail(i, -1, errors.New("empty command"))
			continue
		}
		// The tasks of a group share their job's command: its program is
		// looked up once.
		prog := prog0
		if arg0 != name0 || prog0 == "" {
			var err error
			if prog, err = job.lookPath(arg0, r.Path); err != nil {
				code := -1
				if errors.Is(err, os.ErrNotExist) {
					code = 127
				}
				fail(i, code, fmt.Errorf("start %s: %w", arg0, err))
				continue
			}
			name0, prog0 = arg0, prog
		}
		outputParent(job, *t)
		gs.add(t, prog, read)
		tags = append(tags, i)
	}
	specs := gs.specs()
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
		t := &g.ts[i] // not a copy: the retry below takes it
		ws, werr := ct.Wait()
		ran := ct.Ran()
		o := Outcome{StartedAt: now.Add(-ran), Duration: ran, ExitCode: -1}
		if se := startError(werr); se != nil {
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
					o := g.r.run(ctx, []pilotproto.Task{*t}, Substitute(t.Command, *t), false)
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
			os.RemoveAll(g.job.tmpRoot + "/" + tmpName(*t))
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

// startError is err's StartError, if it is one (nil: no error, most
// tasks, without errors.As's work).
func startError(err error) *confine.StartError {
	if err == nil {
		return nil
	}
	var se *confine.StartError // (on the heap: errors.As takes it)
	if !errors.As(err, &se) {
		return nil
	}
	return se
}

// groupSpecs builds the runner's specs of a group's tasks. Each task's own
// strings (its temporary directory's name and path, its log names, its
// variables, the arguments its placeholders change) go in one buffer for
// the whole group, turned into one string at the end, and its environment
// and arguments are slices of one array each; what the tasks share (the
// runner's variables, a command without placeholders) is not copied. A
// few allocations per group instead of about twenty per task. The specs
// hold what ExecRunner.Env, Substitute, pilotproto.LogName and tmpName
// say for each task.
type groupSpecs struct {
	tmpRoot           string
	path, site, pilot string // the variables every task gets
	siteOn, pilotOn   bool
	buf               []byte
	spans             []span // every string in buf, each task's in order
	tasks             []specTask
	envs, args        int // how many variables and changed arguments in all
}

// span is a string of groupSpecs.buf: buf[from:to].
type span struct{ from, to int }

// specTask is a task of groupSpecs: its strings begin at spans[first].
type specTask struct {
	t     *pilotproto.Task
	prog  string
	read  []string
	first int
	own   bool // its arguments have placeholders: their expansions follow its own strings
}

// The strings of each task in groupSpecs.spans, in this order; then its
// arguments that have placeholders, expanded.
const (
	spanTmpVar = iota // TMPDIR=<tmpRoot>/<tmp name>
	spanHomeVar
	spanTmp // its temporary directory's name (the end of TMPDIR=)
	spanOut
	spanErr
	spanTaskVar
	spanJobVar
	spanAttemptVar
	spansPerTask
)

// init readies g for ts's specs, their temporary directories in tmpRoot.
func (g *groupSpecs) init(r *ExecRunner, tmpRoot string, ts []pilotproto.Task) {
	*g = groupSpecs{tmpRoot: tmpRoot, path: "PATH=" + r.Path, siteOn: r.Site != "", pilotOn: r.Pilot != ""}
	if g.siteOn {
		g.site = "HARVEST_SITE=" + r.Site
	}
	if g.pilotOn {
		// Not a secret: where the task ran (SLURM_JOB_ID is the pilot's,
		// and the clean environment does not pass it on).
		g.pilot = "HARVEST_PILOT_ID=" + r.Pilot
	}
	// What the tasks' strings take but for their arguments' expansions.
	n := 0
	for i := range ts {
		id, job, att := digits(ts[i].ID), digits(ts[i].JobID), digits(int64(ts[i].Attempt))
		name := len("task-.") + id + att
		n += len("TMPDIR=HOME=//") + 2*(len(tmpRoot)+name) + 2*(len("..out")+id+att) +
			len("HARVEST_TASK_ID=HARVEST_JOB_ID=HARVEST_ATTEMPT=") + id + job + att
	}
	g.buf = make([]byte, 0, n)
	g.spans = make([]span, 0, len(ts)*spansPerTask)
	g.tasks = make([]specTask, 0, len(ts))
}

// add adds t's spec: its program prog, its linked entry's target read.
func (g *groupSpecs) add(t *pilotproto.Task, prog string, read []string) {
	st := specTask{t: t, prog: prog, read: read, first: len(g.spans), own: hasPlaceholder(t.Command)}
	str := func(from int) { g.spans = append(g.spans, span{from, len(g.buf)}) }
	num := func(name string, n int64) {
		from := len(g.buf)
		g.buf = strconv.AppendInt(append(g.buf, name...), n, 10)
		str(from)
	}
	from := len(g.buf)
	g.buf = append(append(append(g.buf, "TMPDIR="...), g.tmpRoot...), '/')
	name := len(g.buf)
	g.buf = appendTmpName(g.buf, t)
	str(from)
	home := len(g.buf)
	g.buf = append(append(g.buf, "HOME="...), g.buf[from+len("TMPDIR="):name]...)
	g.buf = append(g.buf, g.buf[name:home]...)
	str(home)
	g.spans = append(g.spans, span{name, home})
	for _, stream := range []string{"out", "err"} {
		from := len(g.buf)
		g.buf = append(appendLogID(g.buf, t), stream...)
		str(from)
	}
	num("HARVEST_TASK_ID=", t.ID)
	num("HARVEST_JOB_ID=", t.JobID)
	num("HARVEST_ATTEMPT=", int64(t.Attempt))
	g.envs += 7 + len(t.Env)
	if g.siteOn {
		g.envs++
	}
	if g.pilotOn {
		g.envs++
	}
	if st.own {
		for _, a := range t.Command {
			if strings.IndexByte(a, '{') >= 0 {
				from := len(g.buf)
				g.buf = appendExpanded(g.buf, a, t)
				str(from)
			}
		}
		g.args += len(t.Command)
	}
	g.tasks = append(g.tasks, st)
}

// specs returns the specs of the tasks added, in order.
func (g *groupSpecs) specs() []confine.Spec {
	if len(g.tasks) == 0 {
		return nil
	}
	s := string(g.buf) // every task's own strings: one allocation
	str := func(k int) string { return s[g.spans[k].from:g.spans[k].to] }
	envs := make([]string, 0, g.envs)
	var args []string
	if g.args > 0 {
		args = make([]string, 0, g.args)
	}
	specs := make([]confine.Spec, len(g.tasks))
	for i, st := range g.tasks {
		k := st.first
		// The order of ExecRunner.Env.
		e := len(envs)
		envs = append(envs, g.path, str(k+spanHomeVar), str(k+spanTmpVar), "LANG=C.UTF-8",
			str(k+spanTaskVar), str(k+spanJobVar), str(k+spanAttemptVar))
		if g.siteOn {
			envs = append(envs, g.site)
		}
		if g.pilotOn {
			envs = append(envs, g.pilot)
		}
		envs = append(envs, st.t.Env...)
		argv := st.t.Command // shared by the job's tasks: only read
		if st.own {
			a := len(args)
			next := k + spansPerTask
			for _, arg := range st.t.Command {
				if strings.IndexByte(arg, '{') >= 0 {
					arg = str(next)
					next++
				}
				args = append(args, arg)
			}
			argv = args[a:len(args):len(args)]
		}
		specs[i] = confine.Spec{Path: st.prog, Argv: argv, Env: envs[e:len(envs):len(envs)], Read: st.read,
			Out: str(k + spanOut), Err: str(k + spanErr), Tmp: str(k + spanTmp)}
	}
	return specs
}

// appendTmpName appends t's tmpName.
func appendTmpName(b []byte, t *pilotproto.Task) []byte {
	return strconv.AppendInt(append(strconv.AppendInt(append(b, "task-"...), t.ID, 10), '.'), int64(t.Attempt), 10)
}

// appendLogID appends what t's log names begin with (pilotproto.LogName:
// "<id>.<attempt>.", then the stream).
func appendLogID(b []byte, t *pilotproto.Task) []byte {
	return append(strconv.AppendInt(append(strconv.AppendInt(b, t.ID, 10), '.'), int64(t.Attempt), 10), '.')
}

// digits is how many bytes strconv.AppendInt(b, n, 10) appends.
func digits(n int64) int {
	d := 1
	if n < 0 {
		d++
	}
	for ; n >= 10 || n <= -10; n /= 10 {
		d++
	}
	return d
}
