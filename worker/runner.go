package worker

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/harvest-hpc/harvest/internal/safefs"
	"github.com/harvest-hpc/harvest/internal/unixacct"
	"github.com/harvest-hpc/harvest/pilotproto"
	"github.com/harvest-hpc/harvest/worker/confine"
	"golang.org/x/sys/unix"
)

// Outcome is what a Runner reports for one task; the worker adds the ids.
type Outcome struct {
	Status    string // pilotproto.Status*
	ExitCode  int
	StartedAt time.Time
	Duration  time.Duration
	ErrorTail string
	// Signal ended the task (0: it exited). The worker needs it to tell a
	// task the batch system stopped from one that failed.
	Signal syscall.Signal
}

// Runner runs one task. When ctx is cancelled it must stop the task
// promptly and return (the worker decides the status from the cause).
type Runner interface {
	Run(ctx context.Context, t pilotproto.Task) Outcome
}

// A BatchRunner also runs a batched command (pilotproto.Batched) once
// for the tasks of one batch; the outcome is every task's.
type BatchRunner interface {
	RunBatch(ctx context.Context, ts []pilotproto.Task) Outcome
}

// SubstituteBatch expands a batched command for the tasks ts of one
// batch: {inputs} becomes their inputs and {outputs} their outputs, one
// argument each, in the same order; {job} the job's id.
func SubstituteBatch(argv []string, ts []pilotproto.Task) []string {
	job := strings.NewReplacer("{job}", strconv.FormatInt(ts[0].JobID, 10))
	out := make([]string, 0, len(argv)+2*len(ts))
	for _, a := range argv {
		switch a {
		case pilotproto.PlaceholderInputs:
			for _, t := range ts {
				out = append(out, t.Input)
			}
		case pilotproto.PlaceholderOutputs:
			for _, t := range ts {
				out = append(out, t.Output)
			}
		default:
			out = append(out, job.Replace(a))
		}
	}
	return out
}

// Substitute replaces the placeholders {input} {output} {job} {task} in
// every argument, in one pass (a value that contains a placeholder is not
// expanded again). {job} and {task} are the job and task ids, as `harvest
// submit` documents.
func Substitute(argv []string, t pilotproto.Task) []string {
	if !hasPlaceholder(argv) {
		// No placeholder (true, prog --flag): nothing to expand.
		return slices.Clone(argv)
	}
	out := make([]string, len(argv))
	var b []byte
	for i, a := range argv {
		if strings.IndexByte(a, '{') < 0 {
			out[i] = a
			continue
		}
		b = appendExpanded(b[:0], a, &t)
		out[i] = string(b)
	}
	return out
}

// hasPlaceholder reports whether an argument of argv may hold a
// placeholder (a '{').
func hasPlaceholder(argv []string) bool {
	return slices.ContainsFunc(argv, func(a string) bool { return strings.IndexByte(a, '{') >= 0 })
}

// appendExpanded appends a to b with its placeholders replaced by t's
// values, left to right, each value as it is (a strings.Replacer of the
// four, without building one per task: none of them is a prefix of
// another, so the first that matches at a position is the only one).
func appendExpanded(b []byte, a string, t *pilotproto.Task) []byte {
	for {
		i := strings.IndexByte(a, '{')
		if i < 0 {
			return append(b, a...)
		}
		b, a = append(b, a[:i]...), a[i:]
		switch {
		case strings.HasPrefix(a, "{input}"):
			b, a = append(b, t.Input...), a[len("{input}"):]
		case strings.HasPrefix(a, "{output}"):
			b, a = append(b, t.Output...), a[len("{output}"):]
		case strings.HasPrefix(a, "{job}"):
			b, a = strconv.AppendInt(b, t.JobID, 10), a[len("{job}"):]
		case strings.HasPrefix(a, "{task}"):
			b, a = strconv.AppendInt(b, t.ID, 10), a[len("{task}"):]
		default:
			b, a = append(b, '{'), a[1:]
		}
	}
}

// ExecRunner runs the task's command without a shell, in its own process
// group (so a kill reaches everything it started), with stdout and stderr
// in per-task files (OUTDIR/.harvest/logs/<task id>.<attempt>.out|.err) and
// a per-task timeout.
//
// What a task may reach (issue 13; docs/pilot.md "Task isolation"):
//   - its environment is clean, never the pilot's (which holds the pilot
//     token): PATH (Path), HOME and TMPDIR (a directory of its own, 0700,
//     removed when it ends), LANG=C.UTF-8, HARVEST_TASK_ID, HARVEST_JOB_ID,
//     HARVEST_ATTEMPT, HARVEST_SITE and HARVEST_PILOT_ID (Site and Pilot,
//     when set), then the job's
//     environment;
//   - its output directory is created and opened, and its logs created,
//     without following any symbolic link (a link planted after submission
//     is refused), and its input must resolve inside Roots;
//   - with a Jail, it runs confined (package confine): it reads the
//     system directories, Read, its job's dataset directory (its input's
//     parent) and, when its entry is a link, the link's target (resolved
//     inside Roots), not the rest of Roots (other users' datasets); it
//     writes only its output directory (the one opened above, by
//     descriptor) and its job's temporary directories on this worker
//     (its own among them).
//
// What the tasks of a job share is made once, when the first of them
// starts (jobfiles.go): the opened output and log directories, the
// directory of the temporary directories, the Landlock ruleset. Each task
// is then one fork and exec from a worker thread confined for it alone
// (confine.Ruleset.Start): no launcher process per task.
type ExecRunner struct {
	KillGrace   time.Duration // SIGTERM to SIGKILL
	TailBytes   int           // size of the error tail
	FallbackLog string        // log directory for tasks without an output directory
	Path        string        // the tasks' PATH
	Site        string        // the site the pilot runs at (HARVEST_SITE; "" = not set)
	Pilot       string        // the pilot's id, its batch job id (HARVEST_PILOT_ID; "" = not set)
	TempRoot    string        // where each task's own temporary directory is made
	// Roots are the queue's allowed roots: inputs must resolve inside
	// them. A job's runner may read them; each of its confined tasks
	// only its job's dataset directory and its own entry's link target.
	// Empty: the task's dataset directory (its input's parent), and a
	// confined task reads its input only.
	Roots []string
	Read  []string          // more directories confined tasks may read (site software)
	Jail  *confine.Launcher // nil: tasks are not confined; else its Mode says how
	// LookupAccount finds a task owner's Unix account (nil:
	// unixacct.Lookup): an entry that is a link must lead to something
	// its owner's account may read when its task starts, as when its job
	// was submitted (inputowner.go).
	LookupAccount func(name string) (unixacct.Account, error)
	// LogMax bounds each task log (stdout, stderr): past it the log keeps
	// its first LogMax bytes, a marker line and its last 8 KiB, the task
	// runs on (logcap.go). 0: no limit.
	LogMax int64

	jobs     jobCache     // what the tasks of a job share (jobfiles.go)
	accounts accountCache // the tasks' owners' accounts (inputowner.go)
	// landlock: auto mode confines (probed once).
	probe    sync.Once
	landlock bool
	lastKey  atomic.Pointer[jobKeyMemo] // jobKey's last
}

// DefaultPath is the tasks' PATH unless the runner sets another.
const DefaultPath = "/usr/local/bin:/usr/bin:/bin"

// DefaultExecRunner returns an unconfined ExecRunner with a 2 s kill grace,
// a 2 KB tail and logs cut at DefaultLogMax.
func DefaultExecRunner() *ExecRunner {
	return &ExecRunner{KillGrace: 2 * time.Second, TailBytes: 2048, FallbackLog: filepath.Join(os.TempDir(), "harvest-logs"),
		Path: DefaultPath, TempRoot: os.TempDir(), LogMax: DefaultLogMax}
}

// Env returns the environment of task t whose temporary directory is tmp.
func (r *ExecRunner) Env(t pilotproto.Task, tmp string) []string {
	// One allocation for the slice: this runs once per task of a group.
	env := make([]string, 0, 9+len(t.Env))
	env = append(env, "PATH="+r.Path, "HOME="+tmp, "TMPDIR="+tmp, "LANG=C.UTF-8",
		"HARVEST_TASK_ID="+strconv.FormatInt(t.ID, 10),
		"HARVEST_JOB_ID="+strconv.FormatInt(t.JobID, 10),
		"HARVEST_ATTEMPT="+strconv.Itoa(t.Attempt))
	if r.Site != "" {
		env = append(env, "HARVEST_SITE="+r.Site)
	}
	if r.Pilot != "" {
		// Not a secret: where the task ran (SLURM_JOB_ID is the pilot's,
		// and the clean environment does not pass it on).
		env = append(env, "HARVEST_PILOT_ID="+r.Pilot)
	}
	return append(env, t.Env...)
}

// prepared is what a task runs with; close releases it.
type prepared struct {
	job            *jobFiles
	stdout, stderr *os.File
	tmp            string
	tmpName        string // tmp's name in job.tmpDir, when made there
	// byRunner: the job's runner makes the task's logs (named outName and
	// errName in job.logs) and its temporary directory (tmpName), and
	// removes it; tmpLeft: it did not, the task left files there.
	byRunner         bool
	outName, errName string
	tmpLeft          bool
	read             []string // more paths the task may read (its linked entries' targets)
}

func (p *prepared) close() {
	for _, f := range []*os.File{p.stdout, p.stderr} {
		if f != nil {
			f.Close()
		}
	}
	if p.byRunner {
		if p.tmpLeft {
			os.RemoveAll(p.tmp)
		}
		return
	}
	// An empty temporary directory (most tasks leave nothing) goes with
	// one rmdir relative to the job's; anything else with RemoveAll.
	if p.tmpName != "" && unix.Unlinkat(int(p.job.tmpDir.Fd()), p.tmpName, unix.AT_REMOVEDIR) == nil {
		return
	}
	if p.tmp != "" {
		os.RemoveAll(p.tmp)
	}
}

// prepare opens what the tasks ts (one, or a batch of a batched command)
// write and read, refusing links that would lead elsewhere: the job's
// files once (jobFiles), the run's own here.
func (r *ExecRunner) prepare(ts []pilotproto.Task) (*prepared, error) {
	t := ts[0]
	var read []string
	for _, t := range ts {
		if t.Input == "" {
			continue
		}
		// Checked per task: the job's files hold the input only when no
		// roots are set.
		roots := r.Roots
		if len(roots) == 0 {
			roots = []string{filepath.Dir(t.Input)}
		}
		real, err := safefs.ResolveIn(t.Input, roots)
		if err != nil {
			return nil, fmt.Errorf("input: %w", err)
		}
		if real != t.Input {
			if err := r.ownerMayRead(t, real); err != nil {
				return nil, fmt.Errorf("input: %w", err)
			}
		}
		if real != t.Input && len(r.Roots) > 0 {
			// A linked entry: its target is the task's to read, beside
			// its job's dataset directory.
			read = append(read, real)
		}
	}
	job, err := r.jobs.acquire(r, t)
	if err != nil {
		return nil, err
	}
	p, err := r.prepareIn(job, ts)
	if err != nil && job.outDir != nil {
		// The job's directory may have been removed or replaced since it
		// was opened: once more with it opened afresh.
		r.jobs.release(job, true)
		if job, err = r.jobs.acquire(r, t); err != nil {
			return nil, err
		}
		p, err = r.prepareIn(job, ts)
	}
	if err != nil {
		r.jobs.release(job, false)
		return nil, err
	}
	p.read = read
	return p, nil
}

func (r *ExecRunner) prepareIn(job *jobFiles, ts []pilotproto.Task) (*prepared, error) {
	t := ts[0]
	p := &prepared{job: job}
	ok := false
	defer func() {
		if !ok {
			p.close()
		}
	}()
	var err error
	switch {
	case job.logs != nil && job.runner != nil && len(ts) == 1 && !pilotproto.Batched(t.Command):
		// A task of its own, confined: its runner makes its logs and its
		// temporary directory, named here.
		p.byRunner = true
		p.outName, p.errName = pilotproto.LogName(t.ID, t.Attempt, "out"), pilotproto.LogName(t.ID, t.Attempt, "err")
		p.tmpName = tmpName(t)
		p.tmp = job.tmpRoot + "/" + p.tmpName
		outputParent(job, t)
		ok = true
		return p, nil
	case job.logs != nil:
		if p.stdout, err = safefs.CreateBeneath(job.logs, pilotproto.LogName(t.ID, t.Attempt, "out"), 0o644); err != nil {
			return nil, fmt.Errorf("stdout file: %w", err)
		}
		if p.stderr, err = safefs.CreateBeneath(job.logs, pilotproto.LogName(t.ID, t.Attempt, "err"), 0o644); err != nil {
			return nil, fmt.Errorf("stderr file: %w", err)
		}
		// The other tasks of a batched run: their log names are links
		// to the run's logs.
		for _, o := range ts[1:] {
			for _, ext := range []string{"out", "err"} {
				if err := linkLog(job.logs, pilotproto.LogName(t.ID, t.Attempt, ext), pilotproto.LogName(o.ID, o.Attempt, ext)); err != nil {
					return nil, fmt.Errorf("log of task %d: %w", o.ID, err)
				}
			}
		}
		if len(ts) > 1 || pilotproto.Batched(t.Command) {
			// A batched run: one output directory per entry, made here.
			for _, o := range ts {
				rel, err := filepath.Rel(o.OutputDir, o.Output)
				if err != nil || rel == "." || !safefs.Within(o.Output, []string{o.OutputDir}) {
					return nil, fmt.Errorf("output %s is not inside the job's output directory", o.Output)
				}
				d, err := safefs.MkdirBeneath(job.outDir, rel, 0o755)
				if err != nil {
					return nil, fmt.Errorf("output directory: %w", err)
				}
				d.Close()
			}
		} else {
			outputParent(job, t)
		}
	default:
		// The runner's fallback directory, private: its logs are made
		// without following links, as in an output directory.
		if p.stdout, err = safefs.CreateBeneath(job.fallback, pilotproto.LogName(t.ID, t.Attempt, "out"), 0o600); err != nil {
			return nil, fmt.Errorf("stdout file: %w", err)
		}
		if p.stderr, err = safefs.CreateBeneath(job.fallback, pilotproto.LogName(t.ID, t.Attempt, "err"), 0o600); err != nil {
			return nil, fmt.Errorf("stderr file: %w", err)
		}
		for _, o := range ts[1:] {
			for _, ext := range []string{"out", "err"} {
				if err := linkLog(job.fallback, pilotproto.LogName(t.ID, t.Attempt, ext), pilotproto.LogName(o.ID, o.Attempt, ext)); err != nil {
					return nil, fmt.Errorf("log of task %d: %w", o.ID, err)
				}
			}
		}
	}
	// The task's temporary directory, made relative to the job's private
	// one (opened once); a name taken (a former run's, not removed) gets
	// a fresh one.
	name := tmpName(t)
	if err = unix.Mkdirat(int(job.tmpDir.Fd()), name, 0o700); err == nil {
		p.tmp, p.tmpName = job.tmpRoot+"/"+name, name
	} else if p.tmp, err = os.MkdirTemp(job.tmpRoot, name+"-"); err != nil {
		return nil, fmt.Errorf("temporary directory: %w", err)
	}
	ok = true
	return p, nil
}

// tmpName is the name of t's temporary directory in its job's.
func tmpName(t pilotproto.Task) string {
	var b [48]byte
	return string(appendTmpName(b[:0], &t))
}

// outputParent makes the parent of t's output when it is deeper than the
// job's output directory (best effort: the command may create it itself).
func outputParent(job *jobFiles, t pilotproto.Task) {
	// Most outputs are an entry of the output directory itself: told by
	// comparing strings, without a filepath.Rel per task.
	if i := strings.LastIndexByte(t.Output, '/'); i >= 0 && t.Output[:i] == t.OutputDir && !strings.Contains(t.Output[i+1:], "..") {
		return
	}
	if rel, err := filepath.Rel(t.OutputDir, filepath.Dir(t.Output)); err == nil && rel != "." && safefs.Within(filepath.Dir(t.Output), []string{t.OutputDir}) {
		if d, err := safefs.MkdirBeneath(job.outDir, rel, 0o755); err == nil {
			d.Close()
		}
	}
}

// proc is a started task.
type proc interface {
	done() <-chan struct{}
	signal(syscall.Signal)
	// result once done: the wait status, or why it is unknown.
	result() (syscall.WaitStatus, error)
}

// cmdProc is an unconfined task, the worker's own child.
type cmdProc struct {
	cmd *exec.Cmd
	end chan struct{}
}

func (c *cmdProc) done() <-chan struct{} { return c.end }

func (c *cmdProc) signal(sig syscall.Signal) { _ = syscall.Kill(-c.cmd.Process.Pid, sig) }

func (c *cmdProc) result() (syscall.WaitStatus, error) {
	ws, _ := c.cmd.ProcessState.Sys().(syscall.WaitStatus)
	return ws, nil
}

// runnerProc is a confined task, started by its job's runner.
type runnerProc struct{ t *confine.Task }

func (c runnerProc) done() <-chan struct{}               { return c.t.Done() }
func (c runnerProc) signal(sig syscall.Signal)           { c.t.Signal(sig) }
func (c runnerProc) result() (syscall.WaitStatus, error) { return c.t.Wait() }

// start starts the task: through its job's runner when confined, else as
// the worker's own child. The error carries the exit code a shell would
// give (127: not found).
func (r *ExecRunner) start(t pilotproto.Task, argv, env []string, p *prepared) (proc, int, error) {
	prog, err := p.job.lookPath(argv[0], r.Path)
	if err != nil {
		code := -1
		if errors.Is(err, os.ErrNotExist) {
			code = 127
		}
		return nil, code, err
	}
	if run := p.job.runner; run != nil {
		var task *confine.Task
		spec := confine.Spec{Path: prog, Argv: argv, Env: env, Read: p.read}
		if p.byRunner {
			spec.Out, spec.Err, spec.Tmp = p.outName, p.errName, p.tmpName
			task, err = run.StartSpec(spec)
		} else {
			task, err = run.Start(spec, r.jobs.devNull, p.stdout, p.stderr)
		}
		if err != nil {
			code := -1
			var se *confine.StartError
			if errors.As(err, &se) {
				code = se.Code
			}
			return nil, code, err
		}
		return runnerProc{task}, 0, nil
	}
	cmd := exec.Command(prog, argv[1:]...)
	cmd.Args[0] = argv[0]
	switch {
	case t.WorkDir != "":
		cmd.Dir = t.WorkDir
	case p.job.outDir != nil:
		// The child changes directory before it closes the worker's
		// descriptors: this is the directory the job's files opened.
		cmd.Dir = safefs.FDPath(p.job.outDir)
	}
	cmd.Stdin, cmd.Stdout, cmd.Stderr = r.jobs.devNull, p.stdout, p.stderr
	cmd.Env = env
	// Own process group so kill reaches the children; SIGKILL if the
	// worker itself dies (kill -9), so no orphan keeps writing.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		// As the job's runner (and a shell) says it.
		code := confine.ExitCannotRun
		if errors.Is(err, os.ErrNotExist) {
			code = confine.ExitNotFound
		}
		return nil, code, err
	}
	c := &cmdProc{cmd: cmd, end: make(chan struct{})}
	go func() {
		cmd.Wait()
		close(c.end)
	}()
	return c, 0, nil
}

// Run implements Runner. A task its job's runner may run in a group
// (GroupKey) runs as a group of one, as the worker's groups do.
func (r *ExecRunner) Run(ctx context.Context, t pilotproto.Task) Outcome {
	if r.GroupKey(t) != "" {
		ch := make(chan Outcome, 1)
		g := r.StartGroup([]pilotproto.Task{t}, 1, func(_ []int, os []Outcome) { ch <- os[0] })
		select {
		case o := <-ch:
			return o
		case <-ctx.Done():
			g.Stop(0)
			return <-ch
		}
	}
	return r.run(ctx, []pilotproto.Task{t}, Substitute(t.Command, t), true)
}

// RunBatch implements BatchRunner: the batched command once, with every
// task's input in place of {inputs}, its output directory (made for it)
// in place of {outputs}, its logs linked to the run's, its timeout the
// job's per-task timeout times the number of tasks; the outcome is
// every task's, as the command's exit says. The environment is a task's
// (HARVEST_TASK_ID the first's) with HARVEST_TASK_IDS, all of them.
func (r *ExecRunner) RunBatch(ctx context.Context, ts []pilotproto.Task) Outcome {
	if len(ts) == 0 {
		return Outcome{Status: pilotproto.StatusFailed, ExitCode: -1, StartedAt: time.Now(), ErrorTail: "empty batch"}
	}
	return r.run(ctx, ts, SubstituteBatch(ts[0].Command, ts), true)
}

// run runs ts with argv; retry: once more with the job's files made
// afresh if its runner could not make the task's files (the job's output
// directory removed or replaced since it was opened).
func (r *ExecRunner) run(ctx context.Context, ts []pilotproto.Task, argv []string, retry bool) Outcome {
	start := time.Now()
	t := ts[0]
	fail := func(code int, err error) Outcome {
		return Outcome{Status: pilotproto.StatusFailed, ExitCode: code, StartedAt: start, Duration: time.Since(start), ErrorTail: err.Error()}
	}
	if len(argv) == 0 || argv[0] == "" {
		return fail(-1, errors.New("empty command"))
	}
	p, err := r.prepare(ts)
	if err != nil {
		return fail(-1, err)
	}
	defer func() {
		// A runner that ended (a task killed it) is not handed out again.
		r.jobs.release(p.job, p.job.runner != nil && p.job.runner.Ended())
	}()
	defer p.close()
	env := r.Env(t, p.tmp)
	if len(ts) > 1 || pilotproto.Batched(t.Command) {
		ids := make([]string, len(ts))
		for i, o := range ts {
			ids[i] = strconv.FormatInt(o.ID, 10)
		}
		env = append(env, "HARVEST_TASK_IDS="+strings.Join(ids, ","))
	}
	pr, code, err := r.start(t, argv, env, p)
	if err != nil {
		return fail(code, fmt.Errorf("start %s: %w", argv[0], err))
	}
	logsCut := r.watchLogs(p, pr.done())
	// (Bounded well below time.Duration's range: a year's timeout times
	// a thousand entries would overflow it.)
	timeoutS := min(t.TimeoutS*int64(len(ts)), 100*365*24*3600)
	var timeout <-chan time.Time
	if t.TimeoutS > 0 {
		tm := time.NewTimer(time.Duration(timeoutS) * time.Second)
		defer tm.Stop()
		timeout = tm.C
	}
	timedOut := false
	select {
	case <-pr.done():
	case <-ctx.Done():
		r.kill(pr)
	case <-timeout:
		timedOut = true
		r.kill(pr)
	}
	logsCut()
	ws, werr := pr.result()
	if rp, ok := pr.(runnerProc); ok && p.byRunner {
		p.tmpLeft = rp.t.TmpLeft()
	}
	if se := (*confine.StartError)(nil); errors.As(werr, &se) {
		if se.Files && retry && ctx.Err() == nil {
			r.jobs.retire(p.job)
			return r.run(ctx, ts, argv, false)
		}
		return fail(se.Code, fmt.Errorf("start %s: %w", argv[0], se))
	}
	o := Outcome{StartedAt: start, Duration: time.Since(start), ExitCode: -1}
	switch {
	case werr != nil:
	case ws.Exited():
		o.ExitCode = ws.ExitStatus()
	case ws.Signaled():
		o.Signal = ws.Signal()
	}
	switch {
	case timedOut:
		o.Status = pilotproto.StatusTimeout
	case werr == nil && ws.Exited() && ws.ExitStatus() == 0:
		o.Status = pilotproto.StatusDone
	default:
		o.Status = pilotproto.StatusFailed
	}
	if o.Status != pilotproto.StatusDone {
		o.ErrorTail = p.tail(r.TailBytes)
		if werr != nil {
			o.ErrorTail += "\n[harvest] " + werr.Error()
		}
		if timedOut {
			o.ErrorTail += fmt.Sprintf("\n[harvest] killed after the task timeout of %ds", timeoutS)
		}
	}
	return o
}

// kill sends SIGTERM to the task's process group, SIGKILL after the grace
// or, once the task ended, to what is left of the group.
func (r *ExecRunner) kill(pr proc) {
	pr.signal(syscall.SIGTERM)
	t := time.NewTimer(r.KillGrace)
	defer t.Stop()
	select {
	case <-pr.done():
		if _, ok := pr.(*cmdProc); ok {
			pr.signal(syscall.SIGKILL) // stragglers in the group (the runner does it itself)
		}
	case <-t.C:
		pr.signal(syscall.SIGKILL)
		<-pr.done()
	}
}

// linkLog makes the log name dst in logs a link to the log src there
// (replacing a former run's), neither followed if a link.
func linkLog(logs *os.File, src, dst string) error {
	fd := int(logs.Fd())
	err := unix.Linkat(fd, src, fd, dst, 0)
	if errors.Is(err, unix.EEXIST) {
		if err = unix.Unlinkat(fd, dst, 0); err == nil {
			err = unix.Linkat(fd, src, fd, dst, 0)
		}
	}
	return err
}

// tail returns the last n bytes of the task's stderr ("" if unreadable,
// or empty: the runner then made no file), opened by name when the
// runner made it (a link not followed).
func (p *prepared) tail(n int) string {
	if !p.byRunner {
		return tail(p.stderr, n)
	}
	fd, err := unix.Openat(int(p.job.logs.Fd()), p.errName, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return ""
	}
	f := os.NewFile(uintptr(fd), p.errName)
	defer f.Close()
	return tail(f, n)
}

// tail returns the last n bytes of a file ("" if unreadable).
func tail(f *os.File, n int) string {
	st, err := f.Stat()
	if err != nil {
		return ""
	}
	off := max(st.Size()-int64(n), 0)
	b, err := io.ReadAll(io.NewSectionReader(f, off, st.Size()-off))
	if err != nil {
		return ""
	}
	return string(b)
}

// NoopRunner finishes every task at once without running anything: the
// dispatch benchmark's task, so that only harvest's own overhead is timed.
type NoopRunner struct{}

// Run implements Runner.
func (NoopRunner) Run(context.Context, pilotproto.Task) Outcome {
	return Outcome{Status: pilotproto.StatusDone, StartedAt: time.Now()}
}

// SleepRunner sleeps D per task in process (the scaled-down thesis shape).
type SleepRunner struct{ D time.Duration }

// Run implements Runner.
func (s SleepRunner) Run(ctx context.Context, _ pilotproto.Task) Outcome {
	start := time.Now()
	t := time.NewTimer(s.D)
	defer t.Stop()
	select {
	case <-t.C:
		return Outcome{Status: pilotproto.StatusDone, StartedAt: start, Duration: time.Since(start)}
	case <-ctx.Done():
		return Outcome{Status: pilotproto.StatusFailed, ExitCode: -1, StartedAt: start, Duration: time.Since(start)}
	}
}
