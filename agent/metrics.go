package agent

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/harvest-hpc/harvest/adapters"
	"github.com/harvest-hpc/harvest/agent/policy"
	"github.com/harvest-hpc/harvest/cluster"
	qmetrics "github.com/harvest-hpc/harvest/queue/metrics"
)

// backfillForget bounds how long a release waits to see its job start:
// a job that has not started after this is dropped (not observed).
const backfillForget = 24 * 3600

// Metrics are the agent's Prometheus metrics, in their own registry (the
// global one would mix in every library's metrics and break tests that
// build two agents). Round metrics are fed by ObserveRound from the
// reconciler's OnRound hook; the hosted queue's are read at scrape time
// (queue/metrics).
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
	delayedNow, delayedLongest   prometheus.Gauge

	// Health is whether the batch system answers (the reconciler and the
	// agent's start report to it; /status shows it).
	Health *Health

	mu sync.Mutex
	// released maps a foreign job id to the snapshot time of the round
	// that released pilots for it, until a snapshot shows it running.
	releasedFor map[string]int64
	harm        Harm
}

// Harm is the delay the harvest imposed on foreign jobs, as the agent
// observed it: a job counts from the round that released pilots for it
// (pilots held nodes it could use) to its start. With preemption the
// batch system gives nodes back by itself and no round releases for it.
type Harm struct {
	// Waiting are the jobs pilots were released for that have not started
	// yet, longest waiting first; Now is the batch system's clock then.
	Waiting []DelayedJob
	Now     int64
	// Started counts the jobs that started after such a release, with
	// their total and longest delay in seconds; Unobserved those that left
	// the queue (or waited a day) without being seen running.
	Started, Unobserved  int
	TotalDelay, MaxDelay int64
	MaxDelayJob          string
}

// DelayedJob is a foreign job waiting for nodes pilots held.
type DelayedJob struct {
	ID    string
	Since int64 // snapshot time of the release round
}

// NewMetrics registers the agent's metrics. q may be nil (an agent
// without the queue, or with a remote one).
func NewMetrics(q qmetrics.Queue) *Metrics {
	reg := qmetrics.NewRegistry(q)
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
		delayedNow: prometheus.NewGauge(prometheus.GaugeOpts{Name: "harvest_foreign_jobs_delayed",
			Help: "Foreign jobs waiting now for nodes pilots held at the last round: pilots were released for them and they have not started yet."}),
		delayedLongest: prometheus.NewGauge(prometheus.GaugeOpts{Name: "harvest_foreign_delay_longest_seconds",
			Help: "The longest of those waits so far, in batch-system seconds since the release round (0: none waits)."}),
	}
	for _, c := range []prometheus.Collector{m.nodes, m.pilots, m.foreign, m.minNodes, m.maxNodes, m.paused, m.lastRound, m.maxTime,
		m.rounds, m.decisions, m.submitted, m.released, m.submitLatency, m.cancelLatency, m.snapshotLatency,
		m.submitFailures, m.cancelFailures, m.snapshotFailures, m.backfillDelay, m.backfillUnseen, m.delayedNow, m.delayedLongest} {
		f(c)
	}
	if q != nil {
		f(siteYield{q})
	}
	m.Health = NewHealth()
	f(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "harvest_batch_system_up",
		Help: "1 while the batch system answers the adapter, 0 since a call failed (at start or in a round) until one succeeds."},
		func() float64 {
			if _, _, down := m.Health.Unreachable(); down {
				return 0
			}
			return 1
		}))
	f(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "harvest_batch_system_unreachable_since_timestamp_seconds",
		Help: "Wall-clock time since which the batch system has not answered (0 while it answers)."},
		func() float64 {
			since, _, down := m.Health.Unreachable()
			if !down {
				return 0
			}
			return float64(since.UnixNano()) / 1e9
		}))
	// Known label values start at zero so that rate() and alerts work
	// before the first event.
	for _, k := range []string{"timeout", "error"} {
		m.submitFailures.WithLabelValues(k)
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
	defer m.updateWaiting(s.Now)
	if len(m.releasedFor) == 0 {
		return
	}
	// Only the few jobs pilots were released for are looked up: a map of
	// every job would be some 70 MB more at 300,000 jobs, every round.
	byID := make(map[string]cluster.Job, len(m.releasedFor))
	for _, j := range s.Jobs {
		if _, ok := m.releasedFor[j.ID]; ok && !j.Pilot {
			byID[j.ID] = j
		}
	}
	for id, t0 := range m.releasedFor {
		j, ok := byID[id]
		switch {
		case !ok || s.Now-t0 > backfillForget:
			m.backfillUnseen.Inc()
			m.harm.Unobserved++
			delete(m.releasedFor, id)
		case j.State == cluster.Running:
			start := s.Now
			if j.StartTime > 0 && j.StartTime <= s.Now {
				start = j.StartTime
			}
			delay := max(start-t0, 0)
			m.backfillDelay.Observe(float64(delay))
			m.harm.Started++
			m.harm.TotalDelay += delay
			if delay > m.harm.MaxDelay || m.harm.MaxDelayJob == "" {
				m.harm.MaxDelay, m.harm.MaxDelayJob = max(delay, m.harm.MaxDelay), id
			}
			delete(m.releasedFor, id)
		}
	}
}

// updateWaiting refreshes the live figures of the jobs still waiting.
// Called with m.mu held.
func (m *Metrics) updateWaiting(now int64) {
	m.harm.Now = now
	m.harm.Waiting = m.harm.Waiting[:0]
	for id, t0 := range m.releasedFor {
		m.harm.Waiting = append(m.harm.Waiting, DelayedJob{ID: id, Since: t0})
	}
	sort.Slice(m.harm.Waiting, func(i, j int) bool {
		a, b := m.harm.Waiting[i], m.harm.Waiting[j]
		return a.Since < b.Since || a.Since == b.Since && a.ID < b.ID
	})
	m.delayedNow.Set(float64(len(m.harm.Waiting)))
	longest := int64(0)
	if len(m.harm.Waiting) > 0 {
		longest = max(now-m.harm.Waiting[0].Since, 0)
	}
	m.delayedLongest.Set(float64(longest))
}

// Harm returns the delay figures as of the last round.
func (m *Metrics) Harm() Harm {
	m.mu.Lock()
	defer m.mu.Unlock()
	h := m.harm
	h.Waiting = append([]DelayedJob(nil), m.harm.Waiting...)
	return h
}

// siteYield exports every site's yield, useful task time over pilot time,
// read from the queue at scrape time (the two totals are the queue's
// harvest_site_useful_seconds_total and harvest_site_pilot_seconds_total).
type siteYield struct{ q qmetrics.Queue }

var yieldDesc = prometheus.NewDesc("harvest_site_yield",
	"Useful task time over pilot node time at the site since the queue started (absent while the site has held no pilot).", []string{"site"}, nil)

func (y siteYield) Describe(ch chan<- *prometheus.Desc) { ch <- yieldDesc }

func (y siteYield) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	sl, err := y.q.Sites(ctx)
	if err != nil {
		return // the queue's own collector counts scrape errors
	}
	for _, s := range sl.Sites {
		if v, ok := Yield(s.UsefulHours, s.PilotHours); ok {
			ch <- prometheus.MustNewConstMetric(yieldDesc, prometheus.GaugeValue, v, s.Name)
		}
	}
}

// Yield is useful over pilot time; not ok while no pilot time was held.
func Yield(useful, pilot float64) (float64, bool) {
	if pilot <= 0 {
		return 0, false
	}
	return useful / pilot, true
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

// JobEvents passes the inner adapter's job-event count on (the embedded
// interface alone would hide it and turn the agent's event check off);
// ErrNotImplemented when the inner adapter keeps none.
func (a *instrumented) JobEvents(ctx context.Context) (int64, error) {
	jc, ok := a.Adapter.(adapters.JobEventCounter)
	if !ok {
		return 0, fmt.Errorf("job events: %w", adapters.ErrNotImplemented)
	}
	return jc.JobEvents(ctx)
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
