package web

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/harvest-hpc/harvest/agent"
	"github.com/harvest-hpc/harvest/agent/policy"
	"github.com/harvest-hpc/harvest/cluster"
	"github.com/harvest-hpc/harvest/pilotproto"
	"github.com/harvest-hpc/harvest/queue"
	"github.com/harvest-hpc/harvest/queue/api"
)

// fakeQueue is a Queue with closure fields; tokens maps a bearer token to
// "name/role".
type fakeQueue struct {
	tokens  map[string]string
	jobs    func(f queue.ListFilter) (api.JobList, error)
	users   func() ([]api.User, error)
	revoked []string
}

var _ Queue = (*fakeQueue)(nil)

var errUnauth = fmt.Errorf("%w: invalid token", api.ErrUnauthorized)

func (f *fakeQueue) lookup(tok string) (string, string, error) {
	v, ok := f.tokens[tok]
	if !ok {
		return "", "", errUnauth
	}
	n, r, _ := strings.Cut(v, "/")
	return n, r, nil
}

func (f *fakeQueue) Authenticate(r *http.Request) (string, string, error) {
	tok, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !ok {
		return "", "", fmt.Errorf("%w: missing bearer token", api.ErrUnauthorized)
	}
	return f.lookup(tok)
}
func (f *fakeQueue) AuthenticateToken(r *http.Request, tok string) (string, string, error) {
	return f.lookup(tok)
}
func (f *fakeQueue) WriteError(w http.ResponseWriter, err error) {
	writeErr(w, err)
}
func (f *fakeQueue) Users(context.Context) ([]api.User, error) { return f.users() }
func (f *fakeQueue) ListJobs(_ context.Context, lf queue.ListFilter) (api.JobList, error) {
	return f.jobs(lf)
}
func (f *fakeQueue) PilotStatus() map[string]pilotproto.PilotStatus {
	return map[string]pilotproto.PilotStatus{"p2": {PilotID: "p2", Busy: true, Deadline: 1_000_900, Confinement: "yes (Landlock ABI 7)"}}
}
func (f *fakeQueue) Sites(context.Context) (api.SiteList, error) {
	return api.SiteList{Sites: []api.Site{
		{Name: "local", PilotHours: 4, UsefulHours: 3.4, Done: 120, Failed: 2, Interrupted: 5},
		{Name: "b", PilotHours: 0},
	}}, nil
}
func (f *fakeQueue) Stats(context.Context) (queue.Stats, error) {
	return queue.Stats{LostTaskSeconds: 95}, nil
}
func (f *fakeQueue) RotateTokens(_ context.Context, user, role string) (api.Token, int, error) {
	if user == "" {
		return api.Token{}, 0, fmt.Errorf("%w: user name is empty", api.ErrInvalid)
	}
	f.revoked = append(f.revoked, user+"/"+role)
	return api.Token{User: user, Role: role, Token: "hv_new"}, 2, nil
}

type fakeRounds struct{ res *agent.RoundResult }

func (f fakeRounds) Last() (agent.RoundResult, bool) {
	if f.res == nil {
		return agent.RoundResult{}, false
	}
	return *f.res, true
}

func testRound() *agent.RoundResult {
	s := cluster.Snapshot{Now: 1_000_000, TotalNodes: 6, IdleNodes: 1, Jobs: []cluster.Job{
		{ID: "f1", State: cluster.Running, Nodes: 2, TimeLimit: 3600, RunTime: 60},
		{ID: "p1", State: cluster.Running, Nodes: 1, TimeLimit: 1200, RunTime: 200, Pilot: true, NodeList: "n3"},
		{ID: "p2", State: cluster.Running, Nodes: 1, TimeLimit: cluster.Unlimited, RunTime: 100, Pilot: true, Busy: true, NodeList: "n4"},
		{ID: "p3", State: cluster.Pending, Nodes: 1, TimeLimit: 600, Pilot: true},
		{ID: "f2", State: cluster.Pending, Nodes: 4, TimeLimit: 600},
	}}
	d := policy.Decision{Case: policy.CaseFillHole, Reason: "no foreign job can use the hole: submitting 1 pilot", Submit: &policy.Submit{Count: 1, TimeLimit: 840},
		TopJob: "f2", MaxTime: 960, Release: []string{}}
	return &agent.RoundResult{Snapshot: s, Decision: d}
}

func newServer(t *testing.T, round *agent.RoundResult) (http.Handler, *fakeQueue, *agent.Control) {
	t.Helper()
	q := &fakeQueue{
		tokens: map[string]string{"alice-tok": "alice/user", "admin-tok": "ops/admin", "pilot-tok": "pilot/pilot"},
		jobs: func(f queue.ListFilter) (api.JobList, error) {
			all := []api.Job{
				{ID: 7, Owner: "alice", Name: "genomes", State: api.JobRunning, Tasks: api.TaskCounts{Total: 40, Done: 10, Running: 2, Waiting: 28}},
				{ID: 8, Owner: "bob", Name: "frames", State: api.JobWaiting, Tasks: api.TaskCounts{Total: 5, Waiting: 5}},
			}
			out := api.JobList{}
			for _, j := range all {
				if f.Owner == "" || j.Owner == f.Owner {
					out.Jobs = append(out.Jobs, j)
				}
			}
			return out, nil
		},
		users: func() ([]api.User, error) {
			return []api.User{{Name: "alice", Priority: 1, ComputedPriority: 10.4, MaxCores: 20, RunningCores: 2},
				{Name: "bob", Priority: 1, ComputedPriority: -1, MaxCores: 20, RunningCores: 20}}, nil
		},
	}
	ctl, err := agent.OpenControl(filepath.Join(t.TempDir(), "control.json"), nil)
	if err != nil {
		t.Fatal(err)
	}
	hist := NewHistory(100)
	for i := int64(0); i < 10; i++ {
		hist.Add(Sample{T: 1_000_000 - 3600 + i*360, Total: 6, Foreign: 2, Held: 3, Useful: 1})
	}
	cfg := DefaultConfig()
	cfg.Queue, cfg.Rounds, cfg.Control, cfg.History = q, fakeRounds{round}, ctl, hist
	cfg.Metrics = agent.NewMetrics(nil)
	cfg.Now = func() time.Time { return time.Unix(1_000_030, 0) }
	cfg.GiveBack = "preemption: pilots above the floor run in partition harvest"
	cfg.Adapter, cfg.StateDir, cfg.DumpDir = "slurm", "/var/lib/harvest", "/var/lib/harvest/snapshots"
	apiH := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusTeapot) })
	h, err := Handler(cfg, apiH)
	if err != nil {
		t.Fatal(err)
	}
	return h, q, ctl
}

func do(h http.Handler, method, path, token, body string, cookies ...*http.Cookie) *http.Response {
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req := httptest.NewRequest(method, path, rd)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	for _, c := range cookies {
		req.AddCookie(c)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec.Result()
}

func text(r *http.Response) string {
	b, _ := io.ReadAll(r.Body)
	return string(b)
}

func TestTheStatusPageShowsWhatTheAgentSees(t *testing.T) {
	h, _, _ := newServer(t, testRound())
	tests := []struct {
		name, token string
		want, not   []string
	}{
		{
			name:  "an admin sees pilots with deadlines, the decision, every job and the users",
			token: "admin-tok",
			want: []string{"signed in as <b>ops</b> (admin)", "give-back: preemption: pilots above the floor run in partition harvest",
				"submit 1 pilot(s), time limit 14m00s", "fill-hole", "no foreign job can use the hole",
				// p1 started at 1_000_000-200 with a 20 min limit: deadline 1_001_000.
				"<td>p1</td><td class=\"idle\">idle</td><td>n3</td>", clock(1_001_000), "16m40s",
				// p2 is unlimited but the master reported its deadline.
				"<td>p2</td><td class=\"busy\">busy</td>", clock(1_000_900),
				// Whether a pilot's tasks run confined, as its worker said (issue 13).
				"<th>Tasks confined</th>", "<td>yes (Landlock ABI 7)</td>",
				"<td>p3</td><td class=\"queued\">queued</td>",
				"genomes", "25%", "frames", "over quota", "10.400",
				// The admin's dashboard: harm, work lost, yield per site.
				`<b id="delayed-now">0</b> foreign jobs waiting now`, `<b id="lost-work">1m35s</b> of task time lost to give-back (5 interrupted attempts`,
				`<tr><td>local</td><td class="num">4.00</td><td class="num">3.40</td><td class="num">85%</td><td class="num">120</td>`,
				`<tr><td>b</td><td class="num">0.00</td><td class="num">0.00</td><td class="num">-</td>`, `<svg id="chart" role="img" aria-label="node utilisation over time" style="background:#fff;border:1px solid #ccc" xmlns="http://www.w3.org/2000/svg" width="720" height="160"`, `<path fill="#8a9bb0" d="M`},
		},
		{
			name:  "a user sees only their own jobs, as in the API",
			token: "alice-tok",
			want:  []string{"signed in as <b>alice</b> (user)", "genomes", "Harvest jobs (yours)"},
			not:   []string{"frames", `id="harm"`, `id="yield"`},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			resp := do(h, "GET", "/status", tc.token, "")
			body := text(resp)
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("status %d: %s", resp.StatusCode, body)
			}
			for _, w := range tc.want {
				if !strings.Contains(body, w) {
					t.Errorf("page lacks %q", w)
				}
			}
			for _, n := range tc.not {
				if strings.Contains(body, n) {
					t.Errorf("page shows %q", n)
				}
			}
		})
	}
}

func TestTheDashboardShowsTheJobsWaitingForPilotsNodes(t *testing.T) {
	d := BuildDashboard(DashboardInputs{
		Harm: agent.Harm{Now: 1000, Waiting: []agent.DelayedJob{{ID: "42", Since: 880}, {ID: "43", Since: 990}},
			Started: 3, TotalDelay: 75, MaxDelay: 61, MaxDelayJob: "17", Unobserved: 1},
		LostTaskSeconds: 7200,
	})
	want := Dashboard{DelayedNow: 2, LongestNow: "2m00s", LongestNowJob: "42", Delayed: 3, TotalDelay: "1m15s", MaxDelay: "1m01s", MaxDelayJob: "17",
		Unobserved: 1, LostWork: "2h00m"}
	if !reflect.DeepEqual(*d, want) {
		t.Errorf("dashboard = %+v\nwant        %+v", *d, want)
	}
	if d := BuildDashboard(DashboardInputs{}); d.DelayedNow != 0 || d.LongestNow != "-" || d.MaxDelay != "-" || d.LostWork != "0s" {
		t.Errorf("an agent that delayed nobody shows %+v", *d)
	}
}

func TestTheStatusPageBeforeTheFirstRoundSaysSo(t *testing.T) {
	h, _, _ := newServer(t, nil)
	body := text(do(h, "GET", "/status", "alice-tok", ""))
	if !strings.Contains(body, `id="noround"`) || !strings.Contains(body, "no pilots") {
		t.Errorf("page without a round:\n%s", body)
	}
}

func TestStatusPageAuthentication(t *testing.T) {
	h, _, _ := newServer(t, testRound())
	t.Run("without a token the page is refused with a hint", func(t *testing.T) {
		resp := do(h, "GET", "/status", "", "")
		if body := text(resp); resp.StatusCode != http.StatusUnauthorized || !strings.Contains(body, "?token=") {
			t.Fatalf("got %d: %s", resp.StatusCode, body)
		}
	})
	t.Run("the pilot token does not open the page", func(t *testing.T) {
		if resp := do(h, "GET", "/status", "pilot-tok", ""); resp.StatusCode != http.StatusForbidden {
			t.Fatalf("got %d", resp.StatusCode)
		}
	})
	t.Run("a bad token in the address is refused and sets no cookie", func(t *testing.T) {
		resp := do(h, "GET", "/status?token=nope", "", "")
		if resp.StatusCode != http.StatusUnauthorized || len(resp.Cookies()) != 0 {
			t.Fatalf("got %d, cookies %v", resp.StatusCode, resp.Cookies())
		}
	})
	t.Run("the pilot token in the address is refused and sets no cookie", func(t *testing.T) {
		// It was kept in the browser's cookie, then refused at the redirect.
		resp := do(h, "GET", "/status?token=pilot-tok", "", "")
		if resp.StatusCode != http.StatusForbidden || len(resp.Cookies()) != 0 {
			t.Fatalf("got %d, cookies %v", resp.StatusCode, resp.Cookies())
		}
	})
	t.Run("a token in the address becomes an HttpOnly cookie and leaves the address", func(t *testing.T) {
		resp := do(h, "GET", "/status?token=alice-tok", "", "")
		if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/status" {
			t.Fatalf("got %d to %q", resp.StatusCode, resp.Header.Get("Location"))
		}
		cs := resp.Cookies()
		if len(cs) != 1 || !cs[0].HttpOnly || cs[0].Value != "alice-tok" || cs[0].SameSite != http.SameSiteStrictMode {
			t.Fatalf("cookies %+v", cs)
		}
		again := do(h, "GET", "/status", "", "", cs[0])
		if body := text(again); again.StatusCode != http.StatusOK || !strings.Contains(body, "alice") {
			t.Fatalf("with the cookie: %d", again.StatusCode)
		}
	})
	t.Run("the cookie does not authenticate the admin endpoints", func(t *testing.T) {
		resp := do(h, "GET", "/v1/admin/harvest", "", "", &http.Cookie{Name: cookieName, Value: "admin-tok"})
		if resp.StatusCode != http.StatusUnauthorized {
			t.Fatalf("got %d", resp.StatusCode)
		}
	})
	t.Run("everything else goes to the queue's API", func(t *testing.T) {
		if resp := do(h, "GET", "/v1/jobs", "alice-tok", ""); resp.StatusCode != http.StatusTeapot {
			t.Fatalf("got %d", resp.StatusCode)
		}
	})
}

func TestAdminEndpoints(t *testing.T) {
	h, q, ctl := newServer(t, testRound())
	tests := []struct {
		name, method, path, token, body string
		wantStatus                      int
		wantPaused                      bool
	}{
		{"a user may not pause harvesting", "PUT", "/v1/admin/harvest", "alice-tok", `{"paused": true}`, http.StatusForbidden, false},
		{"a body without paused is refused", "PUT", "/v1/admin/harvest", "admin-tok", `{}`, http.StatusBadRequest, false},
		{"an unknown field is refused", "PUT", "/v1/admin/harvest", "admin-tok", `{"paused": true, "pasued": 1}`, http.StatusBadRequest, false},
		{"an admin pauses harvesting", "PUT", "/v1/admin/harvest", "admin-tok", `{"paused": true}`, http.StatusOK, true},
		{"an admin resumes harvesting", "PUT", "/v1/admin/harvest", "admin-tok", `{"paused": false}`, http.StatusOK, false},
		{"a drain pauses", "POST", "/v1/admin/drain", "admin-tok", `{"now": true}`, http.StatusOK, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			resp := do(h, tc.method, tc.path, tc.token, tc.body)
			body := text(resp)
			if resp.StatusCode != tc.wantStatus {
				t.Fatalf("got %d: %s", resp.StatusCode, body)
			}
			if ctl.Paused() != tc.wantPaused {
				t.Fatalf("paused = %v, want %v", ctl.Paused(), tc.wantPaused)
			}
		})
	}
	var st api.HarvestState
	json.Unmarshal([]byte(text(do(h, "GET", "/v1/admin/harvest", "admin-tok", ""))), &st)
	if st.Drain == nil || !st.Drain.Now || st.Drain.Remaining != -1 {
		t.Errorf("state after the drain: %+v", st)
	}

	resp := do(h, "POST", "/v1/admin/tokens/rotate", "admin-tok", `{"user": "alice"}`)
	var rot api.TokenRotation
	if err := json.Unmarshal([]byte(text(resp)), &rot); err != nil || resp.StatusCode != 200 {
		t.Fatalf("rotate: %d %v", resp.StatusCode, err)
	}
	if rot.Token.Token != "hv_new" || rot.Revoked != 2 || len(q.revoked) != 1 || q.revoked[0] != "alice/user" {
		t.Errorf("rotation %+v, revoked %v", rot, q.revoked)
	}
	if resp := do(h, "POST", "/v1/admin/tokens/rotate", "admin-tok", `{"user": "alice", "role": "pilot"}`); resp.StatusCode != http.StatusBadRequest {
		t.Errorf("rotating a pilot role over HTTP: %d, want 400", resp.StatusCode)
	}

	// Where the agent keeps its files, for harvest explain: admins only.
	var info api.AgentInfo
	if resp := do(h, "GET", api.PathAgent, "admin-tok", ""); resp.StatusCode != 200 || json.Unmarshal([]byte(text(resp)), &info) != nil ||
		info != (api.AgentInfo{Adapter: "slurm", StateDir: "/var/lib/harvest", DumpDir: "/var/lib/harvest/snapshots"}) {
		t.Errorf("agent info: %d %+v", resp.StatusCode, info)
	}
	if resp := do(h, "GET", api.PathAgent, "alice-tok", ""); resp.StatusCode != http.StatusForbidden {
		t.Errorf("agent info for a user: %d, want 403", resp.StatusCode)
	}
}

func TestMetricsNeedATokenUnlessAnonymous(t *testing.T) {
	h, _, _ := newServer(t, testRound())
	if resp := do(h, "GET", "/metrics", "", ""); resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("anonymous scrape: %d, want 401", resp.StatusCode)
	}
	resp := do(h, "GET", "/metrics", "alice-tok", "")
	if body := text(resp); resp.StatusCode != 200 || !strings.Contains(body, "harvest_rounds_total") {
		t.Errorf("scrape with a token: %d", resp.StatusCode)
	}
}

func TestHistoryKeepsTheLastSamplesInOrder(t *testing.T) {
	h := NewHistory(3)
	for i := int64(1); i <= 5; i++ {
		h.Add(Sample{T: i})
	}
	got := h.Since(0)
	if len(got) != 3 || got[0].T != 3 || got[2].T != 5 {
		t.Fatalf("got %+v, want T 3, 4, 5", got)
	}
	if got := h.Since(5); len(got) != 1 {
		t.Fatalf("since 5: %+v", got)
	}
}

func TestBuildChart(t *testing.T) {
	tests := []struct {
		name                 string
		samples              []Sample
		from, to             int64
		wantEmpty            bool
		wantForeign, wantUse int
		wantForeignPath      string
	}{
		{name: "no samples draw nothing", from: 0, to: 100, wantEmpty: true},
		{
			name:    "two halves: half the node-time foreign, then pilots with tasks",
			samples: []Sample{{T: 0, Total: 4, Foreign: 4}, {T: 50, Total: 4, Useful: 4, Held: 4}},
			from:    0, to: 100, wantForeign: 50, wantUse: 50,
			wantForeignPath: `<path fill="#8a9bb0" d="M0.0,0.0 L50.0,0.0 L50.0,40.0 L100.0,40.0 L100.0,40.0 L50.0,40.0 L50.0,40.0 L0.0,40.0 Z"/>`,
		},
		{
			name:    "a sample before the window holds at its start",
			samples: []Sample{{T: -50, Total: 2, Foreign: 1}, {T: 50, Total: 2, Foreign: 2}},
			from:    0, to: 100, wantForeign: 75,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := BuildChart(tc.samples, tc.from, tc.to, 100, 40)
			if c.Empty != tc.wantEmpty {
				t.Fatalf("empty = %v", c.Empty)
			}
			if c.ForeignPct != tc.wantForeign || c.UsefulPct != tc.wantUse {
				t.Errorf("foreign %d%% useful %d%%, want %d%% %d%%", c.ForeignPct, c.UsefulPct, tc.wantForeign, tc.wantUse)
			}
			if tc.wantForeignPath != "" && !strings.Contains(string(c.SVG), tc.wantForeignPath) {
				t.Errorf("chart %s\nlacks the foreign band %s", c.SVG, tc.wantForeignPath)
			}
		})
	}
}

func TestHandlerRefusesAnIncompleteConfig(t *testing.T) {
	if _, err := Handler(DefaultConfig(), http.NotFoundHandler()); err == nil {
		t.Fatal("accepted a config without queue")
	}
}
