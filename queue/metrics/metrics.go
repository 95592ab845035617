// Package metrics exports the queue's figures in the Prometheus text
// format: tasks and fair share per user, the master leases, the sites the
// queue serves, and its SQLite write lock. They are read from the queue at
// scrape time. The agent that hosts the queue adds its own round metrics to
// the same registry; `harvest queue serve` serves this package's alone.
package metrics

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/harvest-hpc/harvest/queue"
	"github.com/harvest-hpc/harvest/queue/api"
	"github.com/harvest-hpc/harvest/queue/txstats"
)

// Queue is the read-only part of the queue read at scrape time
// (*queue.Queue implements it).
type Queue interface {
	Users(ctx context.Context) ([]api.User, error)
	Stats(ctx context.Context) (queue.Stats, error)
	Sites(ctx context.Context) (api.SiteList, error)
}

var _ Queue = (*queue.Queue)(nil)

// scrapeTimeout bounds one scrape's reads of the queue.
const scrapeTimeout = 5 * time.Second

// NewRegistry returns a registry with the process's own figures (CPU,
// memory, open files, the Go runtime) and, if q is not nil, the queue's.
// Its own registry, not the global one: that would mix in every library's
// metrics, and tests build several.
func NewRegistry(q Queue) *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}), collectors.NewGoCollector())
	if q != nil {
		reg.MustRegister(NewCollector(q))
	}
	return reg
}

// Authenticator is how the queue's API identifies a caller and answers an
// error (*httpapi.Server).
type Authenticator interface {
	Authenticate(r *http.Request) (name, role string, err error)
	WriteError(w http.ResponseWriter, err error)
}

// Handler serves reg at /metrics. Users and admins may scrape it (the
// figures name users; pilots and remote agents may not); anonymous serves
// it to anybody, for a Prometheus that cannot send a bearer token.
//
// Mount it for every method: another than GET or HEAD gets the API's 405.
func Handler(reg *prometheus.Registry, auth Authenticator, anonymous bool) http.Handler {
	h := promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg})
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			auth.WriteError(w, fmt.Errorf("%w: %s %s", api.ErrMethod, r.Method, r.URL.Path))
			return
		}
		if anonymous {
			h.ServeHTTP(w, r)
			return
		}
		_, role, err := auth.Authenticate(r)
		if err != nil {
			auth.WriteError(w, err)
			return
		}
		if role != api.RoleAdmin && role != api.RoleUser {
			auth.WriteError(w, fmt.Errorf("%w: %s needs a user or admin token, you are %s", api.ErrForbidden, api.PathMetrics, role))
			return
		}
		h.ServeHTTP(w, r)
	})
}

// collector reads the queue at scrape time.
type collector struct {
	q Queue

	tasks, requeued, lost, priority, running, maxCores, cpu, cost, epoch, alive, failovers, errs *prometheus.Desc
	writeTx, slowWrites, slowBy, walBytes                                                        *prometheus.Desc
	site                                                                                         siteDescs

	mu         sync.Mutex
	lastEpoch  int64
	failoverN  float64
	scrapeErrs float64
}

// siteDescs are the per-site series: what `harvest admin sites` shows.
type siteDescs struct {
	alive, agentAt, masterAt, masterAlive, epoch, weight, share, running, allowance, nodes, maxNodes, paused,
	pilotSeconds, usefulSeconds, outcomes *prometheus.Desc
}

// NewCollector returns the queue's collector.
func NewCollector(q Queue) prometheus.Collector {
	d := prometheus.NewDesc
	site := []string{"site"}
	return &collector{
		q:          q,
		lastEpoch:  -1,
		tasks:      d("harvest_tasks", "Tasks of the jobs still stored, by owner and state (waiting = the user's queue depth).", []string{"user", "state"}, nil),
		requeued:   d("harvest_tasks_requeued", "Hand-outs beyond a task's first (retries and requeues), over the tasks still stored.", nil, nil),
		lost:       d("harvest_lost_task_seconds_total", "Run time of the task attempts interrupted since the queue started: work lost to pilots that ended under their tasks (cancelled, preempted, at their limit).", nil, nil),
		priority:   d("harvest_user_computed_priority", "The user's fair-share computedPriority (-1 = over quota, gets no tasks).", []string{"user"}, nil),
		running:    d("harvest_user_running_cores", "Cores the user's tasks run on now.", []string{"user"}, nil),
		maxCores:   d("harvest_user_max_cores", "The user's quota of cores running at once.", []string{"user"}, nil),
		cpu:        d("harvest_user_cpu_seconds_24h", "CPU seconds the user used in the last 24 h.", []string{"user"}, nil),
		cost:       d("harvest_user_cost_24h", "Cost (cores x seconds x price) the user used in the last 24 h.", []string{"user"}, nil),
		epoch:      d("harvest_master_epoch", "Epoch of the master lease of the site that hosts the queue (each new master increments it; other sites: harvest_site_master_epoch).", nil, nil),
		alive:      d("harvest_master_alive", "1 if a master of the site that hosts the queue holds an unexpired lease.", nil, nil),
		failovers:  d("harvest_master_failovers_total", "Master changes of the site that hosts the queue seen by this process (epoch increments after the first master it saw).", nil, nil),
		errs:       d("harvest_queue_scrape_errors_total", "Scrapes that could not read the queue.", nil, nil),
		writeTx:    d("harvest_queue_write_transaction_seconds", "Time each write transaction of the queue's SQLite writer held the write lock (every request that writes waits for it), since the queue opened.", nil, nil),
		slowWrites: d("harvest_queue_write_transactions_slow_total", "Write transactions that held the lock over 5 ms (a request waiting behind one waits that long).", nil, nil),
		slowBy:     d("harvest_queue_write_transactions_slow_by_method_total", "The write transactions over 5 ms by the queue's store method that ran them.", []string{"method"}, nil),
		walBytes:   d("harvest_queue_wal_bytes", "Size of the queue database's WAL file (checkpointed every second from a connection of its own, emptied past 64 MiB).", nil, nil),
		site: siteDescs{
			alive:         d("harvest_site_alive", "1 if the site's agent or master called the queue within the silence timeout (harvest admin sites).", site, nil),
			agentAt:       d("harvest_site_agent_last_round_timestamp_seconds", "Wall-clock time of the site's agent's last round with the queue (absent: none since the queue started).", site, nil),
			masterAt:      d("harvest_site_master_last_call_timestamp_seconds", "Wall-clock time of the site's master's last call to the queue (absent: none since the queue started).", site, nil),
			masterAlive:   d("harvest_site_master_alive", "1 if a master of the site's pilots holds an unexpired lease.", site, nil),
			epoch:         d("harvest_site_master_epoch", "Epoch of the site's master lease (each new master increments it).", site, nil),
			weight:        d("harvest_site_weight", "The site's weight in the split of the waiting tasks (from its turnaround relative to the other sites').", site, nil),
			share:         d("harvest_site_waiting_tasks", "The site's share of the waiting tasks: what its agent sizes its pilots by.", site, nil),
			running:       d("harvest_site_running_tasks", "Tasks the site's pool holds now.", site, nil),
			allowance:     d("harvest_site_allowance_tasks", "The most tasks the site's pool may hold (-1 = no limit).", site, nil),
			nodes:         d("harvest_site_pilot_nodes", "Pilot nodes the site's agent reported at its last round: held (its pilots, running or queued) and idle (its cluster's idle nodes).", []string{"site", "state"}, nil),
			maxNodes:      d("harvest_site_max_nodes", "The cap of pilot nodes the site's agent applies (the admin's, the global cap's part and the master's capacity; 0 = none).", site, nil),
			paused:        d("harvest_site_paused", "1 while the site gets no new pilots (paused by the admin, or told to hold none).", site, nil),
			pilotSeconds:  d("harvest_site_pilot_seconds_total", "Node seconds of pilots the site's agent reported holding, since the queue started.", site, nil),
			usefulSeconds: d("harvest_site_useful_seconds_total", "Run time of the tasks done at the site, since the queue started (over harvest_site_pilot_seconds_total: the site's yield).", site, nil),
			outcomes:      d("harvest_site_tasks_total", "Task attempts that ended at the site since the queue started, by outcome (done, failed, interrupted).", []string{"site", "outcome"}, nil),
		},
	}
}

func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	s := c.site
	for _, d := range []*prometheus.Desc{c.tasks, c.requeued, c.lost, c.priority, c.running, c.maxCores, c.cpu, c.cost, c.epoch, c.alive, c.failovers, c.errs,
		c.writeTx, c.slowWrites, c.slowBy, c.walBytes,
		s.alive, s.agentAt, s.masterAt, s.masterAlive, s.epoch, s.weight, s.share, s.running, s.allowance, s.nodes, s.maxNodes, s.paused,
		s.pilotSeconds, s.usefulSeconds, s.outcomes} {
		ch <- d
	}
}

func (c *collector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), scrapeTimeout)
	defer cancel()
	users, uerr := c.q.Users(ctx)
	st, serr := c.q.Stats(ctx)
	sites, sterr := c.q.Sites(ctx)

	c.mu.Lock()
	if uerr != nil || serr != nil || sterr != nil {
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

	counter(ch, c.failovers, failovers)
	counter(ch, c.errs, errs)
	if uerr == nil {
		for _, u := range users {
			gauge(ch, c.priority, u.ComputedPriority, u.Name)
			gauge(ch, c.running, float64(u.RunningCores), u.Name)
			gauge(ch, c.maxCores, float64(u.MaxCores), u.Name)
			gauge(ch, c.cpu, u.CPUTime24h, u.Name)
			gauge(ch, c.cost, u.Cost24h, u.Name)
		}
	}
	if serr == nil {
		c.collectStats(ch, st)
	}
	if sterr == nil {
		c.collectSites(ch, sites)
	}
}

func (c *collector) collectStats(ch chan<- prometheus.Metric, st queue.Stats) {
	for user, t := range st.ByUser {
		gauge(ch, c.tasks, float64(t.Waiting), user, "waiting")
		gauge(ch, c.tasks, float64(t.Running), user, "running")
		gauge(ch, c.tasks, float64(t.Done), user, "done")
		gauge(ch, c.tasks, float64(t.Failed), user, "failed")
		gauge(ch, c.tasks, float64(t.Killed), user, "killed")
	}
	gauge(ch, c.requeued, float64(st.Requeued))
	counter(ch, c.lost, st.LostTaskSeconds)
	gauge(ch, c.epoch, float64(st.Epoch))
	gauge(ch, c.alive, b2f(st.MasterAlive))
	ch <- prometheus.MustNewConstHistogram(c.writeTx, uint64(st.WriteTransactions), st.WriteLockSeconds, writeBuckets(st.WriteHist))
	counter(ch, c.slowWrites, float64(st.SlowWrites))
	for m, n := range st.SlowWritesBy {
		counter(ch, c.slowBy, float64(n), strings.TrimPrefix(m, "store.(*Store)."))
	}
	gauge(ch, c.walBytes, float64(st.WALBytes))
}

// writeBounds are the histogram's upper bounds, in seconds.
var writeBounds = []float64{0.00025, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05}

// writeBuckets turns the store's fine histogram (buckets of
// txstats.HistBucket, the last open-ended) into Prometheus's cumulative
// counts at writeBounds.
func writeBuckets(hist []int64) map[float64]uint64 {
	out := make(map[float64]uint64, len(writeBounds))
	for _, b := range writeBounds {
		var n uint64
		for i, c := range hist {
			// bucket i holds [i, i+1) x HistBucket; the last one is open
			if i < len(hist)-1 && float64(i+1)*txstats.HistBucket.Seconds() <= b+1e-12 {
				n += uint64(c)
			}
		}
		out[b] = n
	}
	return out
}

func (c *collector) collectSites(ch chan<- prometheus.Metric, l api.SiteList) {
	d := c.site
	for _, s := range l.Sites {
		gauge(ch, d.alive, b2f(s.Alive), s.Name)
		if s.AgentAt > 0 {
			gauge(ch, d.agentAt, float64(s.AgentAt), s.Name)
		}
		if s.MasterAt > 0 {
			gauge(ch, d.masterAt, float64(s.MasterAt), s.Name)
		}
		gauge(ch, d.masterAlive, b2f(s.Master != ""), s.Name)
		gauge(ch, d.epoch, float64(s.Epoch), s.Name)
		gauge(ch, d.weight, s.Weight, s.Name)
		gauge(ch, d.share, float64(s.Share), s.Name)
		gauge(ch, d.running, float64(s.Running), s.Name)
		gauge(ch, d.allowance, float64(s.Allowance), s.Name)
		gauge(ch, d.nodes, float64(s.Held), s.Name, "held")
		gauge(ch, d.nodes, float64(s.Idle), s.Name, "idle")
		gauge(ch, d.maxNodes, float64(s.EffectiveMax), s.Name)
		gauge(ch, d.paused, b2f(s.Paused), s.Name)
		counter(ch, d.pilotSeconds, s.PilotHours*3600, s.Name)
		counter(ch, d.usefulSeconds, s.UsefulHours*3600, s.Name)
		counter(ch, d.outcomes, float64(s.Done), s.Name, "done")
		counter(ch, d.outcomes, float64(s.Failed), s.Name, "failed")
		counter(ch, d.outcomes, float64(s.Interrupted), s.Name, "interrupted")
	}
}

func gauge(ch chan<- prometheus.Metric, d *prometheus.Desc, v float64, lv ...string) {
	ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, lv...)
}

func counter(ch chan<- prometheus.Metric, d *prometheus.Desc, v float64, lv ...string) {
	ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, v, lv...)
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
