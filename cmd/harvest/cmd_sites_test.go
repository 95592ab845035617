package main

import (
	"context"
	"strconv"
	"strings"
	"testing"

	"github.com/harvest-hpc/harvest/pilotproto"
	"github.com/harvest-hpc/harvest/queue"
	"github.com/harvest-hpc/harvest/queue/api"
	"github.com/harvest-hpc/harvest/queue/queuetest"
)

// The admin's day with several sites: add a site (its agent token), cap
// it, cap all sites, list them; a user sees where a job's tasks ran.
func TestAdminSitesCommands(t *testing.T) {
	e := queuetest.New(t)
	q := []string{"--queue", e.URL(), "--token", e.Tokens["admin"]}
	out, stderr, code := run(t, append([]string{"admin", "site", "add", "b"}, q...)...)
	tok := strings.TrimSpace(out)
	if code != 0 || !strings.HasPrefix(tok, "hva_") {
		t.Fatalf("site add: exit %d, %q %q", code, out, stderr)
	}
	if id, err := e.Q.Identify(context.Background(), queue.Credentials{Token: tok}); err != nil || id.Role != api.RoleAgent || id.Site != "b" {
		t.Fatalf("the printed token is %+v %v", id, err)
	}
	if _, stderr, code := run(t, append([]string{"admin", "site", "set", "b", "--max", "3", "--pause"}, q...)...); code != 0 {
		t.Fatalf("site set: exit %d %s", code, stderr)
	}
	if out, stderr, code := run(t, append([]string{"admin", "nodes", "--global-max", "10"}, q...)...); code != 0 || !strings.Contains(out, "max nodes across sites: 10") {
		t.Fatalf("nodes --global-max: exit %d %q %s", code, out, stderr)
	}
	out, stderr, code = run(t, append([]string{"admin", "sites"}, q...)...)
	if code != 0 || !strings.Contains(out, "SITE") || !strings.Contains(out, "at most 10 pilots across all sites") {
		t.Fatalf("sites: exit %d\n%s%s", code, out, stderr)
	}
	var bline string
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(l, "b ") {
			bline = l
		}
	}
	if !strings.Contains(bline, "paused") || !strings.Contains(bline, " no") {
		t.Fatalf("site b's line %q: want it paused and not alive yet\n%s", bline, out)
	}
	for _, bad := range [][]string{{"admin", "site", "add"}, {"admin", "site", "set", "b", "--pause", "--resume"}} {
		if _, _, code := run(t, append(bad, q...)...); code != 2 {
			t.Fatalf("%v: exit %d, want 2", bad, code)
		}
	}
	if _, stderr, code := run(t, append([]string{"admin", "site", "set", "nope", "--max", "1"}, q...)...); code != 1 || !strings.Contains(stderr, "no site nope") {
		t.Fatalf("an unknown site: exit %d %q", code, stderr)
	}

	// Where a job ran.
	ctx := context.Background()
	j, err := e.Q.Submit(ctx, "alice", api.JobSpec{Dataset: e.Dataset("ds", 2), Command: []string{"p"}, BatchSize: 1})
	if err != nil {
		t.Fatal(err)
	}
	l, _ := e.Q.Lease(ctx, pilotproto.LeaseRequest{PilotID: "1"})
	p, _ := e.Q.Pull(ctx, pilotproto.PullRequest{Epoch: l.Epoch, Max: 2})
	var rs []pilotproto.Result
	for _, tk := range p.Tasks {
		rs = append(rs, pilotproto.Result{TaskID: tk.ID, Attempt: tk.Attempt, Status: pilotproto.StatusDone})
	}
	e.Q.ReportResults(ctx, pilotproto.ResultsRequest{Epoch: l.Epoch, Results: rs})
	out, stderr, code = run(t, "status", "--queue", e.URL(), "--token", e.Tokens["alice"], strconv.FormatInt(j.ID, 10))
	if code != 0 || !strings.Contains(out, "ran at:") || !strings.Contains(out, "local 2 done") {
		t.Fatalf("status: exit %d\n%s%s", code, out, stderr)
	}
}
