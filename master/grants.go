package master

import (
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/harvest-hpc/harvest/capacity"
	"github.com/harvest-hpc/harvest/master/core"
	"github.com/harvest-hpc/harvest/pilotproto"
)

// The checkpoint holds the master's tasks at the queue's granularity: a
// grant (one job's consecutive entries with one attempt, as a pull hands
// them out) is one row, written once, with the job's command, paths and
// options in a row of their own (jobs); what became of its entries is a
// second row of the grant (runs), rewritten when one of them changes:
// runs of entries in one state, an assigned run naming its worker and
// batch, a finished run its result (plain successes of one pilot merged:
// the sum of their durations and the earliest start, which is what the
// queue keeps of them; anything else a run of its own unless identical).
// A grant is deleted once the queue acknowledged all its entries.
//
// The core still speaks in tasks (core.Op, core.Row): the model below
// maps each task to its grant and entry, and a commit rewrites the runs
// of the grants its ops touched, one row each.

// Entry states in the runs encoding.
const (
	entPending  = "p"
	entAssigned = "a"
	entFinal    = "f"
	entGone     = "g" // acknowledged by the queue (or superseded): forgotten
)

type entry struct {
	state  string
	worker string             // entAssigned
	batch  int64              // entAssigned
	result *pilotproto.Result // entFinal
}

// grant is one grants row and its runs.
type grant struct {
	id      int64
	job     int64
	attempt int
	first   int64            // the task id of entry 0; entry i is first+i
	names   []string         // the entries' names (kept until written)
	whole   bool             // a task that does not fit its job's form: its only entry, stored whole
	body    *pilotproto.Task // that task (kept until written)
	ents    []entry
	live    int  // entries not gone
	stored  bool // its grants row is in the file
	touched bool // its runs changed in the commit being applied
}

func (g *grant) ref(i int) pilotproto.TaskRef {
	return pilotproto.TaskRef{TaskID: g.first + int64(i), Attempt: g.attempt}
}

// form is a job's fixed fields as the jobs table holds them.
type form struct {
	f      pilotproto.JobTasks // without entries
	grants int                 // grants that use it
	stored bool
	plain  bool // its directories take an entry by "/" + name (fitsPlain)
}

// model is the checkpoint's content in memory: what a commit's ops change
// and what it writes back.
type model struct {
	grants map[int64]*grant
	index  map[pilotproto.TaskRef]place
	forms  map[int64]*form
	lastID int64
	order  []*grant // the grants touched by the commit being applied, in the order of their first touch
	open   *grant   // the grant the commit being applied made last: an add of its next entry extends it
}

type place struct {
	g *grant
	i int
}

func newModel() *model {
	return &model{grants: map[int64]*grant{}, index: map[pilotproto.TaskRef]place{}, forms: map[int64]*form{}}
}

// formOf is t's job form if t is exactly what the form and its entry make
// (pilotproto.Packed.Unpack): then only its name is stored.
func formOf(t *pilotproto.Task) (pilotproto.JobTasks, bool) {
	n := len(t.Name)
	if n == 0 || len(t.Input) <= n+1 || t.Input[len(t.Input)-n-1:] != "/"+t.Name {
		return pilotproto.JobTasks{}, false
	}
	ds := t.Input[:len(t.Input)-n-1]
	if ds == "" {
		ds = "/"
	}
	f := pilotproto.JobTasks{JobID: t.JobID, Owner: t.Owner, Command: t.Command, Dataset: ds, OutputDir: t.OutputDir,
		WorkDir: t.WorkDir, BatchSize: t.BatchSize, Cores: t.Cores, TimeoutS: t.TimeoutS}
	back, err := expand(f, t.ID, []string{t.Name}, t.Attempt)
	if err != nil || !sameTask(&back[0], t) {
		return f, false
	}
	return f, true
}

// fitsPlain is formOf(t) for a task of a job whose form f is known
// and plain (pilotproto.PlainDir: what Unpack makes of an entry is
// dir + "/" + name for a plain name), without making the task again: a
// pull adds every task, and formOf's Unpack of each cost allocations and
// two filepath.Join.
func fitsPlain(f *pilotproto.JobTasks, t *pilotproto.Task) bool {
	return pilotproto.PlainName(t.Name) && isEntry(t.Input, f.Dataset, t.Name) && isEntry(t.Output, f.OutputDir, t.Name) &&
		pilotproto.IsTaskEnv(t.Env, t.JobID, t.ID) && f.JobID == t.JobID && f.Owner == t.Owner &&
		f.OutputDir == t.OutputDir && f.WorkDir == t.WorkDir && f.BatchSize == t.BatchSize && f.Cores == t.Cores &&
		f.TimeoutS == t.TimeoutS && slices.Equal(f.Command, t.Command) && (f.Command == nil) == (t.Command == nil)
}

// isEntry reports whether p is dir + "/" + name.
func isEntry(p, dir, name string) bool {
	return len(p) == len(dir)+1+len(name) && p[len(dir)] == '/' && strings.HasPrefix(p, dir) && strings.HasSuffix(p, name)
}

// expand is the tasks of a grant of f: ids first, first+1, ...
func expand(f pilotproto.JobTasks, first int64, names []string, attempt int) ([]pilotproto.Task, error) {
	f.IDs, f.Names, f.Attempts = make([]int64, len(names)), names, make([]int, len(names))
	for i := range names {
		f.IDs[i], f.Attempts[i] = first+int64(i), attempt
	}
	p := pilotproto.Packed{Jobs: []pilotproto.JobTasks{f}}
	return p.Unpack()
}

func sameTask(a, b *pilotproto.Task) bool {
	return a.ID == b.ID && a.JobID == b.JobID && a.Owner == b.Owner && a.Attempt == b.Attempt && a.Name == b.Name &&
		a.Input == b.Input && a.Output == b.Output && a.OutputDir == b.OutputDir && a.WorkDir == b.WorkDir &&
		slices.Equal(a.Command, b.Command) && (a.Command == nil) == (b.Command == nil) && slices.Equal(a.Env, b.Env) &&
		a.BatchSize == b.BatchSize && a.Cores == b.Cores && a.TimeoutS == b.TimeoutS
}

func sameForm(a, b *pilotproto.JobTasks) bool {
	return a.JobID == b.JobID && a.Owner == b.Owner && slices.Equal(a.Command, b.Command) && (a.Command == nil) == (b.Command == nil) &&
		a.Dataset == b.Dataset && a.OutputDir == b.OutputDir && a.WorkDir == b.WorkDir && a.BatchSize == b.BatchSize &&
		a.Cores == b.Cores && a.TimeoutS == b.TimeoutS
}

func (m *model) touch(g *grant) {
	if !g.touched {
		g.touched = true
		m.order = append(m.order, g)
	}
}

// set moves the entry at p to state e (gone: forgotten).
func (m *model) set(p place, e entry) {
	g := p.g
	old := &g.ents[p.i]
	if old.state == entGone {
		return
	}
	if e.state == entGone {
		g.live--
		delete(m.index, g.ref(p.i))
	}
	*old = e
	m.touch(g)
}

// add stores t as pending: in the grant the commit made last if t is its
// next entry (same job and attempt), else in a new grant.
func (m *model) add(t *pilotproto.Task) {
	k := pilotproto.TaskRef{TaskID: t.ID, Attempt: t.Attempt}
	if p, ok := m.index[k]; ok {
		m.set(p, entry{state: entGone}) // a stale row of this attempt: replaced
	}
	var f pilotproto.JobTasks
	known := m.forms[t.JobID]
	fits := known != nil && known.plain && fitsPlain(&known.f, t)
	if !fits { // the job's first task, or a form that needs the full check
		if f, fits = formOf(t); fits && known != nil && !sameForm(&known.f, &f) {
			fits = false // the job's form changed (never from harvest's queue): stored whole
		}
	}
	g := m.open
	if !fits || g == nil || g.whole || g.job != t.JobID || g.attempt != t.Attempt || g.first+int64(len(g.ents)) != t.ID {
		m.lastID++
		g = &grant{id: m.lastID, job: t.JobID, attempt: t.Attempt, first: t.ID}
		if !fits {
			g.whole, g.body = true, t
		} else {
			fm := m.forms[t.JobID]
			if fm == nil {
				fm = &form{f: f, plain: pilotproto.PlainDir(f.Dataset) && pilotproto.PlainDir(f.OutputDir)}
				m.forms[t.JobID] = fm
			}
			fm.grants++
		}
		m.grants[g.id] = g
		m.touch(g)
		m.open = g
	}
	if !g.whole {
		g.names = append(g.names, t.Name)
	}
	g.ents = append(g.ents, entry{state: entPending})
	g.live++
	m.index[k] = place{g, len(g.ents) - 1}
}

// changes is what one commit writes besides the grants: the last value of
// each estimate, capacity state and worker address.
type changes struct {
	est      map[int64]core.Estimator
	jobs     []int64
	capState *capacity.State
	addr     map[string]string
	workers  []string
}

// apply applies ops to the model.
func (m *model) apply(ch *changes, batches ...[]core.Op) error {
	for _, ops := range batches {
		for i := range ops {
			o := &ops[i]
			p, known := m.index[o.Ref]
			switch o.Kind {
			case core.OpAdd:
				m.add(o.Task)
			case core.OpAssign:
				if known {
					m.set(p, entry{state: entAssigned, worker: o.Worker, batch: o.Batch})
				}
			case core.OpRequeue:
				if known {
					m.set(p, entry{state: entPending})
				}
			case core.OpFinish:
				if known {
					m.set(p, entry{state: entFinal, result: o.Result})
				}
			case core.OpDelete:
				if known {
					m.set(p, entry{state: entGone})
				}
			case core.OpEstimate:
				e := *o.Est
				if math.IsNaN(e.Mean) || math.IsInf(e.Mean, 0) || math.IsNaN(e.Dev) || math.IsInf(e.Dev, 0) {
					return fmt.Errorf("checkpoint: estimate of job %d: %+v is not a number the checkpoint stores", o.Job, e)
				}
				if ch.est == nil {
					ch.est = map[int64]core.Estimator{}
				}
				if _, ok := ch.est[o.Job]; !ok {
					ch.jobs = append(ch.jobs, o.Job)
				}
				ch.est[o.Job] = e
			case core.OpCapacity:
				ch.capState = o.Capacity
			case core.OpWorker:
				if ch.addr == nil {
					ch.addr = map[string]string{}
				}
				if _, ok := ch.addr[o.Worker]; !ok {
					ch.workers = append(ch.workers, o.Worker)
				}
				ch.addr[o.Worker] = o.Address
			case core.OpFenceCheck:
			default:
				return fmt.Errorf("checkpoint: unknown op %d", o.Kind)
			}
		}
	}
	return nil
}

// writes is what a commit writes, as JSON arrays for the set-based
// statements (nil: nothing of that kind).
type writes struct {
	jobs      []byte // [[job, form], ...]
	dropJobs  []byte // [job, ...]
	grants    []byte // [[id, job, attempt, first, names|null, body|null], ...]
	runs      []byte // [[id, runs], ...]
	drop      []byte // [grant id, ...]: grants whose entries are all gone
	estimates []byte // [[job, n, mean, dev], ...]
	capacity  []byte // the last capacity state
	workers   []byte // [[worker, address], ...]
}

func (w *writes) empty() bool {
	return w.jobs == nil && w.dropJobs == nil && w.grants == nil && w.runs == nil && w.drop == nil &&
		w.estimates == nil && w.capacity == nil && w.workers == nil
}

// encode lists what the commit's touched grants and changes write, and
// settles the model as written (call it only before a commit that either
// succeeds or ends the checkpoint's use: see Checkpoint.broken).
func (m *model) encode(ch *changes) (writes, error) {
	var w writes
	var jobs, drop, grants, runs, dropJobs jsonRows
	for _, g := range m.order {
		g.touched = false
		if g.live == 0 {
			delete(m.grants, g.id)
			if g.stored {
				drop.b = strconv.AppendInt(drop.nextValue(), g.id, 10)
			}
			if !g.whole {
				fm := m.forms[g.job]
				if fm.grants--; fm.grants == 0 {
					delete(m.forms, g.job)
					if fm.stored {
						dropJobs.b = strconv.AppendInt(dropJobs.nextValue(), g.job, 10)
					}
				}
			}
			continue
		}
		if !g.stored {
			if !g.whole {
				if fm := m.forms[g.job]; !fm.stored {
					fm.stored = true
					b := jobs.next()
					b = strconv.AppendInt(b, g.job, 10)
					b = append(b, ',')
					fj, err := json.Marshal(fm.f)
					if err != nil {
						return w, fmt.Errorf("checkpoint: job %d: %w", g.job, err)
					}
					jobs.b = append(append(b, fj...), ']')
				}
			}
			b := grants.next()
			b = strconv.AppendInt(b, g.id, 10)
			b = append(b, ',')
			b = strconv.AppendInt(b, g.job, 10)
			b = append(b, ',')
			b = strconv.AppendInt(b, int64(g.attempt), 10)
			b = append(b, ',')
			b = strconv.AppendInt(b, g.first, 10)
			b = append(b, ',')
			if g.whole {
				b = append(b, "null,"...)
				b = appendTaskJSON(b, g.body)
			} else {
				b = append(b, '[')
				for i, n := range g.names {
					if i > 0 {
						b = append(b, ',')
					}
					b = appendJSONString(b, n)
				}
				b = append(b, "],null"...)
			}
			grants.b = append(b, ']')
			g.stored, g.names, g.body = true, nil, nil
		}
		b := runs.next()
		b = strconv.AppendInt(b, g.id, 10)
		b = append(b, ',')
		runs.b = append(appendRuns(b, g.ents), ']')
	}
	clear(m.order)
	m.order, m.open = m.order[:0], nil
	var es jsonRows
	for _, job := range ch.jobs {
		e := ch.est[job]
		b := es.next()
		b = strconv.AppendInt(b, job, 10)
		b = append(b, ',')
		b = strconv.AppendInt(b, int64(e.N), 10)
		b = append(b, ',')
		b = strconv.AppendFloat(b, e.Mean, 'g', -1, 64)
		b = append(b, ',')
		b = strconv.AppendFloat(b, e.Dev, 'g', -1, 64)
		es.b = append(b, ']')
	}
	if ch.capState != nil {
		b, err := json.Marshal(ch.capState)
		if err != nil {
			return w, fmt.Errorf("checkpoint: %w", err)
		}
		w.capacity = b
	}
	var ws jsonRows
	for _, id := range ch.workers {
		b := ws.next()
		b = appendJSONString(b, id)
		b = append(b, ',')
		b = appendJSONString(b, ch.addr[id])
		ws.b = append(b, ']')
	}
	w.jobs, w.dropJobs, w.grants, w.runs, w.drop = jobs.bytes(), dropJobs.bytes(), grants.bytes(), runs.bytes(), drop.bytes()
	w.estimates, w.workers = es.bytes(), ws.bytes()
	return w, nil
}

// plainDone is a result a merged run keeps what the queue keeps of.
func plainDone(r *pilotproto.Result) bool {
	return r.Status == pilotproto.StatusDone && r.ExitCode == 0 && r.ErrorTail == ""
}

// mergeable says whether b may join a finished run that began with a.
func mergeable(a, b *pilotproto.Result) bool {
	if a.Pilot != b.Pilot {
		return false
	}
	if plainDone(a) && plainDone(b) {
		return true
	}
	return a.Status == b.Status && a.ExitCode == b.ExitCode && a.StartedAt == b.StartedAt && a.DurationMS == b.DurationMS && a.ErrorTail == b.ErrorTail
}

// appendRuns encodes a grant's entries as runs: [n, state, ...].
func appendRuns(b []byte, ents []entry) []byte {
	b = append(b, '[')
	for i := 0; i < len(ents); {
		e := &ents[i]
		j := i + 1
		var merged pilotproto.Result
		if e.state == entFinal {
			merged = *e.result
		}
		for ; j < len(ents); j++ {
			x := &ents[j]
			if x.state != e.state {
				break
			}
			if e.state == entAssigned && (x.worker != e.worker || x.batch != e.batch) {
				break
			}
			if e.state == entFinal {
				if !mergeable(e.result, x.result) {
					break
				}
				if plainDone(e.result) {
					merged.DurationMS += x.result.DurationMS
					merged.StartedAt = min(merged.StartedAt, x.result.StartedAt)
				}
			}
		}
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, '[')
		b = strconv.AppendInt(b, int64(j-i), 10)
		b = append(b, ",\""...)
		b = append(b, e.state...)
		b = append(b, '"')
		switch e.state {
		case entAssigned:
			b = append(b, ',')
			b = appendJSONString(b, e.worker)
			b = append(b, ',')
			b = strconv.AppendInt(b, e.batch, 10)
		case entFinal:
			merged.TaskID, merged.Attempt, merged.JobID = 0, 0, 0
			b = append(b, ',')
			b = appendResultJSON(b, &merged)
		}
		b = append(b, ']')
		i = j
	}
	return append(b, ']')
}

// run is one run as the runs column holds it.
type run struct {
	n      int
	state  string
	worker string
	batch  int64
	result *pilotproto.Result
}

func (r *run) UnmarshalJSON(b []byte) error {
	var raw []json.RawMessage
	if err := json.Unmarshal(b, &raw); err != nil {
		return err
	}
	if len(raw) < 2 {
		return fmt.Errorf("run %s: want [n, state, ...]", b)
	}
	if err := json.Unmarshal(raw[0], &r.n); err != nil {
		return err
	}
	if err := json.Unmarshal(raw[1], &r.state); err != nil {
		return err
	}
	switch {
	case r.n <= 0:
		return fmt.Errorf("run %s: count must be positive", b)
	case r.state == entAssigned && len(raw) == 4:
		if err := json.Unmarshal(raw[2], &r.worker); err != nil {
			return err
		}
		return json.Unmarshal(raw[3], &r.batch)
	case r.state == entFinal && len(raw) == 3:
		r.result = new(pilotproto.Result)
		return json.Unmarshal(raw[2], r.result)
	case (r.state == entPending || r.state == entGone) && len(raw) == 2:
		return nil
	}
	return fmt.Errorf("run %s: unknown form", b)
}

// entries unfolds runs into n entries; a merged run of plain successes
// gives each its equal share of the duration (the queue does the same
// with a report's success group).
func entries(rs []run, n int) ([]entry, error) {
	out := make([]entry, 0, n)
	for _, r := range rs {
		var share, extra int64
		if r.result != nil && r.n > 1 && plainDone(r.result) {
			share, extra = r.result.DurationMS/int64(r.n), r.result.DurationMS%int64(r.n)
		}
		for i := range r.n {
			e := entry{state: r.state, worker: r.worker, batch: r.batch}
			if r.result != nil {
				res := *r.result
				if r.n > 1 && plainDone(r.result) {
					res.DurationMS = share
					if int64(i) < extra {
						res.DurationMS++
					}
				}
				e.result = &res
			}
			out = append(out, e)
		}
	}
	if len(out) != n {
		return nil, fmt.Errorf("runs cover %d entries of %d", len(out), n)
	}
	return out, nil
}

// jsonRows builds a JSON array of rows (arrays): next opens a row, its
// caller appends the values and the row's closing bracket; nextValue
// opens a plain value instead.
type jsonRows struct{ b []byte }

func (a *jsonRows) next() []byte { return append(a.nextValue(), '[') }

func (a *jsonRows) nextValue() []byte {
	if a.b == nil {
		return append(a.b, '[')
	}
	return append(a.b, ',')
}

func (a *jsonRows) bytes() []byte {
	if a.b == nil {
		return nil
	}
	return append(a.b, ']')
}
