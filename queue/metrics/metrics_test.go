package metrics_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/harvest-hpc/harvest/pilotproto"
	"github.com/harvest-hpc/harvest/queue"
	"github.com/harvest-hpc/harvest/queue/api"
	"github.com/harvest-hpc/harvest/queue/httpapi"
	"github.com/harvest-hpc/harvest/queue/metrics"
	"github.com/harvest-hpc/harvest/queue/queuetest"
	"github.com/harvest-hpc/harvest/queue/txstats"
)

// fakeQueue is a metrics.Queue with closure fields.
type fakeQueue struct {
	users func() ([]api.User, error)
	stats func() (queue.Stats, error)
	sites func() (api.SiteList, error)
}

var _ metrics.Queue = (*fakeQueue)(nil)

func (f *fakeQueue) Users(context.Context) ([]api.User, error)   { return f.users() }
func (f *fakeQueue) Stats(context.Context) (queue.Stats, error)  { return f.stats() }
func (f *fakeQueue) Sites(context.Context) (api.SiteList, error) { return f.sites() }

func noSites() (api.SiteList, error) { return api.SiteList{}, nil }

func TestQueueMetricsAreReadAtScrapeTime(t *testing.T) {
	epoch := int64(3)
	q := &fakeQueue{
		users: func() ([]api.User, error) {
			return []api.User{
				{Name: "alice", ComputedPriority: 9.5, RunningCores: 4, MaxCores: 20, CPUTime24h: 7200, Cost24h: 7200},
				{Name: "bob", ComputedPriority: -1, RunningCores: 20, MaxCores: 20},
			}, nil
		},
		stats: func() (queue.Stats, error) {
			return queue.Stats{
				ByUser:   map[string]queue.TaskStats{"alice": {Waiting: 12, Running: 4, Done: 30, Failed: 1}},
				Requeued: 5, Epoch: epoch, MasterAlive: true,
				WriteTransactions: 1200, WriteLockSeconds: 0.75, SlowWrites: 2,
				// 1000 under 0.25 ms, 150 in 0.5-0.75 ms, 48 in 2-2.25 ms, 2 over 50 ms
				WriteHist:    histOf(map[int]int64{0: 1000, 2: 150, 8: 48, 199: 2}),
				SlowWritesBy: map[string]int64{"store.(*Store).Results": 1, "store.(*Store).Pull": 1},
				WALBytes:     9 << 20,
			}, nil
		},
		sites: noSites,
	}
	reg := metrics.NewRegistry(q)
	want := `
# HELP harvest_master_epoch Epoch of the master lease of the site that hosts the queue (each new master increments it; other sites: harvest_site_master_epoch).
# TYPE harvest_master_epoch gauge
harvest_master_epoch 3
# HELP harvest_tasks_requeued Hand-outs beyond a task's first (retries and requeues), over the tasks still stored.
# TYPE harvest_tasks_requeued gauge
harvest_tasks_requeued 5
# HELP harvest_user_computed_priority The user's fair-share computedPriority (-1 = over quota, gets no tasks).
# TYPE harvest_user_computed_priority gauge
harvest_user_computed_priority{user="alice"} 9.5
harvest_user_computed_priority{user="bob"} -1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "harvest_master_epoch", "harvest_tasks_requeued", "harvest_user_computed_priority"); err != nil {
		t.Error(err)
	}
	waiting := `
# HELP harvest_tasks Tasks of the jobs still stored, by owner and state (waiting = the user's queue depth).
# TYPE harvest_tasks gauge
harvest_tasks{state="done",user="alice"} 30
harvest_tasks{state="failed",user="alice"} 1
harvest_tasks{state="killed",user="alice"} 0
harvest_tasks{state="running",user="alice"} 4
harvest_tasks{state="waiting",user="alice"} 12
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(waiting), "harvest_tasks"); err != nil {
		t.Error(err)
	}
	writes := `
# HELP harvest_queue_write_transaction_seconds Time each write transaction of the queue's SQLite writer held the write lock (every request that writes waits for it), since the queue opened.
# TYPE harvest_queue_write_transaction_seconds histogram
harvest_queue_write_transaction_seconds_bucket{le="0.00025"} 1000
harvest_queue_write_transaction_seconds_bucket{le="0.0005"} 1000
harvest_queue_write_transaction_seconds_bucket{le="0.001"} 1150
harvest_queue_write_transaction_seconds_bucket{le="0.002"} 1150
harvest_queue_write_transaction_seconds_bucket{le="0.005"} 1198
harvest_queue_write_transaction_seconds_bucket{le="0.01"} 1198
harvest_queue_write_transaction_seconds_bucket{le="0.025"} 1198
harvest_queue_write_transaction_seconds_bucket{le="0.05"} 1198
harvest_queue_write_transaction_seconds_bucket{le="+Inf"} 1200
harvest_queue_write_transaction_seconds_sum 0.75
harvest_queue_write_transaction_seconds_count 1200
# HELP harvest_queue_write_transactions_slow_total Write transactions that held the lock over 5 ms (a request waiting behind one waits that long).
# TYPE harvest_queue_write_transactions_slow_total counter
harvest_queue_write_transactions_slow_total 2
# HELP harvest_queue_write_transactions_slow_by_method_total The write transactions over 5 ms by the queue's store method that ran them.
# TYPE harvest_queue_write_transactions_slow_by_method_total counter
harvest_queue_write_transactions_slow_by_method_total{method="Pull"} 1
harvest_queue_write_transactions_slow_by_method_total{method="Results"} 1
# HELP harvest_queue_wal_bytes Size of the queue database's WAL file (checkpointed every second from a connection of its own, emptied past 64 MiB).
# TYPE harvest_queue_wal_bytes gauge
harvest_queue_wal_bytes 9.437184e+06
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(writes), "harvest_queue_write_transaction_seconds", "harvest_queue_write_transactions_slow_total", "harvest_queue_write_transactions_slow_by_method_total", "harvest_queue_wal_bytes"); err != nil {
		t.Error(err)
	}

	// The first epoch seen is not a failover; two new masters later are.
	epoch = 5
	failovers := func() string {
		return fmt.Sprintf(`
# HELP harvest_master_failovers_total Master changes of the site that hosts the queue seen by this process (epoch increments after the first master it saw).
# TYPE harvest_master_failovers_total counter
harvest_master_failovers_total %d
`, 2)
	}
	if err := testutil.GatherAndCompare(reg, strings.NewReader(failovers()), "harvest_master_failovers_total"); err != nil {
		t.Error(err)
	}
}

func TestAQueueThatCannotBeReadCountsAScrapeErrorAndStillServesTheRest(t *testing.T) {
	q := &fakeQueue{
		users: func() ([]api.User, error) { return nil, errors.New("database is locked") },
		stats: func() (queue.Stats, error) { return queue.Stats{}, errors.New("database is locked") },
		sites: func() (api.SiteList, error) { return api.SiteList{}, errors.New("database is locked") },
	}
	reg := metrics.NewRegistry(q)
	want := `
# HELP harvest_queue_scrape_errors_total Scrapes that could not read the queue.
# TYPE harvest_queue_scrape_errors_total counter
harvest_queue_scrape_errors_total 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "harvest_queue_scrape_errors_total"); err != nil {
		t.Error(err)
	}
}

// The per-site series say what `harvest admin sites` says, one series per
// site: a silent site, a master's lease and the yield are what a central
// queue's admin alerts on.
func TestSiteSeriesFollowTheSiteList(t *testing.T) {
	q := &fakeQueue{
		users: func() ([]api.User, error) { return nil, nil },
		stats: func() (queue.Stats, error) { return queue.Stats{}, nil },
		sites: func() (api.SiteList, error) {
			return api.SiteList{Sites: []api.Site{
				{Name: "a", Alive: true, AgentAt: 1_700_000_000, MasterAt: 1_700_000_005, Weight: 1.5, Share: 30, Running: 8, Allowance: -1,
					Held: 4, Idle: 2, EffectiveMax: 10, Epoch: 3, Master: "1042", PilotHours: 2, UsefulHours: 1.5, Done: 40, Failed: 2, Interrupted: 1},
				{Name: "b", Alive: false, Weight: 0.5, Allowance: 16, Paused: true, Epoch: 1},
			}}, nil
		},
	}
	reg := metrics.NewRegistry(q)
	want := `
# HELP harvest_site_alive 1 if the site's agent or master called the queue within the silence timeout (harvest admin sites).
# TYPE harvest_site_alive gauge
harvest_site_alive{site="a"} 1
harvest_site_alive{site="b"} 0
# HELP harvest_site_agent_last_round_timestamp_seconds Wall-clock time of the site's agent's last round with the queue (absent: none since the queue started).
# TYPE harvest_site_agent_last_round_timestamp_seconds gauge
harvest_site_agent_last_round_timestamp_seconds{site="a"} 1.7e+09
# HELP harvest_site_master_alive 1 if a master of the site's pilots holds an unexpired lease.
# TYPE harvest_site_master_alive gauge
harvest_site_master_alive{site="a"} 1
harvest_site_master_alive{site="b"} 0
# HELP harvest_site_allowance_tasks The most tasks the site's pool may hold (-1 = no limit).
# TYPE harvest_site_allowance_tasks gauge
harvest_site_allowance_tasks{site="a"} -1
harvest_site_allowance_tasks{site="b"} 16
# HELP harvest_site_pilot_nodes Pilot nodes the site's agent reported at its last round: held (its pilots, running or queued) and idle (its cluster's idle nodes).
# TYPE harvest_site_pilot_nodes gauge
harvest_site_pilot_nodes{site="a",state="held"} 4
harvest_site_pilot_nodes{site="a",state="idle"} 2
harvest_site_pilot_nodes{site="b",state="held"} 0
harvest_site_pilot_nodes{site="b",state="idle"} 0
# HELP harvest_site_paused 1 while the site gets no new pilots (paused by the admin, or told to hold none).
# TYPE harvest_site_paused gauge
harvest_site_paused{site="a"} 0
harvest_site_paused{site="b"} 1
# HELP harvest_site_useful_seconds_total Run time of the tasks done at the site, since the queue started (over harvest_site_pilot_seconds_total: the site's yield).
# TYPE harvest_site_useful_seconds_total counter
harvest_site_useful_seconds_total{site="a"} 5400
harvest_site_useful_seconds_total{site="b"} 0
# HELP harvest_site_tasks_total Task attempts that ended at the site since the queue started, by outcome (done, failed, interrupted).
# TYPE harvest_site_tasks_total counter
harvest_site_tasks_total{outcome="done",site="a"} 40
harvest_site_tasks_total{outcome="done",site="b"} 0
harvest_site_tasks_total{outcome="failed",site="a"} 2
harvest_site_tasks_total{outcome="failed",site="b"} 0
harvest_site_tasks_total{outcome="interrupted",site="a"} 1
harvest_site_tasks_total{outcome="interrupted",site="b"} 0
`
	names := []string{"harvest_site_alive", "harvest_site_agent_last_round_timestamp_seconds", "harvest_site_master_alive", "harvest_site_allowance_tasks",
		"harvest_site_pilot_nodes", "harvest_site_paused", "harvest_site_useful_seconds_total", "harvest_site_tasks_total"}
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), names...); err != nil {
		t.Error(err)
	}
	// Every series the collector describes is served, and only those.
	if n := testutil.CollectAndCount(metrics.NewCollector(q)); n != 43 {
		t.Errorf("%d series, want 43 (2 counters, 7 queue figures, 18 series of a and 16 of b, which has no timestamps)", n)
	}
}

// scrape serves reg as the queue serves it and GETs /metrics with token
// (empty: none): the status and the body.
func scrape(t *testing.T, h http.Handler, token string) (int, string) {
	t.Helper()
	srv := httptest.NewServer(h)
	defer srv.Close()
	req, err := http.NewRequest("GET", srv.URL+api.PathMetrics, nil)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// The real queue with two sites, scraped through the API's own
// authentication: users and admins read the figures, pilots, remote agents
// and strangers do not; what a site's pool did shows in its own series.
func TestARealQueueWithTwoSitesScrapedThroughItsAuthentication(t *testing.T) {
	e := queuetest.New(t, func(c *queue.Config) { c.LeaseTTL = time.Hour })
	ctx := context.Background()
	e.AddSite(t, "b", "b-pilot-token-0123456789abcdef0123456789")
	if _, err := e.Client("agent-b").AgentRound(ctx, api.AgentRound{Held: 3, Idle: 5}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.Q.Submit(ctx, "alice", api.JobSpec{Dataset: e.Dataset("ds", 5), Command: []string{"p"}, BatchSize: 1}); err != nil {
		t.Fatal(err)
	}
	// b's master takes its pool's lease, pulls three tasks and reports two
	// done and one failed.
	lb := e.Client("pilot-b")
	l, err := lb.Lease(ctx, pilotproto.LeaseRequest{PilotID: "7", Address: "http://b"})
	if err != nil || !l.Granted {
		t.Fatalf("b's lease: %+v %v", l, err)
	}
	p, err := lb.Pull(ctx, pilotproto.PullRequest{Epoch: l.Epoch, Max: 3})
	if err != nil || len(p.Tasks) != 3 {
		t.Fatalf("b's pull: %d tasks %v", len(p.Tasks), err)
	}
	var rs []pilotproto.Result
	for i, tk := range p.Tasks {
		st := pilotproto.StatusDone
		if i == 2 {
			st = pilotproto.StatusFailed
		}
		rs = append(rs, pilotproto.Result{TaskID: tk.ID, Attempt: tk.Attempt, Status: st, DurationMS: 2000})
	}
	if r, err := lb.Results(ctx, pilotproto.ResultsRequest{Epoch: l.Epoch, Results: rs}); err != nil || r.Applied != 3 {
		t.Fatalf("b's results: %+v %v", r, err)
	}

	srv := httpapi.New(e.Q, httpapi.DefaultConfig())
	mux := http.NewServeMux()
	mux.Handle(api.PathMetrics, metrics.Handler(metrics.NewRegistry(e.Q), srv, false))
	mux.Handle("/", srv.Handler())
	for who, status := range map[string]int{"": http.StatusUnauthorized, "nobody-token": http.StatusUnauthorized,
		"pilot-b": http.StatusForbidden, "agent-b": http.StatusForbidden, "pilot": http.StatusForbidden} {
		tok := e.Tokens[who]
		if tok == "" {
			tok = who
		}
		if got, body := scrape(t, mux, tok); got != status || !strings.Contains(body, `"code"`) {
			t.Errorf("scrape as %q: %d %s, want %d with a JSON error", who, got, body, status)
		}
	}
	for _, who := range []string{"alice", "admin"} {
		got, body := scrape(t, mux, e.Tokens[who])
		if got != http.StatusOK {
			t.Fatalf("scrape as %s: %d %s", who, got, body)
		}
		for _, line := range []string{
			`harvest_site_alive{site="b"} 1`,
			`harvest_site_master_alive{site="b"} 1`,
			`harvest_site_master_alive{site="local"} 0`,
			`harvest_site_master_epoch{site="b"} 1`,
			`harvest_site_pilot_nodes{site="b",state="held"} 3`,
			`harvest_site_pilot_nodes{site="b",state="idle"} 5`,
			`harvest_site_tasks_total{outcome="done",site="b"} 2`,
			`harvest_site_tasks_total{outcome="failed",site="b"} 1`,
			`harvest_site_useful_seconds_total{site="b"} 4`,
			`harvest_site_running_tasks{site="b"} 0`,
			`harvest_tasks{state="done",user="alice"} 2`,
			// The failed attempt counts at b; its task waits for a retry.
			`harvest_tasks{state="failed",user="alice"} 0`,
			`harvest_tasks{state="waiting",user="alice"} 3`,
			`harvest_master_alive 0`,
		} {
			if !strings.Contains(body, "\n"+line+"\n") {
				t.Errorf("scrape as %s: no line %q", who, line)
			}
		}
		if strings.Contains(body, "\nharvest_queue_write_transaction_seconds_count 0\n") || !strings.Contains(body, "\nharvest_queue_write_transaction_seconds_count ") {
			t.Errorf("scrape as %s: the submission's and the results' write transactions are not counted", who)
		}
		if !strings.Contains(body, "\nprocess_resident_memory_bytes ") || !strings.Contains(body, "\ngo_goroutines ") {
			t.Errorf("scrape as %s: no process or Go runtime figures", who)
		}
	}
	// Anything but GET (or HEAD) is the API's 405, even for an admin.
	req, _ := http.NewRequest("POST", "/metrics", nil)
	req.Header.Set("Authorization", "Bearer "+e.Tokens["admin"])
	rec := httptest.NewRecorder()
	mux.ServeHTTP(rec, req)
	if rec.Code != http.StatusMethodNotAllowed || rec.Header().Get("Allow") != "GET, HEAD" || !strings.Contains(rec.Body.String(), `"code"`) {
		t.Errorf("POST /metrics: %d %q, want 405 with Allow and a JSON error", rec.Code, rec.Body.String())
	}
	// Anonymous: for anybody, the same figures.
	anon := http.NewServeMux()
	anon.Handle(api.PathMetrics, metrics.Handler(metrics.NewRegistry(e.Q), srv, true))
	if got, body := scrape(t, anon, ""); got != http.StatusOK || !strings.Contains(body, `harvest_site_alive{site="b"} 1`) {
		t.Errorf("anonymous scrape: %d", got)
	}
}

// histOf is a txstats.Stats histogram with the given buckets' counts.
func histOf(c map[int]int64) []int64 {
	var h txstats.Stats
	for i, n := range c {
		h.Hist[i] = n
	}
	return h.Hist[:]
}
