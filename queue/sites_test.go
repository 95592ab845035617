package queue_test

import (
	"context"
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/harvest-hpc/harvest/pilotproto"
	"github.com/harvest-hpc/harvest/queue"
	"github.com/harvest-hpc/harvest/queue/api"
	"github.com/harvest-hpc/harvest/queue/queuetest"
)

// twoSites is a queue hosted by site "local" with a second site "b" whose
// agent registered and whose pilots hold the token bPilot.
func twoSites(t testing.TB, mods ...func(*queue.Config)) (*queuetest.Env, string) {
	t.Helper()
	e := queuetest.New(t, append([]func(*queue.Config){func(c *queue.Config) { c.LeaseTTL = time.Hour }}, mods...)...)
	const bPilot = "b-pilot-token-0123456789abcdef0123456789"
	e.AddSite(t, "b", bPilot)
	return e, bPilot
}

// master takes a pool's lease through the HTTP API as who and returns its epoch.
func master(t *testing.T, e *queuetest.Env, who, pilot string) int64 {
	t.Helper()
	l, err := e.Client(who).Lease(context.Background(), pilotproto.LeaseRequest{PilotID: pilot, Address: "http://" + who})
	if err != nil || !l.Granted {
		t.Fatalf("lease for %s: %+v %v", who, l, err)
	}
	return l.Epoch
}

// Pilots of two clusters form two pools: each has its own master and
// epochs (their batch systems both number pilots from 1), and the job
// shows where its tasks ran.
func TestTwoSitesRunOneJobInTwoPools(t *testing.T) {
	e, _ := twoSites(t)
	ctx := context.Background()
	j, err := e.Q.Submit(ctx, "alice", api.JobSpec{Dataset: e.Dataset("ds", 6), Command: []string{"p"}, BatchSize: 1})
	if err != nil {
		t.Fatal(err)
	}
	ea, eb := master(t, e, "pilot", "1"), master(t, e, "pilot-b", "1")
	if ea != 1 || eb != 1 {
		t.Fatalf("epochs %d %d, want 1 and 1 (one lease per pool)", ea, eb)
	}
	la, lb := e.Client("pilot"), e.Client("pilot-b")
	pa, err := la.Pull(ctx, pilotproto.PullRequest{Epoch: ea, Max: 4})
	if err != nil || len(pa.Tasks) != 4 {
		t.Fatalf("local pull: %d tasks %v", len(pa.Tasks), err)
	}
	pb, err := lb.Pull(ctx, pilotproto.PullRequest{Epoch: eb, Max: 4})
	if err != nil || len(pb.Tasks) != 2 {
		t.Fatalf("b's pull: %d tasks %v", len(pb.Tasks), err)
	}
	// b's master cannot report a's tasks.
	r, err := lb.Results(ctx, pilotproto.ResultsRequest{Epoch: eb, Results: []pilotproto.Result{{TaskID: pa.Tasks[0].ID, Attempt: 1, Status: pilotproto.StatusDone}}})
	if err != nil || r.Applied != 0 || r.Ignored != 1 {
		t.Fatalf("b reporting a's task: %+v %v", r, err)
	}
	done := func(c interface {
		Results(context.Context, pilotproto.ResultsRequest) (pilotproto.ResultsResponse, error)
	}, epoch int64, ts []pilotproto.Task) {
		var rs []pilotproto.Result
		for _, tk := range ts {
			rs = append(rs, pilotproto.Result{TaskID: tk.ID, Attempt: tk.Attempt, Status: pilotproto.StatusDone, DurationMS: 1000})
		}
		if r, err := c.Results(ctx, pilotproto.ResultsRequest{Epoch: epoch, Results: rs}); err != nil || r.Applied != len(ts) {
			t.Fatalf("results: %+v %v", r, err)
		}
	}
	done(la, ea, pa.Tasks)
	done(lb, eb, pb.Tasks)
	got, err := e.Client("alice").Job(ctx, j.ID)
	if err != nil || got.State != api.JobDone {
		t.Fatalf("job %+v %v", got, err)
	}
	want := []api.JobSite{{Site: "b", Done: 2}, {Site: "local", Done: 4}}
	if len(got.Sites) != 2 || got.Sites[0] != want[0] || got.Sites[1] != want[1] {
		t.Fatalf("where the job ran: %+v, want %+v", got.Sites, want)
	}
	// A new master in b takes epoch 2 of b: a's epoch 1 still writes.
	e.Clock.Advance(2 * time.Hour)
	if _, err := la.Lease(ctx, pilotproto.LeaseRequest{PilotID: "1", Epoch: ea}); err != nil {
		t.Fatalf("a renews after its lease expired, nobody took it: %v", err)
	}
	if eb2 := master(t, e, "pilot-b", "2"); eb2 != 2 {
		t.Fatalf("b's new epoch %d", eb2)
	}
	if _, err := la.Heartbeat(ctx, pilotproto.HeartbeatRequest{Epoch: ea}); err != nil {
		t.Fatalf("a's heartbeat after b's takeover: %v", err)
	}
	if _, err := lb.Heartbeat(ctx, pilotproto.HeartbeatRequest{Epoch: eb}); !errors.Is(err, api.ErrStaleEpoch) {
		t.Fatalf("b's deposed master: %v, want a stale epoch", err)
	}
}

// A new master's first heartbeat requeues its own pool's orphans, never
// the tasks another pool's master holds.
func TestOrphansAreRequeuedPerPool(t *testing.T) {
	e, _ := twoSites(t)
	ctx := context.Background()
	if _, err := e.Q.Submit(ctx, "alice", api.JobSpec{Dataset: e.Dataset("ds", 4), Command: []string{"p"}, BatchSize: 1}); err != nil {
		t.Fatal(err)
	}
	ea, eb := master(t, e, "pilot", "1"), master(t, e, "pilot-b", "1")
	la, lb := e.Client("pilot"), e.Client("pilot-b")
	if p, err := la.Pull(ctx, pilotproto.PullRequest{Epoch: ea, Max: 2}); err != nil || len(p.Tasks) != 2 {
		t.Fatal(p, err)
	}
	if p, err := lb.Pull(ctx, pilotproto.PullRequest{Epoch: eb, Max: 2}); err != nil || len(p.Tasks) != 2 {
		t.Fatal(p, err)
	}
	// b's master dies with its pull unrecorded; a new one lists nothing.
	e.Clock.Advance(2 * time.Hour)
	la.Lease(ctx, pilotproto.LeaseRequest{PilotID: "1", Epoch: ea})
	eb2 := master(t, e, "pilot-b", "9")
	if _, err := lb.Heartbeat(ctx, pilotproto.HeartbeatRequest{Epoch: eb2}); err != nil {
		t.Fatal(err)
	}
	if n := e.Count(`SELECT count(*) FROM tasks WHERE state = 'WAITING'`); n != 2 {
		t.Fatalf("%d waiting tasks after b's new master, want b's 2 requeued", n)
	}
	if n := e.Count(`SELECT count(*) FROM tasks WHERE state = 'ASSIGNED' AND pool = 'local'`); n != 2 {
		t.Fatalf("a's tasks: %d still assigned, want 2", n)
	}
}

// With two live sites a pool holds only its allowance, so a slow site's
// master cannot sit on the tasks a fast one could run; alone it is not
// limited.
func TestAPoolHoldsItsAllowanceWhileAnotherSiteIsLive(t *testing.T) {
	e, _ := twoSites(t)
	ctx := context.Background()
	if _, err := e.Q.Submit(ctx, "alice", api.JobSpec{Dataset: e.Dataset("ds", 100), Command: []string{"p"}, BatchSize: 1}); err != nil {
		t.Fatal(err)
	}
	ea, eb := master(t, e, "pilot", "1"), master(t, e, "pilot-b", "1")
	la, lb := e.Client("pilot"), e.Client("pilot-b")
	// Both masters report 4 slots: equal weights, 4 + one wave = 8 each.
	for _, m := range []struct {
		c interface {
			Recommend(context.Context, pilotproto.RecommendationRequest) error
		}
		epoch int64
	}{{la, ea}, {lb, eb}} {
		if err := m.c.Recommend(ctx, pilotproto.RecommendationRequest{Epoch: m.epoch, Slots: 4, SlotsPerNode: 1}); err != nil {
			t.Fatal(err)
		}
	}
	p, err := lb.Pull(ctx, pilotproto.PullRequest{Epoch: eb, Max: 50})
	if err != nil || len(p.Tasks) != 8 {
		t.Fatalf("b pulled %d tasks (%v), want its allowance of 8", len(p.Tasks), err)
	}
	if p, err = lb.Pull(ctx, pilotproto.PullRequest{Epoch: eb, Max: 50}); err != nil || len(p.Tasks) != 0 {
		t.Fatalf("b pulled %d more (%v) while holding its allowance", len(p.Tasks), err)
	}
	// a stops calling: after the silence timeout b is alone and unlimited
	// (up to alice's quota of 20 cores).
	e.Clock.Advance(2 * time.Minute)
	p, err = lb.Pull(ctx, pilotproto.PullRequest{Epoch: eb, Max: 10})
	if err != nil || len(p.Tasks) != 10 {
		t.Fatalf("b alone pulled %d (%v), want 10", len(p.Tasks), err)
	}
}

// Each agent sees its site's share of the backlog, its own pool's pilots
// and its caps; the global cap is split among the live sites.
func TestAgentsSeeTheirSitesShare(t *testing.T) {
	e, _ := twoSites(t)
	ctx := context.Background()
	// All 40 tasks can be handed out (the demand stops at a user's quota).
	if _, err := e.Q.SetUser(ctx, "alice", api.UserSettings{MaxCores: queuetest.Ptr(100)}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.Q.Submit(ctx, "alice", api.JobSpec{Dataset: e.Dataset("ds", 40), Command: []string{"p"}, BatchSize: 1}); err != nil {
		t.Fatal(err)
	}
	ea, eb := master(t, e, "pilot", "7"), master(t, e, "pilot-b", "7")
	if _, err := e.Client("pilot").Heartbeat(ctx, pilotproto.HeartbeatRequest{Epoch: ea, Pilots: []pilotproto.PilotStatus{{PilotID: "7", Busy: true}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.Client("pilot-b").Heartbeat(ctx, pilotproto.HeartbeatRequest{Epoch: eb, Pilots: []pilotproto.PilotStatus{{PilotID: "7"}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.Q.SetNodes(ctx, api.NodesSettings{GlobalMaxNodes: queuetest.Ptr(6)}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.Q.SetSite(ctx, "b", api.SiteSettings{MinNodes: queuetest.Ptr(1), MaxNodes: queuetest.Ptr(2)}); err != nil {
		t.Fatal(err)
	}
	var local, b api.AgentPlan
	for range 2 { // the second round sees what both agents said in the first
		var err error
		if local, err = e.Q.AgentRound(ctx, e.Q.LocalSite(), api.AgentRound{Held: 1, Idle: 8}); err != nil {
			t.Fatal(err)
		}
		if b, err = e.Client("agent-b").AgentRound(ctx, api.AgentRound{Held: 1, Idle: 8}); err != nil {
			t.Fatal(err)
		}
	}
	// Each site first gets what it can start (local 4 nodes, b 2), the
	// rest goes by weight (equal).
	if local.PendingTasks != 4+17 || b.PendingTasks != 2+17 {
		t.Fatalf("shares %d and %d, want 21 and 19", local.PendingTasks, b.PendingTasks)
	}
	if !local.Busy["7"] || b.Busy["7"] || len(b.Busy) != 1 {
		t.Fatalf("busy pilots: local %v, b %v (pilot 7 of each site is its own)", local.Busy, b.Busy)
	}
	if b.MaxNodes != 2 || b.MinNodes != 1 || local.MaxNodes != 4 {
		t.Fatalf("caps: local %d, b %d (floor %d); want b at its own 2 and local at the global 6 less b's 2", local.MaxNodes, b.MaxNodes, b.MinNodes)
	}
	sites, err := e.Client("admin").Sites(ctx)
	if err != nil || len(sites.Sites) != 2 || sites.GlobalMaxNodes != 6 {
		t.Fatalf("sites %+v %v", sites, err)
	}
	if s := sites.Sites[0]; s.Name != "b" || !s.Alive || s.Epoch != 1 || s.Master != "7" || s.MaxNodes != 2 {
		t.Fatalf("site b %+v", s)
	}
}

// The roles stay apart: an agent token is no pilot's, a site's pilots
// reach only their pool, users cannot see sites, and bad settings change
// nothing.
func TestSiteRolesAndBadInput(t *testing.T) {
	e, _ := twoSites(t)
	ctx := context.Background()
	for _, tc := range []struct {
		method, path, who, body string
		status                  int
	}{
		{"POST", pilotproto.PathLease, "agent-b", `{"pilot_id":"1"}`, http.StatusForbidden},
		{"POST", api.PathAgentRound, "pilot-b", `{"held":0,"idle":0}`, http.StatusForbidden},
		{"POST", api.PathAgentRound, "alice", `{"held":0,"idle":0}`, http.StatusForbidden},
		{"GET", api.PathSites, "alice", "", http.StatusForbidden},
		{"POST", api.PathSite + "c", "alice", `{}`, http.StatusForbidden},
		{"POST", api.PathAgentRound, "agent-b", `{"held":-1,"idle":0}`, http.StatusBadRequest},
		{"POST", api.PathAgentRegister, "agent-b", `{"pilot_token":"short"}`, http.StatusBadRequest},
		{"POST", api.PathSite + "Bad Name", "admin", `{}`, http.StatusBadRequest},
		{"POST", api.PathSite + "local", "admin", `{}`, http.StatusBadRequest},
		{"PUT", api.PathSite + "nope", "admin", `{"max_nodes":3}`, http.StatusNotFound},
		{"PUT", api.PathSite + "b", "admin", `{"min_nodes":5,"max_nodes":3}`, http.StatusBadRequest},
		{"PUT", api.PathSite + "b", "admin", `{"max_nodes":-1}`, http.StatusBadRequest},
		{"PUT", api.PathSite + "local", "admin", `{"paused":true}`, http.StatusBadRequest},
		{"PUT", api.PathNodes, "admin", `{"global_max_nodes":-2}`, http.StatusBadRequest},
	} {
		before := e.Snapshot(t)
		status, msg := e.Raw(tc.method, tc.path, tc.who, tc.body)
		if status != tc.status {
			t.Errorf("%s %s as %s: %d %q, want %d", tc.method, tc.path, tc.who, status, msg, tc.status)
		}
		if after := e.Snapshot(t); after != before {
			t.Errorf("%s %s as %s changed the tables", tc.method, tc.path, tc.who)
		}
	}
	// Adding a site again replaces its agent token: the old one stops.
	if _, err := e.Client("admin").AddSite(ctx, "b"); err != nil {
		t.Fatal(err)
	}
	if _, err := e.Client("agent-b").AgentRound(ctx, api.AgentRound{}); !errors.Is(err, api.ErrUnauthorized) {
		t.Fatalf("the replaced agent token: %v", err)
	}
}

// A pilot end pulled in by a site's agent reaches that site's master only:
// pilot 1 of the other cluster is another pilot.
func TestAPulledInEndReachesOnlyItsSitesMaster(t *testing.T) {
	e, _ := twoSites(t)
	ctx := context.Background()
	ea, eb := master(t, e, "pilot", "1"), master(t, e, "pilot-b", "1")
	if err := e.Client("agent-b").AgentEnd(ctx, api.PilotEnd{Pilot: "1", End: 1_900_000_000}); err != nil {
		t.Fatal(err)
	}
	ps := []pilotproto.PilotStatus{{PilotID: "1", Deadline: 2_000_000_000}}
	ra, err := e.Client("pilot").Heartbeat(ctx, pilotproto.HeartbeatRequest{Epoch: ea, Pilots: ps})
	if err != nil || len(ra.Deadlines) != 0 {
		t.Fatalf("the local master heard %v (%v)", ra.Deadlines, err)
	}
	rb, err := e.Client("pilot-b").Heartbeat(ctx, pilotproto.HeartbeatRequest{Epoch: eb, Pilots: ps})
	if err != nil || rb.Deadlines["1"] != 1_900_000_000 {
		t.Fatalf("b's master heard %v (%v)", rb.Deadlines, err)
	}
	if status, _ := e.Raw("POST", api.PathAgentEnd, "agent-b", `{"pilot":"","end":5}`); status != 400 {
		t.Fatalf("an end without a pilot: %d", status)
	}
}
