package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/harvest-hpc/harvest/queue/api"
)

func TestRotatingThePilotTokenReplacesTheFileTheAgentReads(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "pilot.token")
	old, err := pilotToken(path)
	if err != nil {
		t.Fatal(err)
	}
	out, msg, code := runHarvest(t, "", "admin", "token", "rotate", "--pilot", "--state-dir", dir)
	if code != 0 || !strings.Contains(out, "restart the agent") {
		t.Fatalf("exit %d %q: %s", code, msg, out)
	}
	fi, err := os.Stat(path)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("token file %v mode %v", err, fi.Mode())
	}
	now, err := pilotToken(path)
	if err != nil || now == old {
		t.Fatalf("token after rotation %q (%v), before %q", now, err, old)
	}
	leftovers, _ := filepath.Glob(filepath.Join(dir, ".pilot.token-*"))
	if len(leftovers) != 0 {
		t.Errorf("temporary files left: %v", leftovers)
	}
}

func TestTokenRotateRefusesMixedOrMissingArguments(t *testing.T) {
	dir := t.TempDir()
	tests := []struct {
		name string
		args []string
	}{
		{"a user name with --pilot", []string{"alice", "--pilot", "--state-dir", dir}},
		{"--admin with --pilot", []string{"--pilot", "--admin", "--state-dir", dir}},
		{"neither a user nor --pilot", []string{"--queue", "unix://" + filepath.Join(dir, "none.sock")}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, msg, code := runHarvest(t, "", append([]string{"admin", "token", "rotate"}, tc.args...)...)
			if code != 2 || !strings.Contains(msg, "usage") {
				t.Errorf("exit %d %q, want a usage error", code, msg)
			}
		})
	}
	if _, err := os.Stat(filepath.Join(dir, "pilot.token")); err == nil {
		t.Error("a refused rotation wrote a pilot token")
	}
}

func TestDrainLineSaysWhatIsLeft(t *testing.T) {
	tests := []struct {
		name string
		d    api.DrainState
		want string
	}{
		{"before the first round", api.DrainState{Remaining: -1, StartedAt: 1}, "waiting for the agent's next round"},
		{"busy pilots finishing", api.DrainState{Remaining: 3, Busy: 2, Cancelled: 5}, "3 pilot(s) left (2 busy), 5 cancelled"},
		{"done", api.DrainState{Done: true, DoneAt: 1, Cancelled: 4}, "no pilot left"},
		{"a cancel error is shown", api.DrainState{Remaining: 1, LastError: "scancel: timeout"}, "scancel: timeout"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := drainLine(tc.d); !strings.Contains(got, tc.want) {
				t.Errorf("%q lacks %q", got, tc.want)
			}
		})
	}
}
