package slurm

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/harvest-hpc/harvest/cluster"
)

// The fuzz targets (CI runs each briefly, e.g.
// go test -run='^$' -fuzz='^FuzzParseSqueue$' -fuzztime=10s ./adapters/slurm):
// FuzzParseSqueue, FuzzParseSinfo, FuzzParseHolders, FuzzParsePartitions, FuzzParseSbatch,
// FuzzParseJobCheck, FuzzParseTimeLimit, FuzzParseConfig, FuzzParsePilotEnds.
// Without -fuzz they run their seed corpus (every fixture in testdata/) as
// ordinary tests.

func addFixtures(f *testing.F, glob string) {
	f.Helper()
	paths, err := filepath.Glob(filepath.Join("testdata", glob))
	if err != nil || len(paths) == 0 {
		f.Fatalf("no fixtures for %s: %v", glob, err)
	}
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
}

// checkErr fails unless a parser error is an ErrParse (never a panic, and
// never some other kind of error the caller would misread).
func checkErr(t *testing.T, err error) {
	if err != nil && !errors.Is(err, ErrParse) {
		t.Fatalf("error %v does not wrap ErrParse", err)
	}
}

func FuzzParseSqueue(f *testing.F) {
	addFixtures(f, "squeue_*.txt")
	f.Add([]byte("1|u|COMPLETING|None|1-3|n1|365-00:00:00|0|0|N/A|p\n"))
	f.Fuzz(func(t *testing.T, out []byte) {
		jobs, err := ParseSqueue(out, backfillNow, nil)
		checkErr(t, err)
		if err != nil {
			return
		}
		if len(jobs) == 0 && strings.TrimSpace(string(out)) != "" {
			t.Fatalf("non-empty output %q parsed to no jobs without an error", out)
		}
		s := cluster.Snapshot{Now: backfillNow, TotalNodes: 1, Jobs: jobs}
		seen := map[string]bool{}
		for _, j := range jobs {
			if seen[j.ID] {
				return // duplicate ids are possible in fuzzed input only
			}
			seen[j.ID] = true
		}
		if err := s.Validate(); err != nil {
			t.Fatalf("parsed jobs do not make a valid snapshot: %v\n%q", err, out)
		}
	})
}

func FuzzParseSinfo(f *testing.F) {
	addFixtures(f, "sinfo_*.txt")
	f.Fuzz(func(t *testing.T, out []byte) {
		nodes, c, err := ParseSinfo(out)
		checkErr(t, err)
		if err != nil {
			return
		}
		if len(nodes) == 0 || c.Total != len(nodes) || c.Idle+c.Allocated+c.Drained != c.Total || c.Planned > c.Idle {
			t.Fatalf("inconsistent counts %+v for %d nodes", c, len(nodes))
		}
	})
}

func FuzzParseHolders(f *testing.F) {
	f.Add([]byte("1|batch|3|1795290137|RUNNING\n2|debug|1|N/A|SUSPENDED\n"))
	f.Fuzz(func(t *testing.T, out []byte) {
		hs, err := ParseHolders(out)
		checkErr(t, err)
		for _, h := range hs {
			if h.ID == "" || h.Partition == "" || h.State == "" || h.Nodes <= 0 || h.Start < 0 {
				t.Fatalf("bad holder %+v", h)
			}
		}
	})
}

func FuzzParsePartitions(f *testing.F) {
	addFixtures(f, "scontrol_*.txt")
	f.Fuzz(func(t *testing.T, out []byte) {
		ps, err := ParsePartitions(out)
		checkErr(t, err)
		if err == nil && len(ps) == 0 {
			t.Fatal("no partitions without an error")
		}
		for _, p := range ps {
			if p.Name == "" || p.MaxTime == 0 || p.MaxTime < cluster.Unlimited {
				t.Fatalf("bad partition %+v", p)
			}
		}
	})
}

func FuzzParseSbatch(f *testing.F) {
	addFixtures(f, "sbatch_*.txt")
	f.Add([]byte("Submitted batch job 13\n"))
	f.Fuzz(func(t *testing.T, out []byte) {
		id, err := ParseSbatch(out)
		checkErr(t, err)
		if err == nil && (id == "" || id[0] < '0' || id[0] > '9') {
			t.Fatalf("id %q", id)
		}
	})
}

func FuzzParseJobCheck(f *testing.F) {
	addFixtures(f, "jobcheck_*.txt")
	f.Fuzz(func(t *testing.T, out []byte) {
		jobs, err := ParseJobCheck(out)
		checkErr(t, err)
		if err == nil && len(jobs) == 0 && strings.TrimSpace(string(out)) != "" {
			t.Fatalf("non-empty output %q parsed to no jobs", out)
		}
	})
}

func FuzzParseTimeLimit(f *testing.F) {
	for _, s := range []string{"3:00", "1:00:00", "1-00:00:00", "365-00:00:00", "UNLIMITED", "1-02", "0:00"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		l, err := ParseTimeLimit(s)
		checkErr(t, err)
		if err == nil && l < cluster.Unlimited {
			t.Fatalf("ParseTimeLimit(%q) = %d", s, l)
		}
	})
}

func FuzzParseConfig(f *testing.F) {
	addFixtures(f, "preempt_config_*.txt")
	f.Fuzz(func(t *testing.T, out []byte) {
		conf, err := ParseConfig(out)
		checkErr(t, err)
		if err == nil && len(conf) == 0 {
			t.Fatal("no error and no key")
		}
		// Whatever the config says, detection must not panic.
		h := Partition{Name: "batch", Nodes: "n[1-4]", PriorityTier: 10}
		DetectPreemption(conf, []Partition{h, {Name: "harvest", Nodes: "n[1-4]", PriorityTier: 1, PreemptMode: conf["PreemptMode"], GraceTime: 30}}, h, "")
		TimeMinSizes(conf["SLURM_VERSION"], conf)
	})
}

func FuzzParsePilotEnds(f *testing.F) {
	addFixtures(f, "preempt_squeue_pilot_ends.txt")
	f.Add([]byte("8|N/A\n"))
	f.Fuzz(func(t *testing.T, out []byte) {
		ends, err := ParsePilotEnds(out)
		checkErr(t, err)
		for id, e := range ends {
			if id == "" || e <= 0 {
				t.Fatalf("end %q -> %d", id, e)
			}
		}
	})
}
