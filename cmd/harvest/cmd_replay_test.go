package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Bad input and a cluster that is not there give a clear error, exit 2,
// and submit nothing (no SLURM needed: the checks come before any sbatch).
func TestReplayCommandRefusesClearly(t *testing.T) {
	dir := t.TempDir()
	wl := filepath.Join(dir, "w.txt")
	if err := os.WriteFile(wl, []byte(simThesis), 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "out")
	base := []string{"replay", "--workload", wl, "--nodes", "4", "--trace-nodes", "4", "--out", out}
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"unknown run", []string{"--from", "0", "--to", "1000", "--runs", "baseline,harvest"}, `"harvest" is not baseline, polling or preemption`},
		{"empty window", []string{"--from", "1000", "--to", "1000"}, "is not a window"},
		{"no job in the window", []string{"--from", "200", "--to", "300"}, "no job of the trace is submitted in [200, 300)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, msg, code := runHarvest(t, "", append(append([]string{}, base...), tc.args...)...)
			if code != 2 || !strings.Contains(msg, tc.want) {
				t.Errorf("exit %d %q, want 2 and %q", code, msg, tc.want)
			}
		})
	}
	t.Run("cluster not running", func(t *testing.T) {
		t.Setenv("SLURM_CONF", filepath.Join(dir, "no-such-slurm.conf"))
		_, msg, code := runHarvest(t, "", append(base, "--from", "0", "--to", "1000")...)
		want := "cannot reach the SLURM controller"
		if os.Geteuid() != 0 {
			want = "run it as root"
		}
		if code != 2 || !strings.Contains(msg, want) {
			t.Errorf("exit %d %q, want 2 and %q", code, msg, want)
		}
	})
	if _, err := os.Stat(out); !os.IsNotExist(err) {
		t.Errorf("a refused replay wrote %s (%v)", out, err)
	}
}
