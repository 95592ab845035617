package slurm

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/harvest-hpc/harvest/adapters"
	"github.com/harvest-hpc/harvest/internal/command"
)

// genSqueue writes n jobs in the adapter's squeue format, in the shape of
// a busy cluster: a third running, the rest pending with varied limits.
func genSqueue(n int) []byte {
	var b strings.Builder
	users := []string{"alice", "bob", "carol", "dave"}
	limits := []string{"3:00", "1:00:00", "12:00:00", "2-00:00:00", "UNLIMITED"}
	for i := 0; i < n; i++ {
		id := 100000 + i
		u := users[i%len(users)]
		l := limits[i%len(limits)]
		if i%3 == 0 {
			fmt.Fprintf(&b, "%d|%s|RUNNING|None|%d|n[%d-%d]|%s|1795288000|1795289000|%d|batch\n",
				id, u, 1+i%8, i%900, i%900+i%8, l, 4294900000-i)
		} else {
			fmt.Fprintf(&b, "%d|%s|PENDING|Priority|%d||%s|1795289500|1795299000|%d|batch\n",
				id, u, 1+i%16, l, 4294900000-i*7%5000)
		}
	}
	return []byte(b.String())
}

func genSinfo(n int) []byte {
	var b strings.Builder
	states := []string{"allocated", "allocated", "mixed", "idle", "planned", "drained", "down*", "completing"}
	for i := 0; i < n; i++ {
		fmt.Fprintf(&b, "n%04d|%s|64\n", i, states[i%len(states)])
	}
	return []byte(b.String())
}

func BenchmarkParseSqueue10k(b *testing.B) {
	out := genSqueue(10000)
	b.SetBytes(int64(len(out)))
	for b.Loop() {
		jobs, err := ParseSqueue(out, 1795290000, nil)
		if err != nil || len(jobs) != 10000 {
			b.Fatal(err, len(jobs))
		}
	}
}

func BenchmarkParseSinfo1k(b *testing.B) {
	out := genSinfo(1000)
	b.SetBytes(int64(len(out)))
	for b.Loop() {
		nodes, _, err := ParseSinfo(out)
		if err != nil || len(nodes) != 1000 {
			b.Fatal(err, len(nodes))
		}
	}
}

func TestGeneratedOutputParses(t *testing.T) {
	jobs, err := ParseSqueue(genSqueue(300), 1795290000, nil)
	if err != nil || len(jobs) != 300 {
		t.Fatal(err, len(jobs))
	}
	if _, c, err := ParseSinfo(genSinfo(80)); err != nil || c.Total != 80 || c.Planned != 10 || c.Drained != 20 {
		t.Fatal(err, c)
	}
}

// The issue-16 scale: a 100,000-job, 10,000-node answer.
const (
	bigJobs  = 100_000
	bigNodes = 10_000
)

func BenchmarkReadSqueue100k(b *testing.B) {
	out := genSqueue(bigJobs)
	b.SetBytes(int64(len(out)))
	b.ReportAllocs()
	for b.Loop() {
		jobs, err := ReadSqueue(bytes.NewReader(out), 1795290000, nil)
		if err != nil || len(jobs) != bigJobs {
			b.Fatal(err, len(jobs))
		}
	}
}

func BenchmarkReadSinfo10k(b *testing.B) {
	out := genSinfo(bigNodes)
	b.SetBytes(int64(len(out)))
	b.ReportAllocs()
	for b.Loop() {
		nodes, _, err := ReadSinfo(bytes.NewReader(out))
		if err != nil || len(nodes) != bigNodes {
			b.Fatal(err, len(nodes))
		}
	}
}

// bigCluster is an adapter whose SLURM commands are scripts that print a
// 100,000-job, 10,000-node cluster from files: the snapshot's whole path,
// processes and pipes included.
func bigCluster(tb testing.TB, mod func(*Config)) *Adapter {
	tb.Helper()
	dir := tb.TempDir()
	write := func(name string, data []byte) {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
			tb.Fatal(err)
		}
	}
	write("squeue.txt", genSqueue(bigJobs))
	write("sinfo.txt", genSinfo(bigNodes))
	write("partitions.txt", fixture(tb, "scontrol_partitions.txt"))
	write("config.txt", fixture(tb, "preempt_config_off.txt"))
	scripts := map[string]string{
		// The pilot lists (-n TAG) are empty.
		"squeue":   `case "$*" in *" -n "*) exit 0 ;; esac; exec cat ` + dir + `/squeue.txt`,
		"sinfo":    `case "$1" in --version) echo "slurm 22.05.8" ;; *) exec cat ` + dir + `/sinfo.txt ;; esac`,
		"scontrol": `case "$*" in *config*) exec cat ` + dir + `/config.txt ;; *) exec cat ` + dir + `/partitions.txt ;; esac`,
	}
	for name, body := range scripts {
		if err := os.WriteFile(filepath.Join(dir, name), []byte("#!/bin/sh\n"+body+"\n"), 0o755); err != nil {
			tb.Fatal(err)
		}
	}
	cfg := DefaultConfig()
	cfg.User, cfg.BinDir, cfg.Partition = "root", dir, "batch"
	if mod != nil {
		mod(&cfg)
	}
	a, err := New(cfg)
	if err != nil {
		tb.Fatal(err)
	}
	return a
}

// BenchmarkSnapshot100kJobs10kNodes is one Snapshot of the large cluster,
// end to end: five commands run as processes (scontrol, three squeue,
// sinfo), their output streamed into the parsers, the cross-check, the
// snapshot built and validated. B/op bounds the memory one snapshot needs.
func BenchmarkSnapshot100kJobs10kNodes(b *testing.B) {
	a := bigCluster(b, nil)
	if _, err := a.Snapshot(context.Background()); err != nil { // learns the set-up once
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		s, err := a.Snapshot(context.Background())
		if err != nil || len(s.Jobs) != bigJobs || s.TotalNodes != bigNodes {
			b.Fatal(err, len(s.Jobs), s.TotalNodes)
		}
	}
}

// An answer past the cap fails the snapshot with an error that says what
// to change, and kills the command.
func TestAnAnswerPastTheCapIsRefused(t *testing.T) {
	a := bigCluster(t, func(c *Config) { c.MaxOutput = 1 << 20 }) // the job list is about 7 MiB
	_, err := a.Snapshot(context.Background())
	if !errors.Is(err, command.ErrOutputTooLarge) || !strings.Contains(err.Error(), "max_output_mb") {
		t.Fatalf("err = %v, want ErrOutputTooLarge naming max_output_mb", err)
	}
	if errors.Is(err, adapters.ErrUnreachable) {
		t.Errorf("a cluster too large for the cap is not unreachable: %v", err)
	}
	a = bigCluster(t, nil)
	s, err := a.Snapshot(context.Background())
	if err != nil || len(s.Jobs) != bigJobs {
		t.Fatalf("with the default cap: %v, %d jobs", err, len(s.Jobs))
	}
}
