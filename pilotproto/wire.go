package pilotproto

import (
	"fmt"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// The wire forms below carry a batch once (issue 29): a pull answer (and a
// worker's batch, workerproto) names each job's command, directories and
// options once and then lists its entries as parallel arrays; a results
// report lists plain successes as arrays of ids and attempts with their
// sums, and full records only for the rest. In Go, the master, the queue
// and the store keep working on []Task and []Result: Pack and Unpack
// convert at the HTTP layer, losslessly (TestPackUnpackRoundTrip). The
// queue's pull answer is the exception: it is packed from the queue's
// picks directly (queue.Pool.PullWire), never made into task records.

// JobTasks is one job's tasks on the wire: the job's fixed fields once,
// then its entries (IDs[i], Names[i], Attempts[i]). A task's input is
// Dataset/name, its output OutputDir/name and its environment TaskEnv.
type JobTasks struct {
	JobID     int64    `json:"job_id"`
	Owner     string   `json:"owner"`
	Command   []string `json:"command"`
	Dataset   string   `json:"dataset"`
	OutputDir string   `json:"output_dir"`
	WorkDir   string   `json:"work_dir,omitempty"`
	BatchSize int      `json:"batch_size"`
	Cores     int      `json:"cores"`
	TimeoutS  int64    `json:"timeout_s,omitempty"`
	IDs       []int64  `json:"ids"`
	Names     []string `json:"names"`
	Attempts  []int    `json:"attempts"`
}

// Packed is a list of tasks on the wire: the jobs' entries, then Tasks,
// full records for a task that does not fit its job's form (none from
// harvest's own queue; an older queue's answer is Tasks alone). Order,
// when present, restores the original order: one index per task, the
// job whose next entry comes (len(Jobs): the next of Tasks); without it
// the jobs' entries come job after job, then Tasks.
type Packed struct {
	Jobs  []JobTasks `json:"jobs,omitempty"`
	Order []int      `json:"order,omitempty"`
	Tasks []Task     `json:"tasks,omitempty"`
}

// PullWire is the pull answer for a pilot that asks for the compact form
// (PullRequest.Compact); an older pilot gets PullResponse as it is.
type PullWire struct {
	Packed
	CancelledJobs []int64 `json:"cancelled_jobs,omitempty"`
}

// MaxResults bounds the results of one report (after unpacking).
const MaxResults = 100_000

// TaskEnv is the environment the queue gives a task.
func TaskEnv(job, task int64) []string {
	j, t := taskEnv(job, task)
	return []string{j, t}
}

// taskEnv is TaskEnv's two variables, made as one string (every task
// gets them when a pull is unpacked).
func taskEnv(job, task int64) (string, string) {
	var b [64]byte
	e := append(strconv.AppendInt(append(b[:0], "HARVEST_JOB="...), job, 10), "HARVEST_TASK="...)
	k := len(e) - len("HARVEST_TASK=")
	v := string(strconv.AppendInt(e, task, 10))
	return v[:k], v[k:]
}

// AppendTaskEnv appends TaskEnv(job, task) to envs: a pull's tasks can
// share one array (each task's Env a slice of it, capped: an append to
// one copies).
func AppendTaskEnv(envs []string, job, task int64) []string {
	j, t := taskEnv(job, task)
	return append(envs, j, t)
}

// IsTaskEnv reports whether env is TaskEnv(job, task), without making it.
func IsTaskEnv(env []string, job, task int64) bool {
	return len(env) == 2 && envIs(env[0], "HARVEST_JOB=", job) && envIs(env[1], "HARVEST_TASK=", task)
}

// PlainName reports whether name is one path element that filepath.Join
// leaves as it is: not empty, "." or "..", and without a "/".
func PlainName(name string) bool {
	return name != "" && name != "." && name != ".." && strings.IndexByte(name, '/') < 0
}

// PlainDir reports whether filepath.Join(dir, name) is dir + "/" + name
// for every plain name (PlainName): dir is clean and not "", "." or "/".
// A pull's tasks share their job's directories: checked once, each entry's
// paths are made and checked without a filepath.Clean of their own.
func PlainDir(dir string) bool {
	return dir != "" && dir != "." && dir != "/" && filepath.Clean(dir) == dir
}

// JoinName is filepath.Join(dir, name) for a dir that PlainDir said
// plain (plain) or not: a plain dir and name are joined without a
// filepath.Clean of the whole path.
func JoinName(dir string, plain bool, name string) string {
	if plain && PlainName(name) {
		return dir + "/" + name
	}
	return filepath.Join(dir, name)
}

// isEntry reports whether p is dir + "/" + name.
func isEntry(p, dir, name string) bool {
	return len(p) == len(dir)+1+len(name) && p[len(dir)] == '/' && strings.HasPrefix(p, dir) && strings.HasSuffix(p, name)
}

// plainDirs remembers the last directories PlainDir passed, so that the
// tasks of one job in a row check theirs once.
type plainDirs struct{ in, out string }

// plain is PlainDir(d), remembered in *last.
func plain(d string, last *string) bool {
	if d != "" && d == *last {
		return true
	}
	if !PlainDir(d) {
		return false
	}
	*last = d
	return true
}

// datasetOf is the directory t's input is the entry of, if t has the
// form the wire carries compactly: input Join(dataset, name), output
// Join(OutputDir, name), environment TaskEnv. It checks without
// allocating (a pull packs every task): a path is its Join if it is
// dir + "/" + name and already clean, which it is without a look at the
// whole path when dir is plain (PlainDir, remembered in c across a job's
// tasks) and name is.
func datasetOf(t *Task, c *plainDirs) (string, bool) {
	in, name := t.Input, t.Name
	if name == "" || len(in) <= len(name) || in[len(in)-len(name)-1] != '/' || in[len(in)-len(name):] != name {
		return "", false
	}
	d := in[:len(in)-len(name)-1]
	plainName := PlainName(name)
	if !(plainName && plain(d, &c.in)) && filepath.Clean(in) != in {
		return "", false
	}
	if d == "" {
		d = "/"
	}
	out := t.Output
	if plainName && isEntry(out, t.OutputDir, name) && plain(t.OutputDir, &c.out) {
		return d, IsTaskEnv(t.Env, t.JobID, t.ID)
	}
	if !strings.HasPrefix(out, t.OutputDir) || t.OutputDir == "" || filepath.Clean(out) != out {
		return "", false
	}
	rest := out[len(t.OutputDir):]
	if !strings.HasSuffix(t.OutputDir, "/") {
		if rest == "" || rest[0] != '/' {
			return "", false
		}
		rest = rest[1:]
	}
	if rest != name || !IsTaskEnv(t.Env, t.JobID, t.ID) {
		return "", false
	}
	return d, true
}

// envIs reports whether kv is key followed by n in decimal.
func envIs(kv, key string, n int64) bool {
	v, ok := strings.CutPrefix(kv, key)
	var b [20]byte
	return ok && v == string(strconv.AppendInt(b[:0], n, 10))
}

func (j *JobTasks) fits(t *Task, dataset string) bool {
	return j.JobID == t.JobID && j.Owner == t.Owner && j.Dataset == dataset && j.OutputDir == t.OutputDir &&
		j.WorkDir == t.WorkDir && j.BatchSize == t.BatchSize && j.Cores == t.Cores && j.TimeoutS == t.TimeoutS &&
		slices.Equal(j.Command, t.Command)
}

// Pack groups tasks by job. The jobs and their arrays are sized first
// and carved from one allocation each: with many users a pull holds
// about one task per job.
func Pack(tasks []Task) Packed {
	var p Packed
	at := map[int64]int{}
	var counts []int
	for i := range tasks {
		k, seen := at[tasks[i].JobID]
		if !seen {
			k = len(counts)
			at[tasks[i].JobID] = k
			counts = append(counts, 0)
		}
		counts[k]++
	}
	ids, names, attempts := make([]int64, len(tasks)), make([]string, len(tasks)), make([]int, len(tasks))
	offset := make([]int, len(counts)) // where job k's entries start in the arrays
	for k := 1; k < len(counts); k++ {
		offset[k] = offset[k-1] + counts[k-1]
	}
	index := make([]int, len(counts)) // job k's place in p.Jobs, -1 before its first fitting task
	for k := range index {
		index[k] = -1
	}
	p.Jobs = make([]JobTasks, 0, len(counts))
	order := make([]int, len(tasks))
	var dirs plainDirs
	for i := range tasks {
		t := &tasks[i]
		d, ok := datasetOf(t, &dirs)
		c := at[t.JobID]
		if ok && index[c] < 0 {
			index[c] = len(p.Jobs)
			o, n := offset[c], counts[c]
			p.Jobs = append(p.Jobs, JobTasks{JobID: t.JobID, Owner: t.Owner, Command: t.Command, Dataset: d,
				OutputDir: t.OutputDir, WorkDir: t.WorkDir, BatchSize: t.BatchSize, Cores: t.Cores, TimeoutS: t.TimeoutS,
				IDs: ids[o : o : o+n], Names: names[o : o : o+n], Attempts: attempts[o : o : o+n]})
		}
		k := index[c]
		if !ok || !p.Jobs[k].fits(t, d) {
			order[i] = -1
			p.Tasks = append(p.Tasks, *t)
			continue
		}
		j := &p.Jobs[k]
		j.IDs = append(j.IDs, t.ID)
		j.Names = append(j.Names, t.Name)
		j.Attempts = append(j.Attempts, t.Attempt)
		order[i] = k
	}
	if len(p.Jobs) == 0 {
		p.Jobs = nil
	}
	last := 0
	for i, k := range order {
		if k < 0 {
			k = len(p.Jobs)
			order[i] = k
		}
		if k < last {
			p.Order = order // not job after job: say the order
		}
		last = k
	}
	return p
}

// Unpack is the tasks of p, in their order. It refuses a malformed p
// (arrays of unequal lengths, an order that does not match the entries).
func (p *Packed) Unpack() ([]Task, error) {
	n := len(p.Tasks)
	for i := range p.Jobs {
		j := &p.Jobs[i]
		if len(j.Names) != len(j.IDs) || len(j.Attempts) != len(j.IDs) {
			return nil, fmt.Errorf("job %d: %d ids, %d names, %d attempts: want as many of each", j.JobID, len(j.IDs), len(j.Names), len(j.Attempts))
		}
		n += len(j.IDs)
	}
	if p.Order != nil && len(p.Order) != n {
		return nil, fmt.Errorf("order has %d entries for %d tasks", len(p.Order), n)
	}
	out := make([]Task, 0, n)
	envs := make([]string, 0, 2*n) // every task's two, in one array
	plainJob := make([]bool, 2*len(p.Jobs))
	for k := range p.Jobs {
		plainJob[2*k], plainJob[2*k+1] = PlainDir(p.Jobs[k].Dataset), PlainDir(p.Jobs[k].OutputDir)
	}
	next := make([]int, len(p.Jobs)+1)
	cur := 0 // without Order: the job whose entries come now
	for i := range n {
		for cur < len(p.Jobs) && next[cur] == len(p.Jobs[cur].IDs) {
			cur++
		}
		k := cur
		if p.Order != nil {
			k = p.Order[i]
		}
		if k < 0 || k > len(p.Jobs) {
			return nil, fmt.Errorf("order[%d] = %d: want 0..%d", i, k, len(p.Jobs))
		}
		e := next[k]
		next[k]++
		if k == len(p.Jobs) {
			if e >= len(p.Tasks) {
				return nil, fmt.Errorf("order names more full tasks than the %d listed", len(p.Tasks))
			}
			out = append(out, p.Tasks[e])
			continue
		}
		j := &p.Jobs[k]
		if e >= len(j.IDs) {
			return nil, fmt.Errorf("order names more entries of job %d than its %d", j.JobID, len(j.IDs))
		}
		name := j.Names[e]
		envs = AppendTaskEnv(envs, j.JobID, j.IDs[e])
		out = append(out, Task{ID: j.IDs[e], JobID: j.JobID, Owner: j.Owner, Attempt: j.Attempts[e], Name: name,
			Input: JoinName(j.Dataset, plainJob[2*k], name), Output: JoinName(j.OutputDir, plainJob[2*k+1], name), OutputDir: j.OutputDir,
			WorkDir: j.WorkDir, Command: j.Command, Env: envs[len(envs)-2 : len(envs) : len(envs)], BatchSize: j.BatchSize,
			Cores: j.Cores, TimeoutS: j.TimeoutS})
	}
	return out, nil
}

// PackPull is resp in the compact form.
func PackPull(resp PullResponse) PullWire {
	return PullWire{Packed: Pack(resp.Tasks), CancelledJobs: resp.CancelledJobs}
}

// Unpack is the pull answer w carries.
func (w *PullWire) Unpack() (PullResponse, error) {
	tasks, err := w.Packed.Unpack()
	if err != nil {
		return PullResponse{}, err
	}
	if tasks == nil {
		tasks = []Task{}
	}
	return PullResponse{Tasks: tasks, CancelledJobs: w.CancelledJobs}, nil
}

// DoneGroup lists a job's plain successes (status done, exit code 0, no
// error tail) reported by one pilot: their ids and attempts, and the sums
// usage accounting needs (CPU time is the job's cores times the
// duration). Unpacked, each entry gets an equal share of DurationMS and
// the group's earliest start. The previous release's masters send it;
// PackResults writes Plain instead.
type DoneGroup struct {
	JobID      int64   `json:"job_id"`
	Pilot      string  `json:"pilot,omitempty"`
	IDs        []int64 `json:"ids"`
	Attempts   []int   `json:"attempts"`
	DurationMS int64   `json:"duration_ms"` // the sum over the entries
	StartedAt  int64   `json:"started_at"`  // the earliest start, Unix ms
}

// Plain lists one pilot's plain successes (status done, exit code 0, no
// error tail) as columns, one element per entry, whatever their jobs: a
// report across many jobs costs a few bytes per entry, not an object
// per job. IDs and StartedAt hold each entry's difference from the
// entry before (the first's from 0), so a batch's consecutive ids cost a
// digit each and its starts a few: the batch is named once, by its first
// id. Run times are each entry's own (the master's estimator and the
// queue's figures read them).
type Plain struct {
	Pilot      string  `json:"pilot,omitempty"`
	IDs        []int64 `json:"ids"`        // differences, see above
	Attempts   []int   `json:"attempts"`   // as they are
	StartedAt  []int64 `json:"started_at"` // differences of Unix ms
	DurationMS []int64 `json:"duration_ms"`
}

// ResultsWire is a results report on the wire: Ranges for plain
// successes (a range per grant, with the sum of its run times), Results
// (full records) for the rest. Plain and Done are earlier releases' forms
// of plain successes, still accepted (Plain is the worker protocol's
// too); a pilot older than both sends everything in Results.
type ResultsWire struct {
	Epoch   int64       `json:"epoch"`
	Ranges  *DoneRanges `json:"ranges,omitempty"`
	Plain   []Plain     `json:"plain,omitempty"`
	Done    []DoneGroup `json:"done,omitempty"`
	Results []Result    `json:"results,omitempty"`
}

// IsPlain reports whether r travels in a Plain list without loss: a
// success with nothing to say but its times.
func IsPlain(r *Result) bool {
	return r.Status == StatusDone && r.ExitCode == 0 && r.ErrorTail == "" && r.DurationMS >= 0
}

// PackPlain splits results into Plain lists, one per pilot in the order
// the pilots first appear, and the rest, in their order. Result.JobID is
// not carried (the queue looks tasks up by id).
func PackPlain(results []Result) ([]Plain, []Result) {
	var plain []Plain
	var rest []Result
	type last struct{ id, start int64 }
	var prev []last
	for i := range results {
		r := &results[i]
		if !IsPlain(r) {
			rest = append(rest, *r)
			continue
		}
		g := 0
		for g < len(plain) && plain[g].Pilot != r.Pilot {
			g++
		}
		if g == len(plain) {
			plain = append(plain, Plain{Pilot: r.Pilot})
			prev = append(prev, last{})
		}
		p := &plain[g]
		p.IDs = append(p.IDs, r.TaskID-prev[g].id)
		p.Attempts = append(p.Attempts, r.Attempt)
		p.StartedAt = append(p.StartedAt, r.StartedAt-prev[g].start)
		p.DurationMS = append(p.DurationMS, r.DurationMS)
		prev[g] = last{r.TaskID, r.StartedAt}
	}
	return plain, rest
}

// countPlain checks the lists' shape and returns how many entries they hold,
// refusing more than MaxResults with n already counted.
func countPlain(plain []Plain, n int) (int, error) {
	for i := range plain {
		p := &plain[i]
		k := len(p.IDs)
		if k == 0 || len(p.Attempts) != k || len(p.StartedAt) != k || len(p.DurationMS) != k {
			return 0, fmt.Errorf("plain[%d]: %d ids, %d attempts, %d started_at, %d duration_ms: want as many of each, at least one",
				i, k, len(p.Attempts), len(p.StartedAt), len(p.DurationMS))
		}
		if n += k; n > MaxResults {
			return 0, fmt.Errorf("at most %d results per request", MaxResults)
		}
	}
	return n, nil
}

// appendPlain appends the results of plain lists, counted by countPlain.
func appendPlain(out []Result, plain []Plain) ([]Result, error) {
	for i := range plain {
		p := &plain[i]
		var id, start int64
		for e := range p.IDs {
			var ok1, ok2 bool
			id, ok1 = addInt64(id, p.IDs[e])
			start, ok2 = addInt64(start, p.StartedAt[e])
			if !ok1 || !ok2 {
				return nil, fmt.Errorf("plain[%d]: entry %d overflows", i, e)
			}
			if p.DurationMS[e] < 0 {
				return nil, fmt.Errorf("plain[%d]: entry %d: duration_ms must not be negative", i, e)
			}
			out = append(out, Result{TaskID: id, Attempt: p.Attempts[e], Status: StatusDone,
				StartedAt: start, DurationMS: p.DurationMS[e], Pilot: p.Pilot})
		}
	}
	return out, nil
}

// addInt64 is a+b, and false if it overflows.
func addInt64(a, b int64) (int64, bool) {
	c := a + b
	return c, (c > a) == (b > 0)
}

// PackResults is req in the compact form.
func PackResults(req ResultsRequest) ResultsWire {
	w := ResultsWire{Epoch: req.Epoch}
	w.Ranges, w.Results = packDone(req.Results)
	return w
}

// Unpack is the report w carries: the earlier releases' groups first,
// then the plain lists, then the ranges, then the full records. It
// refuses a malformed w before it allocates for it.
func (w *ResultsWire) Unpack() (ResultsRequest, error) {
	n := len(w.Results)
	for i := range w.Done {
		d := &w.Done[i]
		switch {
		case d.JobID <= 0:
			return ResultsRequest{}, fmt.Errorf("done[%d]: job_id must be positive", i)
		case len(d.IDs) == 0 || len(d.Attempts) != len(d.IDs):
			return ResultsRequest{}, fmt.Errorf("done[%d]: %d ids and %d attempts: want as many of each, at least one", i, len(d.IDs), len(d.Attempts))
		case d.DurationMS < 0:
			return ResultsRequest{}, fmt.Errorf("done[%d]: duration_ms must not be negative", i)
		}
		n += len(d.IDs)
		if n > MaxResults {
			break
		}
	}
	if n > MaxResults {
		return ResultsRequest{}, fmt.Errorf("at most %d results per request", MaxResults)
	}
	n, err := countPlain(w.Plain, n)
	if err != nil {
		return ResultsRequest{}, err
	}
	var ranges []TaskRange
	if w.Ranges != nil {
		if ranges, err = w.Ranges.unpack(MaxResults - n); err != nil {
			return ResultsRequest{}, err
		}
		for _, r := range ranges {
			n += int(r.Len())
		}
	}
	out := make([]Result, 0, n)
	for i := range w.Done {
		d := &w.Done[i]
		share, extra := d.DurationMS/int64(len(d.IDs)), d.DurationMS%int64(len(d.IDs))
		for e, id := range d.IDs {
			ms := share
			if int64(e) < extra {
				ms++
			}
			out = append(out, Result{TaskID: id, JobID: d.JobID, Attempt: d.Attempts[e], Status: StatusDone,
				StartedAt: d.StartedAt, DurationMS: ms, Pilot: d.Pilot})
		}
	}
	if out, err = appendPlain(out, w.Plain); err != nil {
		return ResultsRequest{}, err
	}
	if ranges != nil {
		out = appendDone(out, ranges, w.Ranges.DurationMS)
	}
	out = append(out, w.Results...)
	return ResultsRequest{Epoch: w.Epoch, Results: out}, nil
}
