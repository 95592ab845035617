package agent

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/harvest-hpc/harvest/adapters"
	"github.com/harvest-hpc/harvest/agent/policy"
	"github.com/harvest-hpc/harvest/cluster"
	"github.com/harvest-hpc/harvest/queue"
	"github.com/harvest-hpc/harvest/queue/api"
	"github.com/harvest-hpc/harvest/queue/store"
)

// QueueStats is the read-only part of the queue the metrics read at
// scrape time (*queue.Queue implements it).
type QueueStats interface {
	Users(ctx context.Context) ([]api.User, error)
	Stats(ctx context.Context) (queue.Stats, error)
}

var _ QueueStats = (*queue.Queue)(nil)

// backfillForget bounds how long a release waits to see its job start:
// a job that has not started after this is dropped (not observed).
const backfillForget = 24 * 3600

// Metrics are the agent's Prometheus metrics, in their own registry (the
// global one would mix in every library's metrics and break tests that
// build two agents). Round metrics are fed by ObserveRound from the
// reconciler's OnRound hook; queue metrics are read at scrape time.
type Metrics struct {
	Registry *prometheus.Registry

	nodes, pilots, foreign       *prometheus.GaugeVec
	minNodes, maxNodes, paused   prometheus.Gauge
	lastRound, maxTime           prometheus.Gauge
	rounds                       prometheus.Counter
	decisions                    *prometheus.CounterVec
	submitted, released          prometheus.Counter
	submitLatency, cancelLatency prometheus.Histogram
	snapshotLatency              prometheus.Histogram
	submitFailures               *prometheus.CounterVec
	cancelFailures               prometheus.Counter
	snapshotFailures             prometheus.Counter
	backfillDelay                prometheus.Histogram
	backfillUnseen               prometheus.Counter

	mu sync.Mutex
	// released maps a foreign job id to the snapshot time of the round
	// that released pilots for it, until a snapshot shows it running.
	releasedFor map[string]int64
}

// NewMetrics registers the agent's metrics. q may be nil (an agent
// without the queue).
func NewMetrics(q QueueStats) *Metrics {
	reg := prometheus.NewRegistry()
	f := func(c prometheus.Collector) { reg.MustRegister(c) }
	latency := []float64{0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30}
	m := &Metrics{
		Registry:    reg,
		releasedFor: map[string]int64{},
		nodes: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "harvest_nodes",
			Help: "Nodes at the last round: total, idle, foreign (running foreign jobs), held (running pilots), useful (pilots running tasks)."}, []string{"state"}),
		pilots: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "harvest_pilots",
			Help: "Pilot jobs at the last round: queued (pending in the batch system), idle (running, no task), busy (running tasks)."}, []string{"state"}),
		foreign: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "harvest_foreign_jobs",
			Help: "Foreign (other users') batch jobs at the last round, by state."}, []string{"state"}),
		minNodes:  prometheus.NewGauge(prometheus.GaugeOpts{Name: "harvest_min_nodes", Help: "Admin floor of pilot nodes used at the last round."}),
		maxNodes:  prometheus.NewGauge(prometheus.GaugeOpts{Name: "harvest_max_nodes", Help: "Admin cap of pilot nodes used at the last round (0 = none)."}),
		paused:    prometheus.NewGauge(prometheus.GaugeOpts{Name: "harvest_paused", Help: "1 while the admin paused harvesting (harvest admin pause or drain)."}),
		lastRound: prometheus.NewGauge(prometheus.GaugeOpts{Name: "harvest_last_round_timestamp_seconds", Help: "Wall-clock time of the last round that saw the cluster."}),
		maxTime: prometheus.NewGauge(prometheus.GaugeOpts{Name: "harvest_max_time_seconds",
			Help: "Time until the top pending foreign job can start, as used at the last round (-1 = unlimited or no pending job)."}),
		rounds: prometheus.NewCounter(prometheus.CounterOpts{Name: "harvest_rounds_total", Help: "Rounds that saw the cluster and decided."}),
		decisions: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "harvest_decisions_total",
			Help: "Decisions by policy case (see `harvest decide`; the reason text is in the log and `harvest explain`)."}, []string{"case"}),
		submitted: prometheus.NewCounter(prometheus.CounterOpts{Name: "harvest_pilots_submitted_total", Help: "Pilots submitted."}),
		released:  prometheus.NewCounter(prometheus.CounterOpts{Name: "harvest_pilots_released_total", Help: "Pilots cancelled by the policy's release decisions."}),
		submitLatency: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "harvest_submit_duration_seconds",
			Help: "Duration of pilot submit calls (sbatch/condor_submit), successful or not.", Buckets: latency}),
		cancelLatency: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "harvest_cancel_duration_seconds",
			Help: "Duration of pilot cancel calls (scancel/condor_rm), successful or not.", Buckets: latency}),
		snapshotLatency: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "harvest_snapshot_duration_seconds",
			Help: "Duration of snapshot calls (squeue+sinfo or condor_q+condor_status).", Buckets: latency}),
		submitFailures: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "harvest_submit_failures_total",
			Help: "Failed pilot submits: timeout (outcome unknown; the next snapshot tells) or error."}, []string{"kind"}),
		cancelFailures:   prometheus.NewCounter(prometheus.CounterOpts{Name: "harvest_cancel_failures_total", Help: "Failed pilot cancels."}),
		snapshotFailures: prometheus.NewCounter(prometheus.CounterOpts{Name: "harvest_snapshot_failures_total", Help: "Snapshots that failed (the round did nothing)."}),
		backfillDelay: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "harvest_backfill_delay_seconds",
			Help:    "For a pending foreign job the agent released pilots for: batch-system seconds from the release round's snapshot to the job's start (its start time if the batch system reports one, else the first snapshot that shows it running).",
			Buckets: []float64{0, 10, 30, 60, 120, 300, 600, 1800, 3600}}),
		backfillUnseen: prometheus.NewCounter(prometheus.CounterOpts{Name: "harvest_backfill_unobserved_total",
			Help: "Foreign jobs pilots were released for that left the queue (or waited a day) without being seen running."}),
	}
	for _, c := range []prometheus.Collector{m.nodes, m.pilots, m.foreign, m.minNodes, m.maxNodes, m.paused, m.lastRound, m.maxTime,
		m.rounds, m.decisions, m.submitted, m.released, m.submitLatency, m.cancelLatency, m.snapshotLatency,
		m.submitFailures, m.cancelFailures, m.snapshotFailures, m.backfillDelay, m.backfillUnseen} {
		f(c)
	}
	// Known label values start at zero so that rate() and alerts work
	// before the first event.
	for _, k := range []string{"timeout", "error"} {
		m.submitFailures.WithLabelValues(k)
	}
	if q != nil {
		f(newQueueCollector(q))
	}
	return m
}

// Handler serves the registry in the Prometheus text format.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.Registry, promhttp.HandlerOpts{Registry: m.Registry})
}

// ObserveRound records one round. Safe for concurrent use.
func (m *Metrics) ObserveRound(res RoundResult) {
	s, d := res.Snapshot, res.Decision
	m.rounds.Inc()
	m.lastRound.SetToCurrentTime()
	m.decisions.WithLabelValues(string(d.Case)).Inc()
	if d.MaxTime.IsUnlimited() {
		m.maxTime.Set(-1)
	} else {
		m.maxTime.Set(float64(d.MaxTime))
	}
	m.minNodes.Set(float64(s.MinNodes))
	m.maxNodes.Set(float64(s.MaxNodes))
	m.paused.Set(b2f(res.Paused))

	var queued, idle, busy, held, foreignNodes, fRun, fPend int
	for _, j := range s.Jobs {
		switch {
		case j.Pilot && j.State == cluster.Pending:
			queued++
		case j.Pilot && j.Busy:
			busy++
			held += j.Nodes
		case j.Pilot:
			idle++
			held += j.Nodes
		case j.State == cluster.Running:
			fRun++
			foreignNodes += j.Nodes
		default:
			fPend++
		}
	}
	m.nodes.WithLabelValues("total").Set(float64(s.TotalNodes))
	m.nodes.WithLabelValues("idle").Set(float64(s.IdleNodes))
	m.nodes.WithLabelValues("foreign").Set(float64(foreignNodes))
	m.nodes.WithLabelValues("held").Set(float64(held))
	m.nodes.WithLabelValues("useful").Set(float64(busy))
	m.pilots.WithLabelValues("queued").Set(float64(queued))
	m.pilots.WithLabelValues("idle").Set(float64(idle))
	m.pilots.WithLabelValues("busy").Set(float64(busy))
	m.foreign.WithLabelValues("running").Set(float64(fRun))
	m.foreign.WithLabelValues("pending").Set(float64(fPend))

	m.submitted.Add(float64(len(res.Submitted)))
	m.released.Add(float64(len(res.Cancelled)))
	for _, l := range res.SubmitLatency {
		m.submitLatency.Observe(l.Seconds())
	}
	for _, l := range res.CancelLatency {
		m.cancelLatency.Observe(l.Seconds())
	}
	for _, err := range res.Errors {
		switch {
		case errors.Is(err, adapters.ErrOutcomeUnknown) || errors.Is(err, context.DeadlineExceeded):
			m.submitFailures.WithLabelValues("timeout").Inc()
		case strings.HasPrefix(err.Error(), "cancel "):
			// The reconciler wraps cancel errors as "cancel ID: ...".
			m.cancelFailures.Inc()
		default:
			m.submitFailures.WithLabelValues("error").Inc()
		}
	}
	m.trackBackfill(s, d, res.Cancelled)
}

// ReleaseTarget is the foreign job a release decision was for: the job
// the reason names first ("job 42 needs ...", "job 42 (3 nodes, ...) ends
// before ..."), else the top job.
func ReleaseTarget(d policy.Decision) string {
	if d.Case != policy.CaseReleaseForTopJob && d.Case != policy.CaseReleaseForBackfill {
		return ""
	}
	if f := strings.Fields(d.Reason); len(f) > 1 && f[0] == "job" {
		return f[1]
	}
	return d.TopJob
}

func (m *Metrics) trackBackfill(s cluster.Snapshot, d policy.Decision, cancelled []string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(cancelled) > 0 {
		if id := ReleaseTarget(d); id != "" {
			if _, ok := m.releasedFor[id]; !ok {
				m.releasedFor[id] = s.Now
			}
		}
	}
	if len(m.releasedFor) == 0 {
		return
	}
	byID := make(map[string]cluster.Job, len(s.Jobs))
	for _, j := range s.Jobs {
		if !j.Pilot {
			byID[j.ID] = j
		}
	}
	for id, t0 := range m.releasedFor {
		j, ok := byID[id]
		switch {
		case !ok || s.Now-t0 > backfillForget:
			m.backfillUnseen.Inc()
			delete(m.releasedFor, id)
		case j.State == cluster.Running:
			start := s.Now
			if j.StartTime > 0 && j.StartTime <= s.Now {
				start = j.StartTime
			}
			m.backfillDelay.Observe(float64(max(start-t0, 0)))
			delete(m.releasedFor, id)
		}
	}
}

// InstrumentAdapter wraps ad so that snapshot calls are timed and their
// failures counted (a failed snapshot ends the round before OnRound).
func (m *Metrics) InstrumentAdapter(ad adapters.Adapter) adapters.Adapter {
	return &instrumented{Adapter: ad, m: m}
}

type instrumented struct {
	adapters.Adapter
	m *Metrics
}

func (a *instrumented) Snapshot(ctx context.Context) (cluster.Snapshot, error) {
	t0 := time.Now()
	s, err := a.Adapter.Snapshot(ctx)
	a.m.snapshotLatency.Observe(time.Since(t0).Seconds())
	if err != nil {
		a.m.snapshotFailures.Inc()
	}
	return s, err
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// queueCollector reads the queue at scrape time.
type queueCollector struct {
	q QueueStats

	tasks, requeued, lost, priority, running, maxCores, cpu, cost, epoch, alive, failovers, errs *prometheus.Desc
	writes, lockTime, slowWrites, stretched, slowBy, realtime, walBytes, walRestarts             *prometheus.Desc

	mu         sync.Mutex
	lastEpoch  int64
	failoverN  float64
	scrapeErrs float64
}

func newQueueCollector(q QueueStats) *queueCollector {
	d := prometheus.NewDesc
	return &queueCollector{
		q:           q,
		lastEpoch:   -1,
		tasks:       d("harvest_tasks", "Tasks of the jobs still stored, by owner and state (waiting = the user's queue depth).", []string{"user", "state"}, nil),
		requeued:    d("harvest_tasks_requeued", "Hand-outs beyond a task's first (retries and requeues), over the tasks still stored.", nil, nil),
		lost:        d("harvest_lost_task_seconds_total", "Run time of the task attempts interrupted since the queue started: work lost to pilots that ended under their tasks (cancelled, preempted, at their limit).", nil, nil),
		priority:    d("harvest_user_computed_priority", "The user's fair-share computedPriority (-1 = over quota, gets no tasks).", []string{"user"}, nil),
		running:     d("harvest_user_running_cores", "Cores the user's tasks run on now.", []string{"user"}, nil),
		maxCores:    d("harvest_user_max_cores", "The user's quota of cores running at once.", []string{"user"}, nil),
		cpu:         d("harvest_user_cpu_seconds_24h", "CPU seconds the user used in the last 24 h.", []string{"user"}, nil),
		cost:        d("harvest_user_cost_24h", "Cost (cores x seconds x price) the user used in the last 24 h.", []string{"user"}, nil),
		epoch:       d("harvest_master_epoch", "Epoch of the master lease (each new master increments it).", nil, nil),
		alive:       d("harvest_master_alive", "1 if a master holds an unexpired lease.", nil, nil),
		failovers:   d("harvest_master_failovers_total", "Master changes this agent saw (epoch increments after the first master it saw).", nil, nil),
		errs:        d("harvest_queue_scrape_errors_total", "Scrapes that could not read the queue.", nil, nil),
		writes:      d("harvest_queue_write_transactions_total", "Write transactions the queue's SQLite writer committed since the queue opened.", nil, nil),
		lockTime:    d("harvest_queue_write_lock_seconds_total", "Time the writer held SQLite's write lock (every request that writes waits for it).", nil, nil),
		slowWrites:  d("harvest_queue_write_transactions_slow_total", "Write transactions that held the lock over 5 ms (a request waiting behind one waits that long).", nil, nil),
		stretched:   d("harvest_queue_write_transactions_stretched_total", "Of the write transactions over 5 ms, those the hypervisor stretched: their own work (the writer thread's CPU clock) under 5 ms, the thread never preempted nor asleep in them. On a VM that steals CPU time (measured by harvest bench host) their rate follows the stolen share; the others are the queue's.", nil, nil),
		slowBy:      d("harvest_queue_write_transactions_slow_causes_total", "The write transactions over 5 ms by cause and by the queue's store method that ran them. cause: preempted (another thread took the writer's core), slept (the writer waited: for a processor of the Go scheduler after a call into SQLite, for a disk read), own_work (its own work on the writer thread's CPU clock over 5 ms), stretched (none of these: the hypervisor's).", []string{"cause", "method"}, nil),
		realtime:    d("harvest_queue_writer_realtime", "1 if the writer runs under SCHED_FIFO while it holds the write lock (realtime-writer; 0: off or not permitted, see the agent's log).", nil, nil),
		walBytes:    d("harvest_queue_wal_bytes", "Bytes of frames in the queue database's WAL at the last checkpoint (started over at 128 MiB).", nil, nil),
		walRestarts: d("harvest_queue_wal_restarts_total", "Checkpoints that started a WAL over 128 MiB over (each held the write lock for a copy and two fsyncs).", nil, nil),
	}
}

func (c *queueCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.tasks, c.requeued, c.lost, c.priority, c.running, c.maxCores, c.cpu, c.cost, c.epoch, c.alive, c.failovers, c.errs, c.writes, c.lockTime, c.slowWrites, c.stretched, c.slowBy, c.realtime, c.walBytes, c.walRestarts} {
		ch <- d
	}
}

func (c *queueCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	users, uerr := c.q.Users(ctx)
	st, serr := c.q.Stats(ctx)

	c.mu.Lock()
	if uerr != nil || serr != nil {
		c.scrapeErrs++
	}
	if serr == nil {
		if c.lastEpoch > 0 && st.Epoch > c.lastEpoch {
			c.failoverN += float64(st.Epoch - c.lastEpoch)
		}
		if st.Epoch > c.lastEpoch {
			c.lastEpoch = st.Epoch
		}
	}
	failovers, errs := c.failoverN, c.scrapeErrs
	c.mu.Unlock()

	g := func(d *prometheus.Desc, v float64, lv ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, lv...)
	}
	ch <- prometheus.MustNewConstMetric(c.failovers, prometheus.CounterValue, failovers)
	ch <- prometheus.MustNewConstMetric(c.errs, prometheus.CounterValue, errs)
	if uerr == nil {
		for _, u := range users {
			g(c.priority, u.ComputedPriority, u.Name)
			g(c.running, float64(u.RunningCores), u.Name)
			g(c.maxCores, float64(u.MaxCores), u.Name)
			g(c.cpu, u.CPUTime24h, u.Name)
			g(c.cost, u.Cost24h, u.Name)
		}
	}
	if serr == nil {
		for user, t := range st.ByUser {
			g(c.tasks, float64(t.Waiting), user, "waiting")
			g(c.tasks, float64(t.Running), user, "running")
			g(c.tasks, float64(t.Done), user, "done")
			g(c.tasks, float64(t.Failed), user, "failed")
			g(c.tasks, float64(t.Killed), user, "killed")
		}
		g(c.requeued, float64(st.Requeued))
		ch <- prometheus.MustNewConstMetric(c.lost, prometheus.CounterValue, st.LostTaskSeconds)
		g(c.epoch, float64(st.Epoch))
		g(c.alive, b2f(st.MasterAlive))
		ch <- prometheus.MustNewConstMetric(c.writes, prometheus.CounterValue, float64(st.WriteTransactions))
		ch <- prometheus.MustNewConstMetric(c.lockTime, prometheus.CounterValue, st.WriteLockSeconds)
		ch <- prometheus.MustNewConstMetric(c.slowWrites, prometheus.CounterValue, float64(st.SlowWrites))
		var stretched int64
		for k, n := range st.SlowWritesBy {
			ch <- prometheus.MustNewConstMetric(c.slowBy, prometheus.CounterValue, float64(n), k.Cause, strings.TrimPrefix(k.In, "store.(*Store)."))
			if k.Cause == store.CauseStretched {
				stretched += n
			}
		}
		ch <- prometheus.MustNewConstMetric(c.stretched, prometheus.CounterValue, float64(stretched))
		g(c.realtime, b2f(st.WriterRealtime))
		g(c.walBytes, float64(st.WALBytes))
		ch <- prometheus.MustNewConstMetric(c.walRestarts, prometheus.CounterValue, float64(st.WALRestarts))
	}
}
