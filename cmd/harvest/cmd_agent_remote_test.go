package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/harvest-hpc/harvest/queue"
	"github.com/harvest-hpc/harvest/queue/api"
	"github.com/harvest-hpc/harvest/queue/queuetest"
)

// An agent of a second cluster uses another site's queue: it registers its
// pilots' token with its agent token, reports every round, and its pilots
// are told the remote queue's URL and their own token.
func TestAnAgentUsesARemoteQueue(t *testing.T) {
	e := queuetest.New(t)
	ctx := context.Background()
	tok, err := e.Q.AddSite(ctx, "b")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	tokFile := filepath.Join(dir, "agent.token")
	if err := os.WriteFile(tokFile, []byte(tok.Token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	// The queue has work, so the site's agent sees a backlog.
	if _, err := e.Q.Submit(ctx, "alice", api.JobSpec{Dataset: e.Dataset("ds", 30), Command: []string{"p"}, BatchSize: 1}); err != nil {
		t.Fatal(err)
	}
	dumps := filepath.Join(dir, "rounds")
	app := newApp()
	var out, errOut bytes.Buffer
	app.Writer, app.ErrWriter = &out, &errOut
	app.ExitErrHandler = func(*cli.Context, error) {}
	actx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		done <- app.RunContext(actx, []string{"harvest", "agent", "--queue", e.URL(), "--agent-token-file", tokFile,
			"--state-dir", filepath.Join(dir, "state"), "--adapter", "sim", "--adapter-in-process",
			"--adapter-opt", "nodes=4", "--adapter-opt", "load=0", "--poll", "50ms", "--dump-snapshots", dumps,
			"--pilot-command", "/bin/true"})
	}()
	defer func() {
		stop()
		<-done
	}()
	// Wait for a round the queue heard and the agent acted on.
	deadline := time.Now().Add(20 * time.Second)
	var site api.Site
	for time.Now().Before(deadline) {
		l, err := e.Q.Sites(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range l.Sites {
			if s.Name == "b" {
				site = s
			}
		}
		if site.Held > 0 {
			break
		}
		select {
		case err := <-done:
			t.Fatalf("the agent stopped: %v\n%s", err, errOut.String())
		case <-time.After(50 * time.Millisecond):
		}
	}
	if !site.Alive || site.Held == 0 || site.AgentAt == 0 {
		t.Fatalf("site b as the queue sees it: %+v\nagent log:\n%s", site, errOut.String())
	}
	if !strings.Contains(errOut.String(), "site=b") {
		t.Fatalf("the agent did not log its site:\n%s", errOut.String())
	}
	// The pilot token the agent registered is its pilots' own.
	b, err := os.ReadFile(filepath.Join(dir, "state", "pilot.token"))
	if err != nil {
		t.Fatal(err)
	}
	id, err := e.Q.Identify(ctx, queue.Credentials{Token: strings.TrimSpace(string(b))})
	if err != nil || id.Role != api.RolePilot || id.Site != "b" {
		t.Fatalf("the registered pilot token is %+v %v", id, err)
	}
}

func TestARemoteQueueRefusesTheHostedQueuesSettings(t *testing.T) {
	tok := filepath.Join(t.TempDir(), "t")
	os.WriteFile(tok, []byte("x"), 0o600)
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"no agent token", []string{"--queue", "http://127.0.0.1:1"}, "--agent-token-file"},
		{"a hosted queue's listener", []string{"--queue", "http://127.0.0.1:1", "--agent-token-file", tok, "--listen", ":0"}, "--listen configures a hosted queue"},
		{"no-queue too", []string{"--queue", "http://127.0.0.1:1", "--agent-token-file", tok, "--no-queue"}, "--no-queue configures a hosted queue"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, stderr, code := runHarvest(t, "", append([]string{"agent", "--adapter-in-process", "--adapter", "sim"}, tc.args...)...)
			if code != 2 || !strings.Contains(stderr, tc.want) {
				t.Fatalf("exit %d, stderr %q; want 2 and %q", code, stderr, tc.want)
			}
		})
	}
}
