package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/harvest-hpc/harvest/pilotproto"
	"github.com/harvest-hpc/harvest/queue"
	"github.com/harvest-hpc/harvest/queue/api"
	"github.com/harvest-hpc/harvest/queue/client"
	"github.com/harvest-hpc/harvest/queue/httpapi"
	"github.com/harvest-hpc/harvest/queue/queuetest"
)

type cliQueue struct {
	url, token string
	admin      string // the admin token (of ops, in --admin)
	q          *queue.Queue
	pilot      *client.Client
	data       string
}

func startCLIQueue(t *testing.T) *cliQueue {
	t.Helper()
	dir := t.TempDir()
	data := filepath.Join(dir, "data")
	os.MkdirAll(filepath.Join(data, "ds"), 0o755)
	for i := 0; i < 4; i++ {
		os.MkdirAll(filepath.Join(data, "ds", fmt.Sprintf("e%d", i)), 0o755)
	}
	cfg := queue.DefaultConfig()
	cfg.DBPath = filepath.Join(dir, "q.db")
	cfg.AllowedRoots = []string{data}
	cfg.OutputsRoot = data
	cfg.PilotToken = "pt"
	cfg.LookupAccount = queuetest.TestAccount // the test's users, not the machine's
	cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	cfg.Admins = []string{"ops"}
	q, err := queue.Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(httpapi.New(q, httpapi.DefaultConfig()).Handler())
	t.Cleanup(func() { srv.Close(); q.Close() })
	tok, err := q.CreateToken(context.Background(), "alice", api.RoleUser)
	if err != nil {
		t.Fatal(err)
	}
	adm, err := q.CreateToken(context.Background(), "ops", api.RoleAdmin)
	if err != nil {
		t.Fatal(err)
	}
	pc := client.DefaultConfig()
	pc.URL, pc.Token = srv.URL, "pt"
	pilot, _ := client.New(pc)
	return &cliQueue{url: srv.URL, token: tok.Token, admin: adm.Token, q: q, pilot: pilot, data: data}
}

// run runs the harvest CLI in process and returns stdout, stderr and the
// exit code.
func run(t *testing.T, args ...string) (string, string, int) {
	t.Helper()
	var out, errb bytes.Buffer
	app := newApp()
	app.Writer, app.ErrWriter = &out, &errb
	code := 0
	oldExit, oldErr := cli.OsExiter, cli.ErrWriter
	cli.OsExiter = func(c int) { code = c }
	cli.ErrWriter = &errb // cli.Exit messages go here
	defer func() { cli.OsExiter, cli.ErrWriter = oldExit, oldErr }()
	err := app.Run(append([]string{"harvest"}, args...))
	if err != nil && code == 0 {
		code = exitCode(err)
		var ec cli.ExitCoder
		if !errors.As(err, &ec) {
			fmt.Fprintln(&errb, err)
		}
	}
	return out.String(), errb.String(), code
}

// drain plays the master: lease, pull until n tasks were handed out and
// report their statuses. It polls the queue (the submission it waits for
// runs concurrently) until the tasks appear or the deadline passes.
func (c *cliQueue) drain(t *testing.T, n int, status func(i int) string) {
	ctx := context.Background()
	l, err := c.pilot.Lease(ctx, pilotproto.LeaseRequest{PilotID: "p"})
	if err != nil {
		t.Error(err)
		return
	}
	deadline := time.After(30 * time.Second)
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for i := 0; i < n; {
		p, err := c.pilot.Pull(ctx, pilotproto.PullRequest{Epoch: l.Epoch, Max: 10})
		if err != nil {
			t.Error(err)
			return
		}
		var res []pilotproto.Result
		for _, tk := range p.Tasks {
			res = append(res, pilotproto.Result{TaskID: tk.ID, Attempt: tk.Attempt, Status: status(i), DurationMS: 100})
			i++
		}
		if len(res) > 0 {
			if _, err := c.pilot.Results(ctx, pilotproto.ResultsRequest{Epoch: l.Epoch, Results: res}); err != nil {
				t.Error(err)
				return
			}
			continue
		}
		select {
		case <-tick.C:
		case <-deadline:
			t.Errorf("drain: %d of %d tasks handed out before the deadline", i, n)
			return
		}
	}
}

func TestSubmitWaitExitCodeReflectsTheResult(t *testing.T) {
	for _, tc := range []struct {
		name   string
		status func(i int) string
		code   int
		state  string
	}{
		{"every task done exits 0", func(int) string { return pilotproto.StatusDone }, 0, "DONE"},
		{"one task failing for good exits 3 (DONE_WARN)", func(i int) string {
			if i == 0 {
				return pilotproto.StatusFailed
			}
			return pilotproto.StatusDone
		}, 3, "DONE_WARN"},
		{"every task failing exits 4 (FAILED)", func(int) string { return pilotproto.StatusFailed }, 4, "FAILED"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			q := startCLIQueue(t)
			done := make(chan struct{})
			go func() {
				defer close(done)
				q.drain(t, 4, tc.status)
			}()
			// Flags after DIR, as the documented usage writes them.
			out, errOut, code := run(t, "submit", filepath.Join(q.data, "ds"), "--queue", q.url, "--token", q.token,
				"--batch-size", "2", "--max-attempts", "1", "--wait", "--poll", "20ms", "--", "prog", "{input}", "{output}")
			<-done
			if code != tc.code || !strings.Contains(out, tc.state) {
				t.Fatalf("exit %d, want %d; stdout %q stderr %q", code, tc.code, out, errOut)
			}
			if !strings.Contains(errOut, "4/4") && !strings.Contains(errOut, "/4 done") {
				t.Fatalf("no progress bar on stderr: %q", errOut)
			}
			if hint := strings.Contains(errOut, "why they failed: harvest failures "); hint != (tc.code != 0) {
				t.Fatalf("the pointer to harvest failures on stderr: %v, want %v (%q)", hint, tc.code != 0, errOut)
			}
		})
	}
}

func TestSubmittingAgainWithTheSameIdempotencyKeyGetsTheSameJob(t *testing.T) {
	q := startCLIQueue(t)
	args := []string{"submit", filepath.Join(q.data, "ds"), "--queue", q.url, "--token", q.token, "--idempotency-key", "run-42", "--json", "--", "prog", "{input}"}
	var ids []int64
	for i := 0; i < 2; i++ {
		out, errOut, code := run(t, args...)
		var j api.Job
		if code != 0 || json.Unmarshal([]byte(out), &j) != nil || j.Tasks.Total != 4 {
			t.Fatalf("submit #%d: exit %d, stdout %q, stderr %q", i+1, code, out, errOut)
		}
		ids = append(ids, j.ID)
	}
	if ids[0] != ids[1] {
		t.Fatalf("the same key gave jobs %v, want one job", ids)
	}
	// Another command under the same key is refused, and says so.
	args[len(args)-1] = "{output}"
	if _, errOut, code := run(t, args...); code != 1 || !strings.Contains(errOut, "idempotency key") {
		t.Fatalf("another submission with the key: exit %d, stderr %q", code, errOut)
	}
}

func TestSubmitProgressLines(t *testing.T) {
	for _, tc := range []struct {
		p    api.SubmitProgress
		want string
	}{
		{api.SubmitProgress{Phase: api.PhaseListing, Entries: 412000}, "listing the dataset: 412000 entries "},
		{api.SubmitProgress{Phase: api.PhaseStoring, Entries: 1000000, Stored: 300000}, "storing tasks: 300000/1000000 "},
	} {
		if got := submitProgressLine(tc.p); got != tc.want {
			t.Errorf("%+v: %q, want %q", tc.p, got, tc.want)
		}
	}
}

func TestCLIRefusesBadInputClearly(t *testing.T) {
	q := startCLIQueue(t)
	ds := filepath.Join(q.data, "ds")
	for _, tc := range []struct {
		name string
		args []string
		code int
		msg  string
	}{
		{"a submit without a command says where it goes", []string{"submit", ds, "--batch-size", "2"}, 2, `after "--"`},
		{"an unknown placeholder is the queue's clear 400", []string{"submit", ds, "--", "prog", "{inptu}"}, 1, "unknown placeholder {inptu}"},
		{"a negative batch size is refused", []string{"submit", ds, "--batch-size", "-3", "--", "prog"}, 1, "batch_size -3"},
		{"--batched without {inputs} says what is missing", []string{"submit", ds, "--batched", "--", "prog", "{input}"}, 2, "put the argument {inputs}"},
		{"{inputs} without --batched asks for it", []string{"submit", ds, "--", "prog", "{inputs}"}, 2, "say so with --batched"},
		{"a batched command's placeholder inside an argument is the queue's 400", []string{"submit", ds, "--batched", "--", "prog", "--in={inputs}", "{inputs}"}, 1, "whole argument"},
		{"an unknown flag after DIR is refused", []string{"submit", ds, "--bogus", "--", "prog"}, 2, "unknown flag --bogus"},
		{"a job id that is not a number is refused", []string{"status", "abc"}, 2, "not a job id"},
		{"another user's or a missing job is not found", []string{"cancel", "42"}, 1, "not found"},
		{"a user cannot set quotas", []string{"admin", "user", "set", "bob", "--priority", "3"}, 1, "admin role"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// The client flags go last (before "--"): flags after arguments work everywhere.
			conn := []string{"--queue", q.url, "--token", q.token}
			args := append([]string{}, tc.args...)
			if i := slices.Index(args, "--"); i >= 0 {
				args = append(append(args[:i:i], conn...), tc.args[i:]...)
			} else {
				args = append(args, conn...)
			}
			_, errOut, code := run(t, args...)
			if code != tc.code || !strings.Contains(errOut, tc.msg) {
				t.Fatalf("exit %d (want %d), stderr %q (want %q)", code, tc.code, errOut, tc.msg)
			}
		})
	}
}

// An admin's commands with bad or hostile arguments: each is refused with
// a clear message and a non-zero exit (2: the command line; 1: the
// queue's refusal), and nothing changes. Stray arguments were ignored
// (admin nodes extra), a non-positive --limit was dropped (jobs --limit
// -1 listed the default page), an invalid --user listed "no jobs",
// `admin user set NAME` without a flag created the user, and NaN or Inf
// failed in the JSON encoder.
func TestAdminCLIRefusesBadInputAndChangesNothing(t *testing.T) {
	q := startCLIQueue(t)
	ds := filepath.Join(q.data, "ds")
	if _, errOut, code := run(t, "submit", ds, "--queue", q.url, "--token", q.token, "--", "prog", "{input}"); code != 0 {
		t.Fatalf("submit: %d %s", code, errOut)
	}
	state := func() string {
		us, err := q.q.Users(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		lo, hi, err := q.q.NodeLimits(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		jl, err := q.q.ListJobs(context.Background(), queue.ListFilter{})
		if err != nil {
			t.Fatal(err)
		}
		return fmt.Sprintf("%+v %d %d %+v", us, lo, hi, jl)
	}
	before := state()
	for _, tc := range []struct {
		name string
		args []string
		code int
		msg  string
	}{
		{"a stray argument", []string{"admin", "nodes", "extra"}, 2, "takes no arguments"},
		{"a stray argument to users", []string{"users", "alice"}, 2, "takes no arguments"},
		{"a zero limit", []string{"jobs", "--limit", "0"}, 2, "--limit must be a positive"},
		{"a negative limit", []string{"jobs", "--limit", "-1"}, 2, "--limit must be a positive"},
		{"a huge limit", []string{"jobs", "--limit", "99999999999"}, 1, "exceeds"},
		{"an invalid user name", []string{"jobs", "--user", "bad name"}, 1, "not a valid user name"},
		{"nothing to set", []string{"admin", "user", "set", "carol"}, 2, "nothing to set"},
		{"a NaN cost", []string{"admin", "user", "set", "alice", "--max-cost", "NaN"}, 2, "--max-cost must be a positive number"},
		{"an infinite CPU time", []string{"admin", "user", "set", "alice", "--max-cpu-time", "Inf"}, 2, "--max-cpu-time must be a positive number"},
		{"a NaN priority", []string{"admin", "user", "set", "alice", "--priority", "nan"}, 2, "--priority must be a positive number"},
		{"a negative priority", []string{"admin", "user", "set", "alice", "--priority", "-1"}, 1, "priority must be a positive number"},
		{"zero cores", []string{"admin", "user", "set", "alice", "--max-cores", "0"}, 1, "max cores must be at least 1"},
		{"cores not a number", []string{"admin", "user", "set", "alice", "--max-cores", "many"}, 2, "max-cores"},
		{"an invalid user", []string{"admin", "user", "set", "bad name", "--priority", "2"}, 1, "not a valid user name"},
		{"a negative floor", []string{"admin", "nodes", "--min", "-1"}, 1, "must not be negative"},
		{"a floor above the cap", []string{"admin", "nodes", "--min", "5", "--max", "2"}, 1, "exceeds"},
		{"a huge cap", []string{"admin", "nodes", "--max", "99999999999"}, 1, "exceed 1000000"},
		{"an admin token for a non-admin", []string{"admin", "token", "create", "bob", "--admin"}, 1, "--admin"},
		{"a token id that is not hex", []string{"token", "revoke", "zz", "--user", "alice"}, 1, "hex digits"},
		{"an unknown token", []string{"token", "revoke", "0123456789", "--user", "alice"}, 1, "no token"},
		{"a missing job", []string{"cancel", "999"}, 1, "not found"},
		{"a job id out of range", []string{"cancel", "99999999999999999999999"}, 1, "not a job id"},
		{"failures of a missing job", []string{"failures", "999"}, 1, "not found"},
		{"failures with a zero limit", []string{"failures", "1", "--limit", "0"}, 2, "--limit must be positive"},
		{"status of two jobs", []string{"status", "1", "2"}, 2, "usage"},
		{"an unknown state", []string{"jobs", "--state", "BOGUS"}, 1, "unknown job state"},
		{"a site never added", []string{"admin", "site", "set", "nosuch", "--min", "1"}, 1, "no site nosuch"},
		{"a zero token lifetime", []string{"token", "create", "--ttl", "0s"}, 2, "--ttl must be at least 1s"},
		{"a token lifetime past 10 years", []string{"admin", "token", "create", "alice", "--ttl", "100000h"}, 2, "at most 10 years"},
		// A mistyped name names nobody: it is refused, not created.
		{"a mistyped user", []string{"admin", "user", "set", "alcie", "--priority", "2"}, 1, "unknown user \"alcie\""},
		{"a token for an unknown user", []string{"admin", "token", "create", "alcie"}, 1, "unknown user \"alcie\""},
		{"the tokens of an unknown user", []string{"token", "list", "--user", "alcie"}, 1, "unknown user \"alcie\""},
		{"a token of an unknown user", []string{"token", "revoke", "0123456789", "--user", "alcie"}, 1, "unknown user \"alcie\""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := append(append([]string{}, tc.args...), "--queue", q.url, "--token", q.admin)
			_, errOut, code := run(t, args...)
			if code != tc.code || !strings.Contains(errOut, tc.msg) {
				t.Fatalf("exit %d (want %d), stderr %q (want %q)", code, tc.code, errOut, tc.msg)
			}
			if after := state(); after != before {
				t.Fatalf("the refused command changed the queue:\n%s\nwas\n%s", after, before)
			}
		})
	}
	// Creating a user is asked for by name: --create.
	if out, errOut, code := run(t, "admin", "user", "set", "carol", "--max-cores", "4", "--create", "--queue", q.url, "--token", q.admin); code != 0 || !strings.Contains(out, "user carol") {
		t.Fatalf("set --create: exit %d, %q %q", code, out, errOut)
	}
	if u, err := q.q.User(context.Background(), "carol"); err != nil || u.MaxCores != 4 {
		t.Fatalf("carol after --create: %+v %v", u, err)
	}
	if out, errOut, code := run(t, "admin", "token", "create", "dora", "--create", "--queue", q.url, "--token", q.admin); code != 0 || !strings.HasPrefix(out, "hv_") {
		t.Fatalf("token create --create: exit %d, %q %q", code, out, errOut)
	}
	// A token's lifetime is asked with --ttl and shown by token list.
	if out, errOut, code := run(t, "admin", "token", "create", "alice", "--ttl", "2h", "--queue", q.url, "--token", q.admin); code != 0 || !strings.HasPrefix(out, "hv_") {
		t.Fatalf("token create --ttl: exit %d, %q %q", code, out, errOut)
	}
	if out, errOut, code := run(t, "token", "list", "--user", "alice", "--queue", q.url, "--token", q.admin); code != 0 || !strings.Contains(out, "EXPIRES") || !strings.Contains(out, "never") || strings.Count(out, "T") < 3 {
		t.Fatalf("token list: exit %d, %q %q", code, out, errOut)
	}
	// Another user's job is not an admin's to hide: the admin cancels it,
	// and a user cannot (404, as for a job that does not exist).
	if _, errOut, code := run(t, "cancel", "1", "--queue", q.url, "--token", q.token+"x"); code != 1 || !strings.Contains(errOut, "invalid token") {
		t.Fatalf("a wrong token: exit %d, stderr %q", code, errOut)
	}
}
