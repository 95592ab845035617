package pilot_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/harvest-hpc/harvest/master"
	"github.com/harvest-hpc/harvest/pilot"
)

func TestParseSqueueEnd(t *testing.T) {
	cases := []struct {
		name string
		out  string
		want time.Time
		err  error
	}{
		{"unix seconds from SLURM_TIME_FORMAT=%s", "1795300000\n", time.Unix(1795300000, 0), nil},
		{"the ISO form is read in local time", "2026-11-21T20:00:00", time.Date(2026, 11, 21, 20, 0, 0, 0, time.UTC), nil},
		{"an unlimited job has no deadline", "UNLIMITED\n", time.Time{}, pilot.ErrNoDeadline},
		{"a pending job shows N/A", "N/A", time.Time{}, pilot.ErrNoDeadline},
		{"empty output means no deadline", "", time.Time{}, pilot.ErrNoDeadline},
		{"garbage is an error, not a deadline", "soon", time.Time{}, errors.New("any")},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := pilot.ParseSqueueEnd(tc.out, time.UTC)
			switch {
			case tc.err == nil && err != nil:
				t.Fatalf("unexpected error %v", err)
			case errors.Is(tc.err, pilot.ErrNoDeadline) && !errors.Is(err, pilot.ErrNoDeadline):
				t.Fatalf("got %v, want ErrNoDeadline", err)
			case tc.err != nil && err == nil:
				t.Fatalf("got %v, want an error", got)
			}
			if !got.Equal(tc.want) {
				t.Fatalf("got %v want %v", got, tc.want)
			}
		})
	}
}

func FuzzParseSqueueEnd(f *testing.F) {
	for _, s := range []string{"1795300000", "2026-11-21T20:00:00", "N/A", "", "-1"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) { pilot.ParseSqueueEnd(s, time.UTC) })
}

func TestResolveDeadline(t *testing.T) {
	start := time.Unix(1000, 0)
	env := func(kv ...string) func(string) string {
		return func(k string) string {
			for i := 0; i+1 < len(kv); i += 2 {
				if kv[i] == k {
					return kv[i+1]
				}
			}
			return ""
		}
	}
	squeue := func(out string) func(string) (string, error) {
		return func(string) (string, error) { return out, nil }
	}
	cases := []struct {
		name   string
		src    pilot.DeadlineSources
		want   time.Time
		source string
	}{
		{"an explicit deadline wins over everything",
			pilot.DeadlineSources{Explicit: time.Unix(5000, 0), TimeLimit: time.Hour, Getenv: env("SLURM_JOB_END_TIME", "9000")},
			time.Unix(5000, 0), "--deadline"},
		{"SLURM's end time from the environment comes next",
			pilot.DeadlineSources{TimeLimit: time.Hour, Start: start, Getenv: env("SLURM_JOB_END_TIME", "9000", "SLURM_JOB_ID", "7"), Squeue: squeue("8000")},
			time.Unix(9000, 0), "SLURM_JOB_END_TIME"},
		{"squeue is asked when the environment has no end time",
			pilot.DeadlineSources{TimeLimit: time.Hour, Start: start, Getenv: env("SLURM_JOB_ID", "7"), Squeue: squeue("8000\n")},
			time.Unix(8000, 0), "squeue"},
		{"an unlimited SLURM job falls back to the time limit flag",
			pilot.DeadlineSources{TimeLimit: time.Minute, Start: start, Getenv: env("SLURM_JOB_ID", "7"), Squeue: squeue("UNLIMITED")},
			start.Add(time.Minute), "--time-limit"},
		{"without SLURM nor flags the pilot has no deadline",
			pilot.DeadlineSources{Start: start}, time.Time{}, "none"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, src, err := pilot.ResolveDeadline(tc.src)
			if err != nil || !got.Equal(tc.want) || src != tc.source {
				t.Fatalf("got %v from %q (%v), want %v from %q", got, src, err, tc.want, tc.source)
			}
		})
	}
}

func TestConfigValidate(t *testing.T) {
	dir := t.TempDir()
	good := func() pilot.Config {
		c := pilot.DefaultConfig()
		c.PilotID, c.Token, c.StateDir = "7", "tok", dir
		return c
	}
	if err := good().Validate(); err != nil {
		t.Fatalf("a complete config is refused: %v", err)
	}
	if left, _ := os.ReadDir(dir); len(left) != 0 {
		t.Fatalf("the state directory's check left %v behind", left)
	}
	file := filepath.Join(t.TempDir(), "f")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name string
		mod  func(*pilot.Config)
	}{
		{"a pilot without id is refused", func(c *pilot.Config) { c.PilotID = "" }},
		{"a pilot without token is refused", func(c *pilot.Config) { c.Token = "" }},
		{"a missing state directory is refused", func(c *pilot.Config) { c.StateDir = dir + "/nope" }},
		{"a state directory that is a file is refused", func(c *pilot.Config) { c.StateDir = file }},
		// Nothing can be created in /proc, root or not: a directory that
		// cannot hold the checkpoint is refused at start, not at election.
		{"a state directory that cannot hold files is refused", func(c *pilot.Config) { c.StateDir = "/proc" }},
		{"zero slots are refused", func(c *pilot.Config) { c.Slots = 0 }},
		{"an unknown journal mode is refused at start, not at election", func(c *pilot.Config) { c.Master.JournalMode = "MEMORY" }},
		{"WAL on the shared state directory is refused at start", func(c *pilot.Config) { c.Master.JournalMode = "WAL" }},
		{"a worker timeout shorter than the long-poll is refused", func(c *pilot.Config) { c.Master.WorkerTimeout = time.Second }},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := good()
			tc.mod(&c)
			if err := c.Validate(); !errors.Is(err, pilot.ErrInvalidConfig) {
				t.Fatalf("got %v, want ErrInvalidConfig", err)
			}
		})
	}
	c := good()
	c.StateDir = "/proc"
	if err := c.Validate(); !errors.Is(err, master.ErrStateDir) || !strings.Contains(err.Error(), "create a file") ||
		!strings.Contains(err.Error(), "docs/pilot.md") {
		t.Errorf("the refusal of /proc says %q: want the state directory named, the step that failed and where to read more", err)
	}
}

// The fixtures are real `squeue -h -j ID -o %e` output of SLURM 22.05 on
// the mini-cluster, with and without SLURM_TIME_FORMAT=%s, for one job.
func TestParseSqueueEndFromRealSlurmOutput(t *testing.T) {
	unix, err := os.ReadFile("testdata/squeue-end-unix.txt")
	if err != nil {
		t.Fatal(err)
	}
	iso, err := os.ReadFile("testdata/squeue-end-iso.txt")
	if err != nil {
		t.Fatal(err)
	}
	a, err := pilot.ParseSqueueEnd(string(unix), time.UTC)
	if err != nil {
		t.Fatal(err)
	}
	b, err := pilot.ParseSqueueEnd(string(iso), time.UTC) // the cluster's local time is UTC
	if err != nil {
		t.Fatal(err)
	}
	if !a.Equal(b) {
		t.Fatalf("the two forms of the same end time differ: %v vs %v", a, b)
	}
}
