package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// An admin's setting out of its range stops the agent before it starts,
// with the range, from the command line, the environment or the config
// file alike (issue: a typo held or released the whole cluster); every
// setting out of range is named at once. harvest decide and harvest
// queue serve check the same flags the same way (cmd_decide_test.go).
func TestAdminSettingsOutOfRangeAreRefused(t *testing.T) {
	dir := t.TempDir()
	state := filepath.Join(dir, "state")
	conf := filepath.Join(dir, "agent.yaml")
	os.WriteFile(conf, []byte("max-nodes: -5\n"), 0o600)
	for _, tc := range []struct {
		args []string
		env  map[string]string
		msgs []string
	}{
		{[]string{"--idle-margin", "1000"}, nil, []string{"--idle-margin 1000 is out of range: allowed 0 to 100"}},
		{[]string{"--min-nodes", "-1", "--poll", "10h"}, nil, []string{"--min-nodes -1 is out of range: allowed 0 to 1000000", "--poll 10h0m0s is out of range: allowed 10ms to 1h0m0s"}},
		{[]string{"--fast-poll", "-1s"}, nil, []string{"--fast-poll -1s is out of range: allowed 0 or 10ms to 1h0m0s"}},
		{[]string{"--min-pilot-time", "2h", "--max-pilot-time", "1h"}, nil, []string{"--min-pilot-time 2h0m0s is longer than --max-pilot-time 1h0m0s"}},
		{[]string{"--min-nodes", "20", "--max-nodes", "10"}, nil, []string{"--min-nodes 20 exceeds --max-nodes 10"}},
		{[]string{"--max-pilot-time", "10s"}, nil, []string{"--max-pilot-time 10s is out of range: allowed 0 or 1m0s to 8784h0m0s"}},
		{[]string{"--max-unfinished-tasks-per-user", "-3"}, nil, []string{"--max-unfinished-tasks-per-user -3 is out of range"}},
		{[]string{"--lease-ttl", "0s"}, nil, []string{"--lease-ttl 0s is out of range: allowed 1s to 1h0m0s"}},
		{nil, map[string]string{"HARVEST_MIN_NODES": "100000000"}, []string{"--min-nodes 100000000 is out of range"}},
		{[]string{"--config", conf}, nil, []string{"--max-nodes -5 is out of range"}},
	} {
		for k, v := range tc.env {
			t.Setenv(k, v)
		}
		args := append([]string{"agent", "--state-dir", state, "--no-queue", "--adapter", "sim", "--adapter-in-process"}, tc.args...)
		_, msg, code := runHarvest(t, "", args...)
		for k := range tc.env {
			os.Unsetenv(k)
		}
		if code != 2 {
			t.Errorf("%v %v: exit %d (%q), want 2", tc.args, tc.env, code, msg)
		}
		for _, m := range tc.msgs {
			if !strings.Contains(msg, m) {
				t.Errorf("%v %v: %q, want %q", tc.args, tc.env, msg, m)
			}
		}
	}
	if _, err := os.Lstat(state); err == nil {
		t.Error("the state directory was made for a refused configuration")
	}
	// The defaults are in range: every other test of agent, decide and
	// queue serve starts from them.
	_, msg, code := runHarvest(t, "", "queue", "serve", "--db", filepath.Join(dir, "q.db"), "--zombie-timeout", "-1m")
	if code != 2 || !strings.Contains(msg, "--zombie-timeout -1m0s is out of range: allowed 1s to 168h0m0s") {
		t.Errorf("queue serve: exit %d, %q", code, msg)
	}
}
