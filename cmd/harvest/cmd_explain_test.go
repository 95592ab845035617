package main

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/harvest-hpc/harvest/adapters/adaptertest"
	"github.com/harvest-hpc/harvest/agent"
	"github.com/harvest-hpc/harvest/cluster"
	"github.com/harvest-hpc/harvest/queue/api"
)

// dumpRounds runs three real rounds with --dump-snapshots: fill the idle
// nodes, hold, then release pilots for a waiting job.
func dumpRounds(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	m := adaptertest.NewMemory(4)
	cfg := agent.DefaultConfig()
	cfg.DumpDir = dir
	cfg.Policy.MinNodes = 0
	r := agent.NewReconciler(m, nil, cfg, nil)
	ctx := context.Background()
	round := func() {
		if _, err := r.Round(ctx); err != nil {
			t.Fatal(err)
		}
		m.Advance(10)
	}
	round()
	round()
	m.AddJob(cluster.Job{ID: "j42", User: "u", State: cluster.Pending, Nodes: 2, TimeLimit: 600})
	round()
	return dir
}

func TestExplainShowsEachRoundsCaseFiguresAndReason(t *testing.T) {
	dir := dumpRounds(t)
	tests := []struct {
		name      string
		args      []string
		wantLines int
		want      []string
		not       []string
	}{
		{
			name: "the last rounds in the order they ran, with the figures",
			args: []string{"--last", "3"}, wantLines: 4,
			want: []string{"TIME (UTC)", "CASE", "IDLE", "HELD", "TOP JOB", "MAX TIME", "REASON",
				"no-pending-job", "submit 4 (limit unlimited)", "release-for-top-job", "release 2", "job j42 can start now"},
		},
		{
			name: "--last 1 shows only the newest round",
			args: []string{"--last", "1"}, wantLines: 2,
			want: []string{"release-for-top-job"}, not: []string{"no-pending-job"},
		},
		{
			name: "--acting skips rounds that did nothing",
			args: []string{"--acting", "--last", "5"}, wantLines: 3,
			want: []string{"no-pending-job", "release-for-top-job"}, not: []string{"no-idle-nodes"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			out, errMsg, code := runHarvest(t, "", append([]string{"explain", "--dir", dir}, tc.args...)...)
			if code != 0 {
				t.Fatalf("exit %d: %s", code, errMsg)
			}
			lines := strings.Split(strings.TrimSpace(out), "\n")
			if len(lines) != tc.wantLines {
				t.Errorf("%d lines, want %d:\n%s", len(lines), tc.wantLines, out)
			}
			for _, w := range tc.want {
				if !strings.Contains(out, w) {
					t.Errorf("output lacks %q:\n%s", w, out)
				}
			}
			for _, n := range tc.not {
				if strings.Contains(out, n) {
					t.Errorf("output shows %q:\n%s", n, out)
				}
			}
		})
	}
}

func TestExplainJSONCarriesTheFiguresOfTheRound(t *testing.T) {
	dir := dumpRounds(t)
	out, errMsg, code := runHarvest(t, "", "explain", "--dir", dir, "--last", "1", "--json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errMsg)
	}
	var r explained
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatal(err)
	}
	if r.Case != "release-for-top-job" || r.TopJob != "j42" || r.Held != 4 || r.Idle != 0 || r.Total != 4 {
		t.Errorf("round %+v", r)
	}
	if time.Unix(r.Now, 0).Before(time.Unix(1_000_000, 0)) {
		t.Errorf("time %d", r.Now)
	}
}

func TestExplainRefusesClearly(t *testing.T) {
	empty := t.TempDir()
	corrupt := dumpRounds(t)
	files, _ := filepath.Glob(filepath.Join(corrupt, "snapshot-*.decision.json"))
	os.WriteFile(files[len(files)-1], []byte("{not json"), 0o644)
	tests := []struct {
		name, dir, last string
		wantCode        int
		wantMsg         string
	}{
		{"a directory without dumps says how to make them", empty, "3", 1, "--dump-snapshots"},
		{"a missing directory is named", filepath.Join(empty, "nope"), "3", 1, "nope"},
		{"a corrupt decision file is named", corrupt, "3", 1, ".decision.json"},
		{"a non-positive --last is a usage error", empty, "0", 2, "--last"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, msg, code := runHarvest(t, "", "explain", "--dir", tc.dir, "--last", tc.last)
			if code != tc.wantCode || !strings.Contains(msg, tc.wantMsg) {
				t.Errorf("exit %d %q; want %d and %q", code, msg, tc.wantCode, tc.wantMsg)
			}
		})
	}
}

// fakeAgent answers GET /v1/admin/agent as the running agent does.
func fakeAgent(t *testing.T, dumpDir string) string {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != api.PathAgent || r.Header.Get("Authorization") != "Bearer admin-token" {
			http.Error(w, `{"error": "not found"}`, http.StatusNotFound)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(api.AgentInfo{Adapter: "slurm", StateDir: "/var/tmp/x", DumpDir: dumpDir})
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

func TestExplainFindsTheDumpDirectoryByItself(t *testing.T) {
	dir := dumpRounds(t)
	none := filepath.Join(t.TempDir(), "none.sock")
	old := defaultDumpDir
	t.Cleanup(func() { defaultDumpDir = old })
	absent := filepath.Join(t.TempDir(), "absent")
	config := writeTemp(t, "poll: 10s\ndump-snapshots: "+dir+"\n")
	noKey := writeTemp(t, "poll: 10s\n")
	tests := []struct {
		name     string
		args     []string
		fallback string // the default directory, when it should exist
		wantCode int
		want     string
	}{
		{name: "the running agent tells where it dumps", args: []string{"--queue", fakeAgent(t, dir), "--token", "admin-token"}, want: "release-for-top-job"},
		{name: "an agent that dumps nothing says how to make it", args: []string{"--queue", fakeAgent(t, ""), "--token", "admin-token"},
			wantCode: 1, want: "runs without --dump-snapshots"},
		{name: "with the agent down its config file names the directory", args: []string{"--queue", "unix://" + none, "--config", config}, want: "release-for-top-job"},
		{name: "with neither, the default directory is used", args: []string{"--queue", "unix://" + none, "--config", noKey}, fallback: dir, want: "release-for-top-job"},
		{name: "with nothing to go by, the error says what was tried and what to pass", args: []string{"--queue", "unix://" + none, "--config", noKey},
			wantCode: 1, want: "sets no dump-snapshots; " + absent + " does not exist. Pass --dir DIR"},
		{name: "--dir wins over everything", args: []string{"--dir", dir, "--queue", fakeAgent(t, "/nonexistent"), "--token", "admin-token"}, want: "release-for-top-job"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			defaultDumpDir = absent
			if tc.fallback != "" {
				defaultDumpDir = tc.fallback
			}
			t.Setenv("HARVEST_DUMP_SNAPSHOTS", "")
			os.Unsetenv("HARVEST_DUMP_SNAPSHOTS")
			out, msg, code := runHarvest(t, "", append([]string{"explain", "--last", "3"}, tc.args...)...)
			if code != tc.wantCode || !strings.Contains(out+msg, tc.want) {
				t.Errorf("exit %d, out %q, err %q; want exit %d and %q", code, out, msg, tc.wantCode, tc.want)
			}
		})
	}
}
