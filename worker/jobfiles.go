package worker

import (
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
	"golang.org/x/sys/unix"
)

// jobFiles is what the tasks of one job on this worker share, made when
// its first task starts instead of once per task: the output directory
// and its log directory opened without following links, a private
// directory (0700) holding the tasks' temporary directories, and, when
// tasks are confined, the job's task runner (confine.Runner), confined
// once with the job's policy. Each task still gets its own log files, its
// own temporary directory and its own Landlock domain.
type jobFiles struct {
	key    string
	outDir *os.File // O_PATH; nil: the job has no output directory
	logs   *os.File // OUTDIR/.harvest/logs; nil: fallback
	// fallback is the runner's FallbackLog, the pilot's own and private
	// (safefs.OwnDir), when the job has no output directory; else nil.
	fallback *os.File
	input    *os.File // the input the rules name (no roots set); else nil
	dataset  *os.File // the dataset directory each task's rules name (roots set); else nil
	tmpRoot  string
	tmpDir   *os.File        // tmpRoot, opened: the tasks' directories are made relative to it
	runner   *confine.Runner // the job's confined task runner; nil: tasks are not confined
	progs    sync.Map        // program name -> path found in PATH (lookPath)
	refs     int             // tasks using it
	slots    int             // its runner's slots: the sum of its groups' (under the cache's mu)
	idle     time.Time       // since when refs is 0
	stale    bool            // no longer handed out
}

// jobCache holds the jobFiles of the jobs whose tasks ran lately.
type jobCache struct {
	mu      sync.Mutex
	m       map[string]*jobFiles
	devNull *os.File // every task's stdin
}

// A job's files are kept this long after its last task ended, and at most
// maxIdleJobs of them (a worker fed by many users' jobs at once).
const (
	jobIdle     = 10 * time.Second
	maxIdleJobs = 32
)

// jobKey tells apart what gives tasks different files or rules.
func (r *ExecRunner) jobKey(t pilotproto.Task) string {
	in := ""
	if r.Jail != nil && t.Input != "" {
		if len(r.Roots) == 0 {
			in = t.Input // the rules name the input itself
		} else {
			in = filepath.Dir(t.Input) // the tasks' rules name the dataset directory
		}
	}
	// The worker asks for every queued task's key (GroupKey), and a
	// pull's tasks come a job at a time: the last key made is kept.
	if m := r.lastKey.Load(); m != nil && m.job == t.JobID && m.out == t.OutputDir && m.work == t.WorkDir && m.in == in {
		return m.key
	}
	k := strconv.FormatInt(t.JobID, 10) + "\x00" + t.OutputDir + "\x00" + t.WorkDir
	if in != "" {
		k += "\x00" + in
	}
	r.lastKey.Store(&jobKeyMemo{job: t.JobID, out: t.OutputDir, work: t.WorkDir, in: in, key: k})
	return k
}

// jobKeyMemo is the last key jobKey made, and what it was made of.
type jobKeyMemo struct {
	job           int64
	out, work, in string
	key           string
}

// closeJob closes job files the cache let go of. The cache calls it
// without its lock held: closing a runner waits for it to end (its tasks
// killed) and a job's temporary root is removed whole, and neither may
// hold up the tasks of other jobs. A test replaces it.
var closeJob = (*jobFiles).close

// closeJobs closes js (outside the cache's lock).
func closeJobs(js []*jobFiles) {
	for _, j := range js {
		closeJob(j)
	}
}

// acquire returns t's job files, made if need be; release gives them back.
func (c *jobCache) acquire(r *ExecRunner, t pilotproto.Task) (*jobFiles, error) {
	key := r.jobKey(t)
	c.mu.Lock()
	j, evicted, err := c.acquireLocked(r, key, t)
	c.mu.Unlock()
	closeJobs(evicted)
	return j, err
}

func (c *jobCache) acquireLocked(r *ExecRunner, key string, t pilotproto.Task) (*jobFiles, []*jobFiles, error) {
	if c.devNull == nil {
		f, err := os.Open(os.DevNull)
		if err != nil {
			return nil, nil, err
		}
		c.devNull = f
	}
	if c.m == nil {
		c.m = map[string]*jobFiles{}
	}
	var gone []*jobFiles
	if j := c.m[key]; j != nil {
		if j.outDir == nil || sameDir(j.outDir, t.OutputDir) {
			j.refs++
			return j, nil, nil
		}
		// Renamed or replaced since it was opened (a task put a link
		// in its place): not handed out again; opened afresh below,
		// which refuses a link.
		j.stale = true
		delete(c.m, key)
		if j.refs == 0 {
			gone = append(gone, j)
		}
	}
	j, err := r.openJob(key, t)
	if err != nil {
		return nil, gone, err
	}
	j.refs = 1
	c.m[key] = j
	return j, append(gone, c.evict(time.Now())...), nil
}

// sameDir reports whether path, followed without links, is still the
// directory f was opened on.
func sameDir(f *os.File, path string) bool {
	now, err := safefs.OpenDir(path)
	if err != nil {
		return false
	}
	defer now.Close()
	var a, b unix.Stat_t
	return unix.Fstat(int(f.Fd()), &a) == nil && unix.Fstat(int(now.Fd()), &b) == nil && a.Dev == b.Dev && a.Ino == b.Ino
}

// runnerHoldMS is how long a job's runner may hold the ends of its queued
// tasks while more of them wait for a slot (the runner's own default is
// 10 ms): the worker has nothing to do for them sooner (the runner fills
// the slots they leave, and a group's results wait for its end anyway,
// GroupResultDelay), and every packet wakes it.
const runnerHoldMS = 40

// release ends a task's use of j; stale: j is not to be handed out again.
func (c *jobCache) release(j *jobFiles, stale bool) {
	c.mu.Lock()
	var done []*jobFiles
	defer func() {
		c.mu.Unlock()
		closeJobs(done)
	}()
	j.refs--
	if stale && !j.stale {
		j.stale = true
		if c.m[j.key] == j {
			delete(c.m, j.key)
		}
	}
	now := time.Now()
	j.idle = now
	if j.stale && j.refs == 0 {
		done = append(done, j)
	}
	done = append(done, c.evict(now)...)
}

// retire stops handing out j (its directory was removed or replaced
// since it was opened); the tasks using it keep it until they release it.
func (c *jobCache) retire(j *jobFiles) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !j.stale {
		j.stale = true
		if c.m[j.key] == j {
			delete(c.m, j.key)
		}
	}
}

// evict lets go of the job files idle too long, or beyond maxIdleJobs,
// and returns them to be closed once the lock is released.
func (c *jobCache) evict(now time.Time) (out []*jobFiles) {
	idle := 0
	for _, j := range c.m {
		if j.refs == 0 {
			idle++
		}
	}
	for k, j := range c.m {
		if j.refs == 0 && (now.Sub(j.idle) > jobIdle || idle > maxIdleJobs) {
			delete(c.m, k)
			out = append(out, j)
			idle--
		}
	}
	return out
}

// closeAll releases every job's files (tasks still running keep theirs
// until they end).
func (c *jobCache) closeAll() {
	c.mu.Lock()
	var done []*jobFiles
	for k, j := range c.m {
		delete(c.m, k)
		j.stale = true
		if j.refs == 0 {
			done = append(done, j)
		}
	}
	c.mu.Unlock()
	closeJobs(done)
}

func (j *jobFiles) close() {
	for _, f := range []*os.File{j.outDir, j.logs, j.fallback, j.input, j.dataset, j.tmpDir} {
		if f != nil {
			f.Close()
		}
	}
	if j.runner != nil {
		j.runner.Close()
	}
	if j.tmpRoot != "" {
		os.RemoveAll(j.tmpRoot)
	}
}

// openJob makes the files and rules the tasks of t's job share.
func (r *ExecRunner) openJob(key string, t pilotproto.Task) (*jobFiles, error) {
	j := &jobFiles{key: key}
	ok := false
	defer func() {
		if !ok {
			j.close()
		}
	}()
	var err error
	if t.OutputDir != "" {
		if j.outDir, err = safefs.MkdirAll(t.OutputDir, 0o755); err != nil {
			return nil, fmt.Errorf("output directory: %w", err)
		}
		if j.logs, err = safefs.MkdirBeneath(j.outDir, pilotproto.LogDir, 0o755); err != nil {
			return nil, fmt.Errorf("log directory: %w", err)
		}
	} else if j.fallback, err = safefs.OwnDir(r.FallbackLog); err != nil {
		// In /tmp by default: another user may have made it, or put a
		// link in its place.
		return nil, fmt.Errorf("log directory: %w", err)
	}
	if j.tmpRoot, err = os.MkdirTemp(r.TempRoot, "harvest-job-"+strconv.FormatInt(t.JobID, 10)+"-"); err != nil {
		return nil, fmt.Errorf("temporary directory: %w", err)
	}
	if j.tmpDir, err = os.OpenFile(j.tmpRoot, unix.O_PATH|unix.O_DIRECTORY, 0); err != nil {
		return nil, fmt.Errorf("temporary directory: %w", err)
	}
	if !r.confined() {
		ok = true
		return j, nil
	}
	// The job's runner: confined once with the job's policy.
	var files []*os.File
	pol := confine.Policy{Path: r.Path, Write: []string{j.tmpRoot}}
	// The runner makes its tasks' temporary directories in the job's,
	// and their logs in its log directory: it may write both anyway, as
	// its tasks do.
	// Its tasks' ends wait up to runnerHoldMS for others' while more of
	// its queued tasks wait for a slot (fewer packets, fewer wakes of the
	// worker).
	rp := confine.RunnerPolicy{Tmp: j.tmpRoot, LogMax: r.LogMax, GraceMS: max(r.KillGrace.Milliseconds(), 1), HoldMS: runnerHoldMS}
	pol.Read = append(append(append(pol.Read, confine.SystemRead...), r.Roots...), r.Read...)
	if j.outDir != nil {
		files = append(files, j.outDir)
		pol.Dir = confine.RunnerFile(len(files) - 1)
		pol.Write = append(pol.Write, pol.Dir)
		files = append(files, j.logs)
		rp.Logs = confine.RunnerFile(len(files) - 1)
	}
	if len(r.Roots) == 0 && t.Input != "" {
		if j.input, err = safefs.OpenIn(t.Input, []string{filepath.Dir(t.Input)}); err != nil {
			return nil, fmt.Errorf("input: %w", err)
		}
		files = append(files, j.input)
		pol.Read = append(pol.Read, confine.RunnerFile(len(files)-1))
	}
	if t.WorkDir != "" {
		pol.Dir = t.WorkDir
		pol.Read = append(pol.Read, t.WorkDir)
	}
	if len(r.Roots) > 0 {
		// The runner reads the roots (its tasks' linked entries may lead
		// anywhere in them); each task, in its own domain nested in the
		// runner's, reads its job's dataset directory (opened without
		// following links: one put in its place since is refused) and
		// what its request adds (its entry's link target), not the other
		// jobs' datasets under the same roots.
		tasks := confine.Policy{Read: append(append([]string(nil), confine.SystemRead...), r.Read...), Write: pol.Write}
		if t.Input != "" {
			if j.dataset, err = safefs.OpenDir(filepath.Dir(t.Input)); err != nil {
				return nil, fmt.Errorf("dataset directory: %w", err)
			}
			files = append(files, j.dataset)
			tasks.Read = append(tasks.Read, confine.RunnerFile(len(files)-1))
		}
		if t.WorkDir != "" {
			tasks.Read = append(tasks.Read, t.WorkDir)
		}
		rp.Tasks = &tasks
	}
	rp.Policy = pol
	if j.runner, err = confine.StartRunner(r.Jail, rp, files); err != nil {
		return nil, err
	}
	ok = true
	return j, nil
}

// Close releases what the runner keeps for the jobs whose tasks it ran
// lately (open directories, task runners, the jobs' temporary directories).
func (r *ExecRunner) Close() error {
	r.jobs.closeAll()
	return nil
}

// lookPath is confine.LookPath with path, remembered for the job's life
// on this worker for a name without a slash (a program that goes away
// meanwhile fails the task at its exec, with the same code 127).
func (j *jobFiles) lookPath(name, path string) (string, error) {
	if strings.Contains(name, "/") {
		return confine.LookPath(name, path)
	}
	if p, ok := j.progs.Load(name); ok {
		return p.(string), nil
	}
	p, err := confine.LookPath(name, path)
	if err == nil {
		j.progs.Store(name, p)
	}
	return p, err
}
