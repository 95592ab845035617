package sim

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"

	"github.com/harvest-hpc/harvest/adapters"
	"github.com/harvest-hpc/harvest/cluster"
)

var _ adapters.Adapter = (*Cluster)(nil)

// ErrInvalidJob is returned for a foreign job or work item that cannot be run.
var ErrInvalidJob = errors.New("invalid job")

// ErrPast is returned when asked to move the clock backwards.
var ErrPast = errors.New("time is in the past")

// JobSpec is a foreign batch job to replay.
type JobSpec struct {
	// Name is the job's id in the workload (kept in its Record).
	Name string
	// Label is the kind written to job records ("foreign" if empty).
	Label string
	User  string
	Nodes int
	// Cores is how many cores the job takes, on nodes shared with other
	// jobs (Config.CoresPerNode); 0 = Nodes whole nodes' cores.
	Cores int
	// TimeLimit is the job's limit; the job is killed when it reaches it.
	TimeLimit cluster.Limit
	// RunTime is how long the job really runs; negative = until its limit.
	RunTime int64
	// Submit is the arrival time (virtual seconds).
	Submit int64
	// Priority orders the queue (higher first); equal priorities are FIFO
	// by submit time.
	Priority float64
}

// Record is what happened to one job, for job-by-job comparison.
type Record struct {
	// ID is the job's id in snapshots and decisions: a foreign job's is
	// its name (the workload's id), made unique with "#<n>" if two jobs
	// share one; a pilot's is "pilot-<n>" (n counts every job added).
	ID    string
	Name  string
	User  string
	Label string
	Pilot bool
	// Nodes is how many nodes the job ran on (once started; before, the
	// fewest it needs); Cores how many cores it took.
	Nodes  int
	Cores  int
	Limit  cluster.Limit
	Submit int64
	// Run is how long the job runs once started: its run time, or its
	// limit if it would run longer.
	Run int64
	// Start and End are -1 while unknown (not started, not ended).
	Start int64
	End   int64
	// Blocked is the time the job spent pending while the scheduler's own
	// test, with the pilots removed, would have started it (see harm.go).
	Blocked int64
	// Killed: ended at its time limit. Cancelled: cancelled by the agent.
	Killed    bool
	Cancelled bool
	// Preempted: a pilot preempted for a foreign job (Config.Preemption).
	// Shrunk: a pilot whose end the agent pulled in (Cluster.Shrink).
	Preempted bool
	Shrunk    bool
}

type jobState uint8

const (
	stWaiting jobState = iota // submitted in the future
	stPending
	stRunning
	stDone
)

type job struct {
	// The fields a task's end reads first (one cache line of a job of
	// seven: a month has millions of tasks).
	state jobState
	pilot bool
	// canonical: a pilot whose id is "pilot-<seq+1>", found by its id
	// without byID (see lookup) and retired to a compact record.
	canonical bool
	// preemptible pilots run in the preemptible tier (Config.Preemption);
	// preempting is set from their preemption to their end (GraceTime).
	preemptible, preempting bool
	// inBusy: the pilot runs a task (and is in Cluster.busy if kept; set
	// as its first task starts, cleared when it goes idle: one map write
	// per change, not per task).
	inBusy bool
	// Harvest work of a running pilot: the task's length (its work) and,
	// under contention, how long it runs, and the pool's size when it
	// started.
	taskGen  int
	task     *workItem
	taskLen  int64
	taskRun  int64
	taskFrom int64
	taskSize int
	limit    int64 // seconds, never = unlimited

	rec Record
	// cores the job takes (the plan's unit: nodes when one core a node);
	// alloc is where, while it runs.
	cores int
	alloc []share
	// one holds a one-node allocation (every pilot's, most jobs'), so
	// that alloc needs no allocation of its own.
	one    [1]share
	run    int64 // real duration, never = until the limit
	prio   float64
	seq    int64
	endGen int
	// minLimit is the pilot's minimum limit (Config.TimeMinSizing).
	minLimit int64
	// An open charge of pilot harm: blocked since chargeFrom, at most
	// until chargeUntil (see harm.go).
	chargeFrom, chargeUntil int64
}

func (j *job) endByLimit() int64 { return add(j.rec.Start, j.limit) }

type evKind uint8

// Events at the same instant run in this order: a task due exactly at its
// pilot's limit completes, ends free nodes before arrivals are queued, and
// the scheduling pass sees both.
const (
	evTask evKind = iota
	evEnd
	evArrive
	evWork
	evSched
	evBackfill
)

type event struct {
	t    int64
	kind evKind
	seq  int64
	j    *job
	w    *workItem
	gen  int
}

func (e *event) before(o *event) bool {
	if e.t != o.t {
		return e.t < o.t
	}
	if e.kind != o.kind {
		return e.kind < o.kind
	}
	return e.seq < o.seq
}

// eventHeap is a binary min-heap of events by (time, kind, seq), typed so
// that the millions of task events of a month cost no allocation each.
type eventHeap []event

func (h *eventHeap) push(e event) {
	*h = append(*h, e)
	q := *h
	i := len(q) - 1
	for i > 0 {
		p := (i - 1) / 2
		if !q[i].before(&q[p]) {
			break
		}
		q[i], q[p] = q[p], q[i]
		i = p
	}
}

func (h *eventHeap) pop() event {
	q := *h
	top := q[0]
	n := len(q) - 1
	q[0] = q[n]
	q[n] = event{} // drop the job pointer
	q = q[:n]
	for i := 0; ; {
		l := 2*i + 1
		if l >= n {
			break
		}
		m := l
		if r := l + 1; r < n && q[r].before(&q[l]) {
			m = r
		}
		if !q[m].before(&q[i]) {
			break
		}
		q[i], q[m] = q[m], q[i]
		i = m
	}
	*h = q
	return top
}

// Sample is the node use from time T until the next sample, in cores (in
// nodes when one core a node): a pilot holds a whole node's.
type Sample struct {
	T         int64
	Foreign   int
	PilotBusy int
	PilotIdle int
	// SharedIdle is the idle cores on nodes that jobs share (not on
	// wholly idle nodes): what pilots on idle cores could take.
	SharedIdle int
}

// Cluster is the simulated cluster. It is safe for concurrent use; time
// moves only through AdvanceTo.
type Cluster struct {
	mu  sync.Mutex
	cfg Config

	now    int64
	events eventHeap
	tasks  taskLane // task events due in order, beside the heap
	evSeq  int64
	// jobs are every job by seq; a finished pilot's entry is nil and its
	// record is in done (see retire): a month of a large machine starts
	// a million pilots, and memory should grow with the jobs and nodes.
	jobs []*job
	done [][]donePilot // by seq, in chunks (retire)
	// byID is the jobs by id, but for canonical pilots (see lookup): a
	// month starts and ends a million of them, and a map's deletes cost
	// more than reading the seq from the id.
	byID map[string]*job
	// pilotNamed counts the ids in byID that start with "pilot-"
	// (lookup reads byID for such an id only if there is one); idBuf
	// is newJob's scratch.
	pilotNamed int
	idBuf      []byte
	// usage per user, for the multifactor priority (priority.go)
	usage   map[string]*usage
	users   []*usage // usage's values in the order users appeared
	pending []*job   // priority order; may hold jobs no longer pending
	running []*job   // in id order
	runSeq  []int64  // their seqs (no job read to find one)
	// byEnd is the running jobs' releases by their end judged by their
	// limits (then id): the plan reads them in order without sorting
	// them, or reading a job, at every pass.
	byEnd []release
	// pilotCores is the cores running pilots hold; queuedPilots the
	// pilots pending (harm.go reads both at every pass).
	pilotCores   int
	queuedPilots int
	used         int
	total        int // the cluster's cores
	// nodes is which cores are free on which node.
	nodes *nodeIndex
	// preemptibleFree counts the cores of running preemptible pilots not
	// yet being preempted (see free), goingCores those being preempted
	// (in their grace time).
	preemptibleFree, goingCores int
	// reclaimed counts, during a scheduling pass, the cores held for jobs
	// that preempted pilots in it and start at the next pass (see
	// preemptFor): the preemptible tier must not take them back.
	reclaimed int
	// schedAt is the time of the scheduling pass already queued, or -1.
	schedAt int64
	// With a BackfillInterval: bfAt is the time of the backfill pass
	// already queued, or -1; lastBF the time of the last one.
	bfAt, lastBF int64
	prof         profile
	// Pilot harm (harm.go): the profile without pilots and the jobs with
	// an open charge.
	cfProf  profile
	charged []*job

	// Harvest pool.
	work         []*workItem
	pendingTasks int64
	runningTasks int64
	lostTaskSec  int64
	// runs are the completed tasks not yet read (TaskRuns), recorded
	// once WatchTasks was called.
	runs         []TaskRun
	watchRuns    bool
	busyPilots   int
	idlePilots   int
	foreignCores int

	samples []Sample
	onEvent func(Record)
	// changes counts every change a snapshot or the busy pilots could
	// show (see Changes).
	changes int64
	// jobEvents counts submissions (foreign and pilot), ends and cancels:
	// SLURM's sdiag counters (see JobEvents).
	jobEvents int64
	// busy is the running pilots with a task, by id (Demand), kept from
	// the first call to Demand on (nil before: a replay that reads the
	// busy pilots from its snapshots, ShowBusy, needs no map).
	busy map[string]bool
	// snapJobs is the jobs slice snapshots reuse, if ReuseSnapshots.
	snapJobs []cluster.Job
	// snapSeq is the seq of the job shown at each index of snapJobs'
	// running part; since that snapshot, viewStarted and viewEnded are
	// the seqs of the jobs that started and ended, viewDirty the jobs
	// whose limit or task changed (see runningView).
	snapSeq     []int64
	viewStarted []int64
	viewEnded   []int64
	viewMoves   []viewMove
	viewDirty   []*job
	reuseSnap   bool
	// showBusy: snapshots mark the pilots running a task (ShowBusy).
	showBusy bool
}

// ShowBusy makes snapshots mark the running pilots that run a task
// (Job.Busy), as the agent marks them from the queue's heartbeats: the
// simulated cluster is batch system and queue at once. sim.Run's agent
// then needs no look-up of every pilot in Demand's map each round.
func (c *Cluster) ShowBusy() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.showBusy = true
}

// ReuseSnapshots makes every Snapshot reuse the previous one's job list:
// a snapshot is then valid only until the next call, and its running jobs'
// entries are kept from one call to the next (runningView), so a caller
// may write only Master (and Busy, without ShowBusy) in them, as the
// agent's enrich does. A replay whose agent
// reads each snapshot within its round (sim.Run) saves allocating and
// collecting a list as long as the cluster's jobs at every round.
func (c *Cluster) ReuseSnapshots() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.reuseSnap {
		// Every job running now is new to the first reused snapshot.
		c.viewStarted = append(c.viewStarted[:0], c.runSeq...)
	}
	c.reuseSnap = true
}

// New returns an empty cluster at virtual time 0.
func New(cfg Config) (*Cluster, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	c := &Cluster{cfg: cfg, schedAt: -1, bfAt: -1, usage: map[string]*usage{}, nodes: newNodeIndex(cfg.Nodes, cfg.cores())}
	c.total = cfg.Nodes * cfg.cores()
	c.samples = append(c.samples, Sample{})
	return c, nil
}

// Now returns the virtual time.
func (c *Cluster) Now() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Config returns the cluster's configuration.
func (c *Cluster) Config() Config { return c.cfg }

// Changes counts the changes of what Snapshot and Demand show, other than
// time passing and the backlog's size: a job arriving, starting, ending,
// a pilot submitted or cancelled, a pilot starting or stopping to run
// tasks. Two calls returning the same count bracket a stretch in which
// only time and the task counts moved.
func (c *Cluster) Changes() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.changes
}

// JobEvents implements adapters.JobEventCounter: the jobs submitted
// (foreign arrivals and pilots), ended and cancelled so far, what SLURM's
// sdiag counts ("Jobs submitted", "completed", "canceled", "failed").
func (c *Cluster) JobEvents(ctx context.Context) (int64, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.jobEvents, nil
}

// OnStartEnd registers a function called (with the lock held, so it must
// not call back into the cluster) whenever a job starts or ends.
func (c *Cluster) OnStartEnd(f func(Record)) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.onEvent = f
}

// AddJob queues a foreign job arriving at spec.Submit and returns its id.
// A job submitted before now arrives now but keeps its submit time, so it
// queues ahead of later ones as it did in the trace (a warm start).
func (c *Cluster) AddJob(spec JobSpec) (string, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	j, err := c.foreignJob(spec)
	if err != nil {
		return "", err
	}
	c.push(event{t: max(j.rec.Submit, c.now), kind: evArrive, j: j})
	return j.rec.ID, nil
}

// AddRunning adds a foreign job that has been running since start (at or
// before now): the jobs a trace shows running when a replay begins. It
// ends at start plus its run time (or limit), and must fit in the idle
// nodes and not have ended already.
func (c *Cluster) AddRunning(spec JobSpec, start int64) (string, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	j, err := c.foreignJob(spec)
	switch {
	case err != nil:
		return "", err
	case start > c.now || start < j.rec.Submit:
		return "", fmt.Errorf("%w: job %q: started at %d, not between its submit %d and now %d", ErrInvalidJob, spec.Name, start, j.rec.Submit, c.now)
	case add(start, min(j.run, j.limit)) <= c.now:
		return "", fmt.Errorf("%w: job %q ended before now", ErrInvalidJob, spec.Name)
	case j.cores > c.idleCores():
		return "", fmt.Errorf("%w: job %q needs %d cores, %d are idle", ErrInvalidJob, spec.Name, j.cores, c.idleCores())
	}
	c.startAt(j, start)
	c.dirty()
	return j.rec.ID, nil
}

// foreignJob makes the job of spec, or says why it cannot run.
func (c *Cluster) foreignJob(spec JobSpec) (*job, error) {
	cores := spec.Cores
	if cores == 0 {
		if spec.Nodes <= 0 || spec.Nodes > c.cfg.Nodes {
			return nil, fmt.Errorf("%w: job %q asks for %d nodes on a %d-node cluster", ErrInvalidJob, spec.Name, spec.Nodes, c.cfg.Nodes)
		}
		cores = spec.Nodes * c.cfg.cores()
	}
	if cores < 0 || cores > c.totalCores() {
		return nil, fmt.Errorf("%w: job %q asks for %d cores on a cluster of %d", ErrInvalidJob, spec.Name, cores, c.totalCores())
	}
	if spec.TimeLimit == 0 || spec.TimeLimit < cluster.Unlimited {
		return nil, fmt.Errorf("%w: job %q: time limit must be positive or unlimited", ErrInvalidJob, spec.Name)
	}
	label := spec.Label
	if label == "" {
		label = "foreign"
	}
	run := spec.RunTime
	if run < 0 {
		run = never
	}
	j := c.newJob(spec.Name, label, spec.User, cores, spec.TimeLimit, run, spec.Submit, false)
	j.prio = spec.Priority
	return j, nil
}

func (c *Cluster) newJob(name, label, user string, cores int, limit cluster.Limit, run, submit int64, pilot bool) *job {
	var n, id string
	if pilot {
		// One string: the id, and its number as the name.
		id = string(strconv.AppendInt(append(c.idBuf[:0], "pilot-"...), int64(len(c.jobs)+1), 10))
		n = id[len("pilot-"):]
	} else {
		n = strconv.Itoa(len(c.jobs) + 1)
	}
	if name == "" {
		name = n
	}
	if !pilot {
		id = name
	}
	canonical := pilot
	for c.lookup(id) != nil {
		id += "#" + n
		canonical = false
	}
	lim := int64(limit)
	if limit.IsUnlimited() {
		lim = never
	}
	j := &job{
		rec:   Record{ID: id, Name: name, User: user, Label: label, Pilot: pilot, Nodes: c.nodesFor(cores), Cores: cores, Limit: limit, Submit: submit, Run: min(run, lim), Start: -1, End: -1},
		cores: cores, limit: lim, run: run, seq: int64(len(c.jobs)), pilot: pilot, canonical: canonical,
	}
	if !canonical {
		if c.byID == nil {
			c.byID = map[string]*job{}
		}
		c.byID[id] = j
		if strings.HasPrefix(id, "pilot-") {
			c.pilotNamed++
		}
	}
	c.jobs = append(c.jobs, j)
	return j
}

// lookup returns the pending or running job with the given id (or a
// finished one that is not a canonical pilot), nil if none: a canonical
// pilot by the seq its id names, any other job by byID. No id is in both:
// newJob makes every id unique through lookup.
func (c *Cluster) lookup(id string) *job {
	if n, ok := strings.CutPrefix(id, "pilot-"); ok {
		if i, err := strconv.Atoi(n); err == nil && i >= 1 && i <= len(c.jobs) {
			if j := c.jobs[i-1]; j != nil && j.canonical && j.rec.ID == id {
				return j
			}
		}
		if c.pilotNamed == 0 {
			return nil // no job in byID has such an id
		}
	}
	return c.byID[id]
}

func (c *Cluster) push(e event) {
	c.evSeq++
	e.seq = c.evSeq
	if e.kind == evTask && c.tasks.fits(e.t) {
		c.tasks.push(e)
		return
	}
	c.events.push(e)
}

// next returns the first event of the heap and the task lane, false if
// both are empty.
func (c *Cluster) next() (*event, bool) {
	h, ok := c.tasks.first()
	if len(c.events) > 0 && (!ok || c.events[0].before(h)) {
		return &c.events[0], true
	}
	return h, ok
}

// pop removes the first event of the heap and the task lane.
func (c *Cluster) pop() event {
	if h, ok := c.tasks.first(); ok && (len(c.events) == 0 || h.before(&c.events[0])) {
		return c.tasks.pop()
	}
	return c.events.pop()
}

// taskLane holds task events queued in the order they are due: a task
// starts now and runs its length, so with tasks of one length (the usual
// backlog) each is due no earlier than the one queued before it, and the
// millions of them a month cost a slice append and a read instead of a
// heap's log n moves. An event due before the lane's last goes to the
// heap; the lane and the heap are merged by (time, kind, seq), so events
// run in exactly the order of one heap.
type taskLane struct {
	q    []event
	head int
}

func (l *taskLane) fits(t int64) bool { return l.head == len(l.q) || l.q[len(l.q)-1].t <= t }

func (l *taskLane) push(e event) {
	if l.head == len(l.q) {
		l.q, l.head = l.q[:0], 0
	} else if l.head >= 1024 && 2*l.head >= len(l.q) {
		// Slide the queued half down rather than growing.
		n := copy(l.q, l.q[l.head:])
		clear(l.q[n:])
		l.q, l.head = l.q[:n], 0
	}
	l.q = append(l.q, e)
}

func (l *taskLane) first() (*event, bool) {
	if l.head == len(l.q) {
		return nil, false
	}
	return &l.q[l.head], true
}

func (l *taskLane) pop() event {
	e := l.q[l.head]
	l.q[l.head] = event{} // drop the job pointer
	l.head++
	return e
}

// AdvanceTo processes every event up to and including t, in order, and
// leaves the clock at t.
func (c *Cluster) AdvanceTo(t int64) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if t < c.now {
		return fmt.Errorf("%w: advance to %d, now %d", ErrPast, t, c.now)
	}
	for e, ok := c.next(); ok && e.t <= t; e, ok = c.next() {
		e := c.pop()
		c.now = e.t
		c.handle(e)
	}
	c.now = t
	return nil
}

// NextEvent returns the time of the next queued event, or false if none.
func (c *Cluster) NextEvent() (int64, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.next()
	if !ok {
		return 0, false
	}
	return e.t, true
}

func (c *Cluster) handle(e event) {
	switch e.kind {
	case evArrive:
		if e.j.state != stWaiting {
			return
		}
		e.j.state = stPending
		c.enqueue(e.j)
		c.changes++
		c.jobEvents++
		c.dirty()
	case evEnd:
		if e.j.state != stRunning || e.j.endGen != e.gen {
			return
		}
		c.finish(e.j, e.j.run > e.j.limit || e.j.pilot, false)
	case evTask:
		if e.j.state != stRunning || e.j.taskGen != e.gen || e.j.task == nil {
			return
		}
		c.taskDone(e.j)
	case evWork:
		c.pendingTasks += e.w.pendingTasks()
		c.work = append(c.work, e.w)
		c.feedIdle()
	case evSched:
		c.schedAt = -1
		c.schedule(c.cfg.BackfillInterval == 0)
	case evBackfill:
		c.bfAt, c.lastBF = -1, c.now
		c.schedule(true)
		if c.cfg.BackfillBusy {
			c.bfAt = c.now + c.cfg.BackfillInterval
			c.push(event{t: c.bfAt, kind: evBackfill})
		}
	}
}

// enqueue inserts j in priority order: higher priority first, then FIFO.
func (c *Cluster) enqueue(j *job) {
	i := sort.Search(len(c.pending), func(i int) bool {
		p := c.pending[i]
		if p.preemptible != j.preemptible {
			return p.preemptible // the lower tier's jobs come after all others
		}
		if p.prio != j.prio {
			return p.prio < j.prio
		}
		return p.rec.Submit > j.rec.Submit || (p.rec.Submit == j.rec.Submit && p.seq > j.seq)
	})
	c.pending = append(c.pending, nil)
	copy(c.pending[i+1:], c.pending[i:])
	c.pending[i] = j
}

// dirty queues a scheduling pass after the reaction latency and, with a
// BackfillInterval, a backfill pass when the interval since the last one
// has passed (SLURM's backfill thread sleeps bf_interval after a cycle,
// then runs at the first check that finds a change).
func (c *Cluster) dirty() {
	if c.schedAt < 0 {
		c.schedAt = c.now + c.cfg.latency(c.now)
		c.push(event{t: c.schedAt, kind: evSched})
	}
	if c.cfg.BackfillInterval > 0 && c.bfAt < 0 { // (a busy thread has one queued after its first)
		c.bfAt = max(c.now+c.cfg.Latency, c.lastBF+c.cfg.BackfillInterval)
		if c.cfg.BackfillBusy {
			// A busy thread cycles whatever happens: its phase is the
			// clock's (passes at Latency past multiples of the interval),
			// not the first change's. Otherwise a harvest run, whose agent
			// submits pilots at the window's first second, backfilled at
			// another phase than its baseline, whose first change is the
			// first job's arrival: on SDSC-SP2 days 60-90 12 s earlier,
			// which backfilled three jobs its baseline never did and made
			// a 64-node job and the jobs behind it late.
			d := c.cfg.BackfillInterval
			c.bfAt = (c.bfAt-c.cfg.Latency+d-1)/d*d + c.cfg.Latency
		}
		c.push(event{t: c.bfAt, kind: evBackfill})
	}
}

// buildProfile fills c.prof with the free nodes over time, judged by the
// running jobs' time limits.
func (c *Cluster) buildProfile() *profile {
	c.fillProfile(&c.prof, true)
	return &c.prof
}

// fillProfile fills p with the free nodes over time judged by the running
// jobs' limits; without pilots, as if no pilot ran (see harm).
func (c *Cluster) fillProfile(p *profile, withPilots bool) {
	// The plan of the jobs above the preemptible tier ignores its
	// pilots: their nodes are free at once (see free).
	if withPilots {
		p.reset(c.now, c.idleCores()+c.preemptibleFree)
		for i := range c.byEnd {
			if r := &c.byEnd[i]; !r.lower {
				p.release(max(r.end, c.now), r.cores)
			}
		}
		return
	}
	// Without pilots: every pilot's cores are free now (every lower
	// pilot is a pilot).
	p.reset(c.now, c.idleCores()+c.pilotCores)
	for i := range c.byEnd {
		if r := &c.byEnd[i]; !r.pilot {
			p.release(max(r.end, c.now), r.cores)
		}
	}
}

// release is a running job's entry in c.byEnd: when its cores come back
// judged by its limit, and which plans count it.
type release struct {
	end, seq int64
	cores    int
	// pilot: a pilot (not in the plan without pilots); lower: a
	// preemptible pilot not being preempted (in no plan: see free).
	pilot, lower bool
}

func (j *job) release() release {
	return release{end: j.endByLimit(), seq: j.seq, cores: j.cores, pilot: j.pilot, lower: j.preemptible && !j.preempting}
}

// endIndex is where running job j is, or goes, in c.byEnd.
func (c *Cluster) endIndex(j *job) int {
	e := j.endByLimit()
	lo, hi := 0, len(c.byEnd)
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if r := &c.byEnd[m]; r.end < e || r.end == e && r.seq < j.seq {
			lo = m + 1
		} else {
			hi = m
		}
	}
	return lo
}

// schedule is one pass of the scheduler: jobs start in priority order while
// they fit; with backfill the first Reservations jobs that do not fit get a
// reservation at their earliest start, and a lower job starts now only if
// it fits around every reservation for its whole time limit. Without (the
// main scheduler's pass) the pass stops at the first job that cannot start.
func (c *Cluster) schedule(backfill bool) {
	c.closeCharges()
	defer c.chargePilots()
	c.reprioritise()
	var p *profile
	reserved := 0
	c.reclaimed = 0
	// blocked: the main pass met a job that cannot start; SLURM's main
	// scheduler then takes the partition's nodes out of the pass, and the
	// preemptible tier's partition spans the same nodes.
	blocked := false
	live := c.pending[:0]
	for _, j := range c.pending {
		if j.state != stPending {
			continue
		}
		if blocked {
			live = append(live, j)
			continue
		}
		if j.preemptible {
			// The lower tier takes whatever node is idle: it delays
			// nobody, as anything above it preempts it.
			if c.idleNodesForPilots() > 0 {
				if backfill { // the main scheduler ignores TimeMin
					c.sizePilot(j, p)
				}
				c.start(j)
			} else {
				live = append(live, j)
			}
			continue
		}
		free := c.free()
		if !backfill && (j.cores > free || j.pilot && !c.pilotFits()) {
			blocked = true
			live = append(live, j)
			continue
		}
		if j.cores > free && reserved >= c.cfg.Reservations {
			// Cannot start now, and no reservation left to place:
			// skip without touching the profile (keeps passes cheap).
			live = append(live, j)
			continue
		}
		if p == nil {
			p = c.buildProfile()
		}
		if backfill && j.pilot && j.minLimit > 0 && c.cfg.TimeMinSizing && !c.sizePilot(j, p) {
			live = append(live, j) // not even its minimum fits the plan
			continue
		}
		s := p.earliest(j.cores, j.limit)
		if s == c.now && j.cores <= free && (!j.pilot || c.pilotFits()) {
			p.reserve(s, j.limit, j.cores)
			if c.preemptFor(j) {
				c.start(j)
			} else {
				live = append(live, j) // starts when the preempted pilots are gone
				blocked = !backfill    // ESLURM_NODES_BUSY fails the main pass
			}
			continue
		}
		live = append(live, j)
		if s == c.now && j.pilot && j.cores <= free {
			// A pilot with the cores but no idle node (they are on
			// shared nodes): it waits for one, holding no reservation.
			continue
		}
		if reserved < c.cfg.Reservations && s != never {
			p.reserve(s, j.limit, j.cores)
			reserved++
		}
	}
	for i := len(live); i < len(c.pending); i++ {
		c.pending[i] = nil
	}
	c.pending = live
}

func (c *Cluster) start(j *job) { c.startAt(j, c.now) }

// idleCores is the cores no job or pilot holds.
func (c *Cluster) idleCores() int { return c.totalCores() - c.used }

func (c *Cluster) totalCores() int { return c.total }

// nodesFor is the fewest nodes that hold cores.
func (c *Cluster) nodesFor(cores int) int { k := c.cfg.cores(); return (cores + k - 1) / k }

// startAt starts j now as if it had started at (at <= now): its run time
// and end count from then.
func (c *Cluster) startAt(j *job, at int64) {
	c.changes++
	j.state = stRunning
	j.rec.Start = at
	i := c.runningIndex(j)
	c.running = slices.Insert(c.running, i, j)
	c.runSeq = slices.Insert(c.runSeq, i, j.seq)
	if c.reuseSnap {
		c.viewStarted = append(c.viewStarted, j.seq)
	}
	c.byEnd = slices.Insert(c.byEnd, c.endIndex(j), j.release())
	if j.preemptible {
		c.preemptibleFree += j.cores
	}
	c.used += j.cores
	j.alloc = c.nodes.place(j.one[:0], j.cores, j.pilot)
	j.rec.Nodes = len(j.alloc)
	c.hold(j.rec.User, j.cores)
	j.endGen++
	end := add(at, min(j.run, j.limit))
	if end != never {
		c.push(event{t: end, kind: evEnd, j: j, gen: j.endGen})
	}
	if j.pilot {
		c.pilotCores += j.cores
		c.queuedPilots-- // pilots start only from the queue (Submit)
		c.idlePilots++
		c.pull(j)
	} else {
		c.foreignCores += j.cores
	}
	c.sample()
	if c.onEvent != nil {
		c.onEvent(j.rec)
	}
}

// runningIndex is where j is, or goes, in the running jobs (id order).
func (c *Cluster) runningIndex(j *job) int {
	i, _ := slices.BinarySearch(c.runSeq, j.seq)
	return i
}

// finish ends a running job now.
func (c *Cluster) finish(j *job, killed, cancelled bool) {
	c.changes++
	c.jobEvents++
	j.state = stDone
	j.rec.End = c.now
	j.rec.Killed = killed && !cancelled && !j.rec.Preempted
	j.rec.Cancelled = cancelled
	i := c.runningIndex(j)
	c.running = slices.Delete(c.running, i, i+1)
	c.runSeq = slices.Delete(c.runSeq, i, i+1)
	if c.reuseSnap {
		c.viewEnded = append(c.viewEnded, j.seq)
	}
	k := c.endIndex(j)
	c.byEnd = slices.Delete(c.byEnd, k, k+1)
	if j.preemptible && !j.preempting {
		c.preemptibleFree -= j.cores
	}
	if j.preempting {
		c.goingCores -= j.cores
	}
	c.used -= j.cores
	c.nodes.release(j.alloc)
	j.alloc = nil
	c.hold(j.rec.User, -j.cores)
	if j.pilot {
		c.pilotCores -= j.cores
		if j.task != nil {
			c.lostTaskSec += c.now - j.taskFrom
			c.requeue(j)
			c.busyPilots--
		} else {
			c.idlePilots--
		}
	} else {
		c.foreignCores -= j.cores
	}
	c.sample()
	if c.onEvent != nil {
		c.onEvent(j.rec)
	}
	c.retire(j)
	c.feedIdle()
	c.dirty()
}

func (c *Cluster) sample() {
	k := c.nodes.cores
	s := Sample{T: c.now, Foreign: c.foreignCores, PilotBusy: c.busyPilots * k, PilotIdle: c.idlePilots * k, SharedIdle: c.idleCores() - c.nodes.idle()*k}
	last := &c.samples[len(c.samples)-1]
	if last.Foreign == s.Foreign && last.PilotBusy == s.PilotBusy && last.PilotIdle == s.PilotIdle && last.SharedIdle == s.SharedIdle {
		return
	}
	if last.T == s.T {
		*last = s
		return
	}
	c.samples = append(c.samples, s)
}

// Samples returns the node use over time so far (a copy).
func (c *Cluster) Samples() []Sample {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]Sample(nil), c.samples...)
}

// donePilot is what a finished pilot's Record holds beyond what every
// pilot's has (its id, name, user and label follow from its seq).
type donePilot struct {
	limit                 cluster.Limit
	submit, start, end    int64
	nodes                 int32
	killed, cancelled     bool
	preempted, shrunk, ok bool
}

// retire drops a finished pilot's job, keeping its record compact in
// c.done. Events still queued for it hold the job and see it done.
func (c *Cluster) retire(j *job) {
	if !j.canonical {
		return // an id made unique with a suffix: kept whole
	}
	// done grows by chunks: never copied as the month's pilots add up.
	for i := int(j.seq) >> doneShift; len(c.done) <= i; {
		c.done = append(c.done, make([]donePilot, 1<<doneShift))
	}
	r := &j.rec
	c.done[j.seq>>doneShift][j.seq&(1<<doneShift-1)] = donePilot{limit: r.Limit, submit: r.Submit, start: r.Start, end: r.End, nodes: int32(r.Nodes),
		killed: r.Killed, cancelled: r.Cancelled, preempted: r.Preempted, shrunk: r.Shrunk, ok: true}
	c.jobs[j.seq] = nil
}

// doneShift: c.done's chunks hold 1<<doneShift records.
const doneShift = 12

// record returns the record of the job with seq i.
func (c *Cluster) record(i int) Record {
	if j := c.jobs[i]; j != nil {
		return j.rec
	}
	d := c.done[i>>doneShift][i&(1<<doneShift-1)]
	id := string(strconv.AppendInt(append(c.idBuf[:0], "pilot-"...), int64(i+1), 10))
	n := id[len("pilot-"):]
	run := int64(d.limit)
	if d.limit.IsUnlimited() {
		run = never
	}
	return Record{ID: id, Name: n, User: "harvest", Label: "pilot", Pilot: true, Nodes: int(d.nodes), Cores: c.cfg.cores(), Limit: d.limit,
		Submit: d.submit, Run: run, Start: d.start, End: d.end, Killed: d.killed, Cancelled: d.cancelled, Preempted: d.preempted, Shrunk: d.shrunk}
}

// Records returns every job's record, in id order (a copy).
func (c *Cluster) Records() []Record {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]Record, len(c.jobs))
	for i := range c.jobs {
		out[i] = c.record(i)
	}
	for _, j := range c.charged {
		out[j.seq].Blocked += min(c.now, j.chargeUntil) - j.chargeFrom
	}
	return out
}

// Info describes the simulator.
func (c *Cluster) Info(ctx context.Context) (adapters.Info, error) {
	if err := ctx.Err(); err != nil {
		return adapters.Info{}, err
	}
	info := adapters.Info{Name: "sim", Version: "1", Tag: c.cfg.Tag, TimeGranularity: c.cfg.Granularity, ExpectedStart: true, Backfill: true,
		TimeMinSizing: c.cfg.TimeMinSizing, Shrink: true, SubmitsVisible: true}
	if c.cfg.Preemption {
		info.Preemption = &adapters.Preemption{Partition: "sim-preemptible", Mode: "CANCEL", GraceTime: c.cfg.GraceTime, Usable: true}
	}
	return info, nil
}

// Snapshot returns the cluster at the current virtual time: running jobs
// in id order, then pending jobs in priority order, the first of them with
// its expected start from the backfill reservation.
func (c *Cluster) Snapshot(ctx context.Context) (cluster.Snapshot, error) {
	// A cancelled caller gets an error, as from a real batch system.
	if err := ctx.Err(); err != nil {
		return cluster.Snapshot{}, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	s := cluster.Snapshot{
		Now:        c.now,
		TotalNodes: c.cfg.Nodes,
		IdleNodes:  c.nodes.idle(),
		Partition:  "sim",
		MaxTime:    c.maxTime(),
	}
	// Every entry written is checked as it is written (InProcess): an
	// entry kept from the last snapshot changed only its run time, the
	// time since its start, which virtual time never makes negative.
	var bad error
	if c.reuseSnap {
		s.Jobs, bad = c.runningView()
		defer func() { c.snapJobs = s.Jobs }()
	} else {
		s.Jobs = make([]cluster.Job, len(c.running), len(c.running)+len(c.pending))
		for i, j := range c.running {
			c.runningInto(&s.Jobs[i], j)
			bad = cmp.Or(bad, s.Jobs[i].Check())
		}
	}
	top := true
	for _, j := range c.pending {
		if j.state != stPending {
			continue
		}
		cj := c.view(j)
		cj.State = cluster.Pending
		cj.Reason = "Priority"
		if top {
			top = false
			cj.Reason = "Resources"
			if es := c.buildProfile().earliest(j.cores, j.limit); es != never {
				cj.ExpectedStart = es
			}
		}
		bad = cmp.Or(bad, cj.Check())
		s.Jobs = append(s.Jobs, cj)
	}
	if bad != nil {
		return cluster.Snapshot{}, fmt.Errorf("sim: %w", bad)
	}
	return s, nil
}

// InProcess implements adapters.InProcess: the cluster's calls never wait,
// and its snapshots' jobs are checked as Snapshot writes them (an entry
// kept from the last one changes only its run time, never negative); no
// two jobs alive have the same id, as newJob makes each id unique among
// the jobs in byID, which holds every pending and running job (retire
// drops only finished pilots).
func (c *Cluster) InProcess() bool { return true }

// runningView returns the running jobs' part of a reused snapshot, in the
// previous snapshot's array. Both lists are in id order; the jobs that
// started and ended since (viewStarted, viewEnded) split the previous list
// into runs that keep their order and move by a constant, each moved by
// one copy (in an order that reads every entry before it is written over:
// the runs keep order, so those moving down never land on one moving up).
// Only the jobs that started are written whole, and the few whose limit
// or task changed (viewChanged) written again; every entry gets its run
// time (TestReusedSnapshotsEqualFullOnes). A round's changes are a few
// starts and ends among thousands of jobs: no job that did not change is
// read, and the lists are merged at the cost of the changes, not of the
// jobs.
func (c *Cluster) runningView() ([]cluster.Job, error) {
	n := len(c.running)
	buf := c.snapJobs
	if cap(buf) < n {
		grown := make([]cluster.Job, len(buf), n+n/4+16)
		copy(grown, buf)
		buf = grown
	}
	shown := c.snapSeq
	buf = buf[:max(n, len(shown))]
	// gone: the shown jobs that ended; added: the running jobs that
	// were not shown (a job that started and ended since is neither).
	gone := c.viewEnded[:0]
	for _, seq := range c.viewEnded {
		if _, ok := slices.BinarySearch(shown, seq); ok {
			gone = append(gone, seq)
		}
	}
	added := c.viewStarted[:0]
	for _, seq := range c.viewStarted {
		if _, ok := slices.BinarySearch(c.runSeq, seq); ok {
			added = append(added, seq)
		}
	}
	slices.Sort(gone)
	slices.Sort(added)
	// The runs of kept entries: shown[k:k+l] goes to [i:i+l].
	moves := c.viewMoves[:0]
	k, i := 0, 0
	for g, a := 0, 0; k < len(shown) || a < len(added); {
		nextGone, nextAdded := len(shown), n
		if g < len(gone) {
			nextGone, _ = slices.BinarySearch(shown, gone[g])
		}
		if a < len(added) {
			nextAdded, _ = slices.BinarySearch(c.runSeq, added[a])
		}
		switch l := min(nextGone-k, nextAdded-i); {
		case l > 0:
			if k != i {
				moves = append(moves, viewMove{from: k, to: i, n: l})
			}
			k, i = k+l, i+l
		case g < len(gone) && nextGone == k:
			k, g = k+1, g+1
		default:
			i, a = i+1, a+1
		}
	}
	for _, m := range moves {
		if m.from > m.to {
			copy(buf[m.to:m.to+m.n], buf[m.from:m.from+m.n])
		}
	}
	for x := len(moves) - 1; x >= 0; x-- {
		if m := moves[x]; m.from < m.to {
			copy(buf[m.to:m.to+m.n], buf[m.from:m.from+m.n])
		}
	}
	buf = buf[:n]
	for x := range buf {
		cj := &buf[x]
		cj.RunTime = c.now - cj.StartTime
		cj.Master = false // the agent's mark (enrich)
		if !c.showBusy {
			cj.Busy = false
		}
	}
	var bad error
	for _, seq := range added {
		x, _ := slices.BinarySearch(c.runSeq, seq)
		cj := &buf[x]
		c.runningInto(cj, c.running[x])
		bad = cmp.Or(bad, cj.Check())
	}
	for _, j := range c.viewDirty {
		if j.state != stRunning {
			continue
		}
		cj := &buf[c.runningIndex(j)]
		cj.TimeLimit = j.rec.Limit
		if j.limit != never {
			cj.TimeLimit = cluster.Limit(j.limit)
		}
		cj.Busy = c.showBusy && j.task != nil
		bad = cmp.Or(bad, cj.Check())
	}
	c.viewDirty = c.viewDirty[:0]
	c.viewStarted, c.viewEnded, c.viewMoves = c.viewStarted[:0], c.viewEnded[:0], moves[:0]
	c.snapSeq = append(shown[:0], c.runSeq...)
	return buf, bad
}

// viewMove is a run of a reused snapshot's running jobs that moves: n
// entries from index from to index to.
type viewMove struct{ from, to, n int }

// viewChanged notes that running job j's limit or task changed, for the
// next reused snapshot.
func (c *Cluster) viewChanged(j *job) {
	if c.reuseSnap {
		c.viewDirty = append(c.viewDirty, j)
	}
}

// runningInto writes the view of running job j.
func (c *Cluster) runningInto(cj *cluster.Job, j *job) {
	// Written in place: a job is 200 bytes and a round shows thousands.
	c.viewInto(cj, j)
	cj.State = cluster.Running
	cj.RunTime = c.now - j.rec.Start
	cj.StartTime = j.rec.Start
	cj.Busy = c.showBusy && j.task != nil
}

// maxTime is the snapshot's max_time_s: absent when unlimited.
func (c *Cluster) maxTime() *cluster.Limit {
	if c.cfg.MaxTime.IsUnlimited() {
		return nil
	}
	m := c.cfg.MaxTime
	return &m
}

func (c *Cluster) view(j *job) cluster.Job {
	var cj cluster.Job
	c.viewInto(&cj, j)
	return cj
}

func (c *Cluster) viewInto(cj *cluster.Job, j *job) {
	*cj = cluster.Job{ID: j.rec.ID, Nodes: j.rec.Nodes, TimeLimit: j.rec.Limit, SubmitTime: j.rec.Submit, Partition: "sim", Priority: j.prio}
	if j.limit != never {
		cj.TimeLimit = cluster.Limit(j.limit) // sized, shrunk or preempted
	}
	if j.pilot {
		cj.Name, cj.User, cj.Pilot = c.cfg.Tag, "harvest", true
		cj.Preemptible = j.preemptible
	} else {
		cj.Name, cj.User = j.rec.Name, j.rec.User
		if cj.User == "" {
			cj.User = "user"
		}
	}
}

// Submit queues a one-node pilot at the current virtual time. The limit is
// rounded down to the granularity; the command is not run.
func (c *Cluster) Submit(ctx context.Context, spec adapters.PilotSpec) (adapters.PilotID, error) {
	if err := ctx.Err(); err != nil {
		return "", err
	}
	if err := spec.Validate(); err != nil {
		return "", err
	}
	limit := adapters.RoundDown(spec.TimeLimit.Min(c.cfg.MaxTime), c.cfg.Granularity)
	if limit == 0 {
		return "", fmt.Errorf("%w: time limit %s is below the granularity of %d s", adapters.ErrInvalidSpec, spec.TimeLimit, c.cfg.Granularity)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	j := c.newJob("", "pilot", "harvest", c.cfg.cores(), limit, never, c.now, true)
	j.preemptible = spec.Preemptible && c.cfg.Preemption
	if spec.MinTimeLimit > 0 && c.cfg.TimeMinSizing {
		// Rounded up, as SLURM rounds limits up to whole minutes.
		g := c.cfg.Granularity
		j.minLimit = min((int64(spec.MinTimeLimit)+g-1)/g*g, j.limit)
	}
	j.state = stPending
	c.enqueue(j)
	c.changes++
	c.jobEvents++
	c.dirty()
	return adapters.PilotID(j.rec.ID), nil
}

// Cancel cancels a pilot, queued or running; unknown or finished pilots are
// not an error. Foreign jobs are refused with ErrNotPilot.
func (c *Cluster) Cancel(ctx context.Context, id adapters.PilotID) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	j := c.lookup(string(id))
	if j == nil {
		return nil
	}
	if !j.pilot {
		return fmt.Errorf("cancel %s: %w", id, adapters.ErrNotPilot)
	}
	switch j.state {
	case stPending:
		c.queuedPilots--
		j.state = stDone
		j.rec.Cancelled = true
		c.retire(j)
		c.changes++
		c.jobEvents++
		c.dirty()
	case stRunning:
		c.finish(j, false, true)
	}
	return nil
}
