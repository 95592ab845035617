package queue_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/harvest-hpc/harvest/internal/pgtest"
	"github.com/harvest-hpc/harvest/pilotproto"
	"github.com/harvest-hpc/harvest/queue"
	"github.com/harvest-hpc/harvest/queue/api"
	"github.com/harvest-hpc/harvest/queue/queuetest"
)

// twoAgents opens two queues on one database, as the agents of sites a
// and b with their own pilot tokens, on one clock.
func twoAgents(t *testing.T) (a, b *queue.Queue, clock *queuetest.Clock, data string) {
	t.Helper()
	dir := t.TempDir()
	data = filepath.Join(dir, "data")
	if err := os.MkdirAll(filepath.Join(data, "out"), 0o755); err != nil {
		t.Fatal(err)
	}
	clock = queuetest.NewClock()
	// One database for both: a SQLite file (WAL lets several processes,
	// here two queues of one process, share it), or with
	// HARVEST_TEST_DB=postgres a fresh schema of the test PostgreSQL.
	db := pgtest.DB(t, filepath.Join(dir, "shared.db"))
	open := func(site string) *queue.Queue {
		cfg := queuetest.Config(dir, clock)
		cfg.DBPath = db
		cfg.Shared, cfg.LocalSite, cfg.PilotToken = true, site, strings.Repeat(site, 40)
		q, err := queue.Open(cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { q.Close() })
		return q
	}
	return open("a"), open("b"), clock, data
}

func dataset(t *testing.T, data, name string, n int) string {
	p := filepath.Join(data, name)
	for i := range n {
		if err := os.MkdirAll(filepath.Join(p, fmt.Sprintf("e%03d", i)), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return p
}

// TestTheSweepsRunAtOneAgentAndMoveWhenItStops: of two agents on one
// database one holds the sweep lease; the other takes it when the holder
// stops (released at once) or dies (after the lease lapses), with a new
// epoch.
func TestTheSweepsRunAtOneAgentAndMoveWhenItStops(t *testing.T) {
	ctx := context.Background()
	a, b, clock, _ := twoAgents(t)
	if err := a.Sweep(ctx); err != nil {
		t.Fatal(err)
	}
	if err := b.Sweep(ctx); err != nil {
		t.Fatal(err)
	}
	ea := a.SweepEpoch()
	if ea == 0 || b.SweepEpoch() != 0 {
		t.Fatalf("sweep epochs a %d, b %d: want a holding, b not", ea, b.SweepEpoch())
	}
	// a dies without a word: b waits for the lease to lapse (three sweep
	// intervals), then sweeps with a higher epoch.
	clock.Advance(2 * queuetest.Config("", clock).SweepInterval)
	b.Sweep(ctx)
	if b.SweepEpoch() != 0 {
		t.Fatal("b took the sweeps while a's lease was alive")
	}
	clock.Advance(2 * queuetest.Config("", clock).SweepInterval)
	b.Sweep(ctx)
	eb := b.SweepEpoch()
	if eb <= ea {
		t.Fatalf("b's sweep epoch %d after a's lease lapsed: want above a's %d", eb, ea)
	}
	a.Sweep(ctx) // a comes back: b holds the lease, a does not sweep
	if a.SweepEpoch() != 0 || b.SweepEpoch() != eb {
		t.Fatalf("after a's return: a %d, b %d", a.SweepEpoch(), b.SweepEpoch())
	}
	// b stops: it releases the lease, a takes it at its next sweep.
	b.Close()
	a.Sweep(ctx)
	if a.SweepEpoch() <= eb {
		t.Fatalf("a's epoch %d after b stopped: want above %d", a.SweepEpoch(), eb)
	}
}

// TestAPoolGoesOnThroughAnotherAgent: a master elected through agent a
// keeps working through agent b (its pilot token known there, its lease
// checked against the database, not b's copy), a job submitted at a is
// pulled at b, and the requests a client may repeat at another agent after
// a lost answer (results, a keyed submission) are applied once.
func TestAPoolGoesOnThroughAnotherAgent(t *testing.T) {
	ctx := context.Background()
	a, b, clock, data := twoAgents(t)
	// b knows a's pilots by their token.
	id, err := b.Identify(ctx, queue.Credentials{Token: strings.Repeat("a", 40)})
	if err != nil || id.Role != api.RolePilot || id.Site != "a" {
		t.Fatalf("a's pilot at b: %+v %v", id, err)
	}
	// a's first master was elected through b (which keeps a copy of the
	// lease it wrote)...
	if _, err := b.Pool("a").Lease(ctx, pilotproto.LeaseRequest{PilotID: "old", Address: "http://x:1"}); err != nil {
		t.Fatal(err)
	}
	clock.Advance(time.Minute) // the first master of a died; a new one is elected through a
	l, err := a.Lease(ctx, pilotproto.LeaseRequest{PilotID: "p7", Address: "http://n1:1"})
	if err != nil || !l.Granted {
		t.Fatalf("lease at a: %+v %v", l, err)
	}
	spec := api.JobSpec{Dataset: dataset(t, data, "d", 6), Command: []string{"p"}, BatchSize: 1}
	sub, err := a.StartSubmit(ctx, "alice", spec, "key-1")
	if err != nil {
		t.Fatal(err)
	}
	<-sub.Done()
	job, err := sub.Result()
	if err != nil {
		t.Fatal(err)
	}
	// Agent a dies; its master goes on through b, which learns of the
	// job at its next reconcile.
	if err := b.Reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	p, err := b.Pool("a").Pull(ctx, pilotproto.PullRequest{Epoch: l.Epoch, Max: 6})
	n := len(p.Tasks)
	if err != nil || n < 2 {
		t.Fatalf("pull of a's master at b: %d tasks, %v", n, err)
	}
	res := make([]pilotproto.Result, n)
	for i, tk := range p.Tasks {
		res[i] = pilotproto.Result{TaskID: tk.ID, Attempt: tk.Attempt, Status: pilotproto.StatusDone, DurationMS: 1000}
	}
	r, err := b.Pool("a").ReportResults(ctx, pilotproto.ResultsRequest{Epoch: l.Epoch, Results: res[:n-1]})
	if err != nil || r.Applied != n-1 {
		t.Fatalf("results at b: %+v %v", r, err)
	}
	// The answer was lost: the master's client repeats the call at the
	// other agent (a is back): nothing is counted twice.
	r, err = a.Pool("a").ReportResults(ctx, pilotproto.ResultsRequest{Epoch: l.Epoch, Results: res})
	if err != nil || r.Applied != 1 || r.Duplicates != n-1 {
		t.Fatalf("repeated results at a: %+v %v", r, err)
	}
	for done := n; done < 6; {
		p, err := b.Pool("a").Pull(ctx, pilotproto.PullRequest{Epoch: l.Epoch, Max: 6})
		if err != nil || len(p.Tasks) == 0 {
			t.Fatalf("pull at b after %d done: %+v %v", done, p, err)
		}
		res = res[:0]
		for _, tk := range p.Tasks {
			res = append(res, pilotproto.Result{TaskID: tk.ID, Attempt: tk.Attempt, Status: pilotproto.StatusDone, DurationMS: 1000})
		}
		if _, err := b.Pool("a").ReportResults(ctx, pilotproto.ResultsRequest{Epoch: l.Epoch, Results: res}); err != nil {
			t.Fatal(err)
		}
		done += len(res)
	}
	j, err := b.Job(ctx, "alice", false, job.ID)
	if err != nil || j.Tasks.Done != 6 || j.State != "DONE" {
		t.Fatalf("job at b: %+v %v", j, err)
	}
	// A submission repeated at b with its key gets a's job, not a second.
	sub, err = b.StartSubmit(ctx, "alice", spec, "key-1")
	if err != nil {
		t.Fatal(err)
	}
	<-sub.Done()
	if again, err := sub.Result(); err != nil || again.ID != job.ID {
		t.Fatalf("submission repeated at b: job %d %v, want %d", again.ID, err, job.ID)
	}
	if !sub.Replayed() {
		t.Fatal("the repeated submission was not a replay of the first")
	}
}

// TestEveryAgentSplitsTheWorkAmongAllSites: each agent hears only its own
// site's rounds; from the database it learns the other's, so both split
// the waiting tasks between the two sites instead of each giving its own
// site all of them (which let the first site's master pull everything
// ahead while the other cluster released its pilots for want of work).
func TestEveryAgentSplitsTheWorkAmongAllSites(t *testing.T) {
	ctx := context.Background()
	a, b, _, data := twoAgents(t)
	if _, err := a.Submit(ctx, "alice", api.JobSpec{Dataset: dataset(t, data, "d", 40), Command: []string{"p"}, BatchSize: 1}); err != nil {
		t.Fatal(err)
	}
	if err := b.Reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	round := api.AgentRound{Held: 4, Idle: 4}
	pa, err := a.AgentRound(ctx, "a", round)
	if err != nil {
		t.Fatal(err)
	}
	alone, err := b.AgentRound(ctx, "b", round)
	if err != nil {
		t.Fatal(err)
	}
	if pa.PendingTasks == 0 || alone.PendingTasks != pa.PendingTasks {
		t.Fatalf("before the sync each agent gives its site everything: a %d, b %d", pa.PendingTasks, alone.PendingTasks)
	}
	for _, q := range []*queue.Queue{a, b} {
		if err := queue.SyncPeers(q); err != nil {
			t.Fatal(err)
		}
	}
	pa, err = a.AgentRound(ctx, "a", round)
	if err != nil {
		t.Fatal(err)
	}
	pb, err := b.AgentRound(ctx, "b", round)
	if err != nil {
		t.Fatal(err)
	}
	if pa.PendingTasks == 0 || pb.PendingTasks == 0 || pa.PendingTasks+pb.PendingTasks > alone.PendingTasks {
		t.Fatalf("after the sync: a %d, b %d of %d: want the work split", pa.PendingTasks, pb.PendingTasks, alone.PendingTasks)
	}
	sites, err := b.Sites(ctx)
	if err != nil {
		t.Fatal(err)
	}
	alive := 0
	for _, s := range sites.Sites {
		if s.Alive {
			alive++
		}
	}
	if alive != 2 {
		t.Fatalf("b sees %d sites alive: %+v", alive, sites.Sites)
	}
}

// TestACancelThroughOneAgentReachesTheMastersOfAnother: a job cancelled
// through b is listed to the master a serves (so its pilots stop the
// tasks) once a has synced with the database, though a had read its
// cancelled jobs before.
func TestACancelThroughOneAgentReachesTheMastersOfAnother(t *testing.T) {
	ctx := context.Background()
	a, b, _, data := twoAgents(t)
	job, err := a.Submit(ctx, "alice", api.JobSpec{Dataset: dataset(t, data, "d", 4), Command: []string{"p"}, BatchSize: 1})
	if err != nil {
		t.Fatal(err)
	}
	l, err := a.Lease(ctx, pilotproto.LeaseRequest{PilotID: "m", Address: "http://x:1"})
	if err != nil {
		t.Fatal(err)
	}
	p, err := a.Pull(ctx, pilotproto.PullRequest{Epoch: l.Epoch, Max: 1})
	if err != nil || len(p.Tasks) != 1 || len(p.CancelledJobs) != 0 {
		t.Fatalf("pull at a: %+v %v", p, err)
	}
	if _, err := b.Cancel(ctx, "alice", false, job.ID); err != nil {
		t.Fatal(err)
	}
	if err := queue.SyncPeers(a); err != nil {
		t.Fatal(err)
	}
	p, err = a.Pull(ctx, pilotproto.PullRequest{Epoch: l.Epoch, Max: 1})
	if err != nil || len(p.Tasks) != 0 || len(p.CancelledJobs) != 1 || p.CancelledJobs[0] != job.ID {
		t.Fatalf("pull at a after b cancelled job %d: %+v %v", job.ID, p, err)
	}
}

// TestAnAgentPausedPastItsSweepLeaseSweepsNothing: agent a takes the
// sweep lease and is paused before its sweeps while the lease lapses and b
// takes it; when a resumes, its sweeps change nothing (b's do) and a no
// longer counts itself the sweeper.
func TestAnAgentPausedPastItsSweepLeaseSweepsNothing(t *testing.T) {
	ctx := context.Background()
	a, b, clock, data := twoAgents(t)
	sub, err := a.StartSubmit(ctx, "alice", api.JobSpec{Dataset: dataset(t, data, "d", 3), Command: []string{"p"}, BatchSize: 1, ExpiryS: 60}, "")
	if err != nil {
		t.Fatal(err)
	}
	<-sub.Done()
	job, err := sub.Result()
	if err != nil {
		t.Fatal(err)
	}
	took, release, bDone := make(chan struct{}), make(chan struct{}), make(chan error, 1)
	queue.SetBeforeWrite(b, func(op string) {
		if op == "sweeps" {
			close(took)
			<-release
		}
	})
	paused := false
	queue.SetBeforeWrite(a, func(op string) {
		if op != "sweeps" || paused {
			return
		}
		// a holds the lease now; it is paused past it, b takes it.
		paused = true
		clock.Advance(4 * queuetest.Config("", clock).SweepInterval)
		go func() { bDone <- b.Sweep(ctx) }()
		<-took
	})
	if err := a.Sweep(ctx); err != nil {
		t.Fatalf("a's deposed sweep: %v", err)
	}
	if !paused || a.SweepEpoch() != 0 {
		t.Fatalf("a paused %v, its sweep epoch %d after b took the lease: want 0", paused, a.SweepEpoch())
	}
	j, err := a.Job(ctx, "alice", false, job.ID)
	if err != nil || j.State != "WAITING" {
		t.Fatalf("job past its expiry after a's deposed sweep: %s %v; want WAITING (a may not sweep)", j.State, err)
	}
	close(release)
	if err := <-bDone; err != nil {
		t.Fatal(err)
	}
	if j, err = b.Job(ctx, "alice", false, job.ID); err != nil || j.State != "ERROR_EW" {
		t.Fatalf("job after b's sweep: %s %v; want ERROR_EW", j.State, err)
	}
}

// TestAnAgentSeesTheMasterElectedThroughAnother: a's pool elects its
// master through a, the master dies, its successor is elected through b:
// a's agent reads the new master (to release it last, to publish its
// address), not the copy of the lease a wrote itself.
func TestAnAgentSeesTheMasterElectedThroughAnother(t *testing.T) {
	ctx := context.Background()
	a, b, clock, _ := twoAgents(t)
	if l, err := a.Lease(ctx, pilotproto.LeaseRequest{PilotID: "p1", Address: "http://n1:1"}); err != nil || !l.Granted {
		t.Fatalf("lease at a: %+v %v", l, err)
	}
	if addr, alive, err := a.MasterAddress(ctx); err != nil || addr != "http://n1:1" || !alive {
		t.Fatalf("a's master at a: %q %v %v", addr, alive, err)
	}
	clock.Advance(time.Minute) // p1 died; p2 is elected through b
	if l, err := b.Pool("a").Lease(ctx, pilotproto.LeaseRequest{PilotID: "p2", Address: "http://n2:1"}); err != nil || !l.Granted {
		t.Fatalf("lease at b: %+v %v", l, err)
	}
	addr, alive, err := a.MasterAddress(ctx)
	if err != nil || addr != "http://n2:1" || !alive {
		t.Fatalf("a's master at a after an election through b: %q alive %v %v; want http://n2:1 alive", addr, alive, err)
	}
	if p, err := a.MasterPilot(ctx); err != nil || p != "p2" {
		t.Fatalf("a's master pilot: %q %v; want p2", p, err)
	}
}

// TestASubmissionCutByItsAgentsDeathIsTakenOver: agent a dies half way
// through a keyed submission (the job created, its tasks not stored); the
// user's retry at b answers "being stored" while a is alive, and stores
// the job once a's liveness in the database lapsed; a, should it resume,
// cannot activate its copy: one job under the key.
func TestASubmissionCutByItsAgentsDeathIsTakenOver(t *testing.T) {
	ctx := context.Background()
	a, b, clock, data := twoAgents(t)
	spec := api.JobSpec{Dataset: dataset(t, data, "d", 5), Command: []string{"p"}, BatchSize: 1}
	cut, resume := make(chan struct{}), make(chan struct{})
	queue.SetBeforeWrite(a, func(op string) {
		if op == "created" {
			close(cut)
			<-resume // a "dies" here (a paused process, then resumed)
		}
	})
	first, err := a.StartSubmit(ctx, "alice", spec, "key-9")
	if err != nil {
		t.Fatal(err)
	}
	<-cut
	if _, err := b.StartSubmit(ctx, "alice", spec, "key-9"); !errors.Is(err, api.ErrConflict) {
		close(resume)
		t.Fatalf("retry at b while a lives: %v; want ErrConflict (being stored)", err)
	}
	clock.Advance(4 * queuetest.Config("", clock).ReconcileInterval) // a's liveness lapses
	sub, err := b.StartSubmit(ctx, "alice", spec, "key-9")
	if err != nil {
		close(resume)
		t.Fatalf("retry at b after a died: %v", err)
	}
	<-sub.Done()
	job, err := sub.Result()
	if err != nil || job.State != "WAITING" || job.Tasks.Total != 5 {
		close(resume)
		t.Fatalf("job stored by b: %+v %v", job, err)
	}
	close(resume) // a resumes: its activation is refused
	<-first.Done()
	if _, err := first.Result(); err == nil {
		t.Fatal("a's resumed submission succeeded after b took it over")
	}
	list, err := b.ListJobs(ctx, queue.ListFilter{Owner: "alice", Limit: 10})
	if err != nil || len(list.Jobs) != 1 || list.Jobs[0].ID != job.ID {
		t.Fatalf("alice's jobs: %+v %v; want only %d", list.Jobs, err, job.ID)
	}
	again, err := a.StartSubmit(ctx, "alice", spec, "key-9")
	if err != nil {
		t.Fatal(err)
	}
	<-again.Done()
	if j, _ := again.Result(); !again.Replayed() || j.ID != job.ID {
		t.Fatalf("a repeat of the key at a: job %d, replayed %v; want a replay of %d", j.ID, again.Replayed(), job.ID)
	}
}
