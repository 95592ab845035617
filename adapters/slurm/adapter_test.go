package slurm

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/harvest-hpc/harvest/adapters"
	"github.com/harvest-hpc/harvest/cluster"
)

// call is one command the fake saw.
type call struct {
	name  string
	args  []string
	env   []string
	stdin string
}

// fakeSlurm answers commands with closure fields, one per binary.
type fakeSlurm struct {
	calls                                           []call
	squeue, sinfo, scontrol, sbatch, scancel, sdiag func(c call) (result, error)
	// version answers `sinfo --version`, config `scontrol show config`
	// and update `scontrol update`.
	version, config, update func(c call) (result, error)
}

func (f *fakeSlurm) run(ctx context.Context, name string, args, env []string, stdin []byte, parse func(io.Reader) error) (result, error) {
	c := call{name: filepath.Base(name), args: args, env: env, stdin: string(stdin)}
	f.calls = append(f.calls, c)
	var h func(call) (result, error)
	switch c.name {
	case "squeue":
		h = f.squeue
	case "sinfo":
		h = f.sinfo
		if slices.Contains(args, "--version") {
			h = f.version
		}
	case "scontrol":
		h = f.scontrol
		switch {
		case slices.Contains(args, "config"):
			h = f.config
		case slices.Contains(args, "update"):
			h = f.update
		}
	case "sbatch":
		h = f.sbatch
	case "scancel":
		h = f.scancel
	case "sdiag":
		h = f.sdiag
	}
	if h == nil {
		return result{}, fmt.Errorf("%w %s: unexpected command", errStart, name)
	}
	if err := ctx.Err(); err != nil {
		return result{}, err
	}
	res, err := h(c)
	if err == nil && parse != nil {
		// As the real runner: the output goes to the parser, not back.
		err = parse(bytes.NewReader(res.stdout))
		res.stdout = nil
	}
	return res, err
}

func (f *fakeSlurm) names() []string {
	var out []string
	for _, c := range f.calls {
		out = append(out, c.name)
	}
	return out
}

func ok(out []byte) func(call) (result, error) {
	return func(call) (result, error) { return result{stdout: out}, nil }
}

func fail(code int, stderr string) func(call) (result, error) {
	return func(call) (result, error) {
		return result{stderr: []byte(stderr)}, &cmdError{code: code, stderr: stderr}
	}
}

func timeout(call) (result, error) {
	return result{}, fmt.Errorf("sbatch: %w", context.DeadlineExceeded)
}

func newTestAdapter(t *testing.T, f *fakeSlurm, mod func(*Config)) *Adapter {
	t.Helper()
	cfg := DefaultConfig()
	cfg.User = "root"
	if mod != nil {
		mod(&cfg)
	}
	a, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	a.run = f.run
	a.now = func() time.Time { return time.Unix(backfillNow, 0) }
	return a
}

// backfillCluster answers like the cluster of the backfill fixtures (no
// preemptible partition; no running pilot's end was pulled in).
func backfillCluster(t *testing.T) *fakeSlurm {
	return &fakeSlurm{
		scontrol: ok(fixture(t, "scontrol_partitions.txt")),
		squeue: func(c call) (result, error) {
			switch {
			case slices.Contains(c.args, pilotEndFormat):
				return result{}, nil
			case slices.Contains(c.args, "-n"):
				return result{stdout: fixture(t, "squeue_pilots_backfill.txt")}, nil
			}
			return result{stdout: fixture(t, "squeue_backfill.txt")}, nil
		},
		sinfo:   ok(fixture(t, "sinfo_planned.txt")),
		version: ok(fixture(t, "sinfo_version.txt")),
		config:  ok(fixture(t, "preempt_config_off.txt")),
	}
}

func TestSnapshotAsksForTheHarvestedPartition(t *testing.T) {
	f := backfillCluster(t)
	a := newTestAdapter(t, f, nil)
	s, err := a.Snapshot(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if s.Now != backfillNow || s.TotalNodes != 4 || s.IdleNodes != 1 || s.PlannedNodes != 1 || len(s.Jobs) != 6 || len(s.Pilots()) != 1 {
		t.Errorf("snapshot %+v", s)
	}
	// The first snapshot learns the set-up once (version, config, partitions).
	if got := f.names(); !slices.Equal(got, []string{"sinfo", "scontrol", "scontrol", "scontrol", "squeue", "squeue", "squeue", "sinfo"}) {
		t.Fatalf("commands %v", got)
	}
	f.calls = nil
	if _, err := a.Snapshot(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := f.names(); !slices.Equal(got, []string{"scontrol", "squeue", "squeue", "squeue", "sinfo"}) {
		t.Fatalf("commands of the next snapshot %v", got)
	}
	jobs, pilots, ends, sinfo := f.calls[1], f.calls[2], f.calls[3], f.calls[4]
	if strings.Join(ends.args, " ") != "-a -h -r -p batch -u root -n harvest-pilot -t RUNNING -o "+pilotEndFormat || !slices.Contains(ends.env, "SLURM_TIME_FORMAT=%s") {
		t.Errorf("pilot ends squeue args %q", ends.args)
	}
	if !slices.Contains(jobs.env, "SLURM_TIME_FORMAT=%s") {
		t.Errorf("squeue runs without SLURM_TIME_FORMAT=%%s in its environment")
	}
	if strings.Join(jobs.args, " ") != "-a -h -r -p batch -t "+squeueStates+" -o "+squeueFormat {
		t.Errorf("squeue args %q", jobs.args)
	}
	if !slices.Contains(pilots.args, "-u") || !slices.Contains(pilots.args, "root") || !slices.Contains(pilots.args, "harvest-pilot") {
		t.Errorf("pilot squeue args %q", pilots.args)
	}
	if strings.Join(sinfo.args, " ") != "-h -N -p batch -o "+sinfoFormat {
		t.Errorf("sinfo args %q", sinfo.args)
	}
}

func TestSnapshotUsesTheConfiguredPartitionAndItsMaxTime(t *testing.T) {
	f := backfillCluster(t)
	a := newTestAdapter(t, f, func(c *Config) { c.Partition = "short" })
	s, err := a.Snapshot(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if s.Partition != "short" || s.MaxTime == nil || *s.MaxTime != 1800 {
		t.Errorf("partition %q MaxTime %v", s.Partition, s.MaxTime)
	}
	if !slices.Contains(f.calls[4].args, "short") {
		t.Errorf("squeue not filtered on short: %q", f.calls[4].args)
	}
}

func TestSnapshotNeverLooksRealWhenSomethingFails(t *testing.T) {
	down := fail(1, "slurm_load_jobs error: Unable to contact slurm controller (connect failure)\n")
	tests := []struct {
		name        string
		mod         func(f *fakeSlurm)
		unreachable bool
	}{
		{"squeue cannot contact the controller", func(f *fakeSlurm) { f.squeue = down }, true},
		{"scontrol cannot contact the controller", func(f *fakeSlurm) {
			f.scontrol = fail(1, "slurm_load_partitions: Unable to contact slurm controller (connect failure)\n")
		}, true},
		{"sinfo times out", func(f *fakeSlurm) { f.sinfo = timeout }, true},
		{"squeue is not installed", func(f *fakeSlurm) { f.squeue = nil }, true},
		{"sinfo lists no nodes", func(f *fakeSlurm) { f.sinfo = ok(nil) }, false},
		{"squeue prints garbage", func(f *fakeSlurm) { f.squeue = ok([]byte("JOBID PARTITION NAME\n")) }, false},
		{"the configured partition does not exist", func(f *fakeSlurm) {
			f.scontrol = ok([]byte("PartitionName=other Default=YES MaxTime=UNLIMITED State=UP\n"))
		}, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := backfillCluster(t)
			tc.mod(f)
			a := newTestAdapter(t, f, func(c *Config) { c.Partition = "batch" })
			s, err := a.Snapshot(context.Background())
			if err == nil {
				t.Fatalf("no error, snapshot %+v", s)
			}
			if errors.Is(err, adapters.ErrUnreachable) != tc.unreachable {
				t.Errorf("err = %v; unreachable want %v", err, tc.unreachable)
			}
			if s.TotalNodes != 0 || s.Jobs != nil {
				t.Errorf("a failed snapshot carries data: %+v", s)
			}
		})
	}
}

func TestQueryTimesOutForReal(t *testing.T) {
	a := newTestAdapter(t, &fakeSlurm{}, func(c *Config) { c.Timeout = 200 * time.Millisecond })
	a.run = a.execRun
	start := time.Now()
	_, err := a.query(context.Background(), "sleep", []string{"5"})
	if !errors.Is(err, adapters.ErrUnreachable) {
		t.Fatalf("err = %v, want ErrUnreachable", err)
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("timeout took %s", d)
	}
	if _, err := a.query(context.Background(), "/nonexistent/squeue", nil); !errors.Is(err, adapters.ErrUnreachable) {
		t.Errorf("missing binary: %v", err)
	}
	if _, err := a.query(context.Background(), "false", nil); err == nil || errors.Is(err, adapters.ErrUnreachable) {
		t.Errorf("a plain failure must not read as unreachable: %v", err)
	}
}

func TestSubmitArguments(t *testing.T) {
	spec := adapters.PilotSpec{TimeLimit: 10*60 + 59, Command: []string{"/usr/bin/harvest", "pilot"}}
	tests := []struct {
		name     string
		mod      func(*Config)
		spec     func(s *adapters.PilotSpec)
		snapshot bool // take a snapshot first (learns MaxTime)
		want     []string
		absent   []string
	}{
		{"a limit is rounded down to whole minutes", nil, nil, false,
			[]string{"--time=10", "--job-name=harvest-pilot", "--nodes=1", "--exclusive", "--no-requeue", "--export=NONE", "--parsable"},
			[]string{"--partition=batch"}},
		{"an unlimited pilot in an unlimited partition asks for UNLIMITED", nil,
			func(s *adapters.PilotSpec) { s.TimeLimit = cluster.Unlimited }, false,
			[]string{"--time=UNLIMITED"}, nil},
		{"an unlimited pilot asks for the partition's MaxTime", func(c *Config) { c.Partition = "short" },
			func(s *adapters.PilotSpec) { s.TimeLimit = cluster.Unlimited }, false,
			[]string{"--time=30", "--partition=short"}, nil},
		{"a limit above the partition's MaxTime is capped", func(c *Config) { c.Partition = "short" },
			func(s *adapters.PilotSpec) { s.TimeLimit = 5 * 3600 }, true,
			[]string{"--time=30"}, nil},
		{"account, QOS, output dir and extra args are passed", func(c *Config) {
			c.Account, c.QOS, c.OutputDir = "research", "harvest", "/shared/pilots"
			c.SbatchArgs = []string{"--constraint=bigmem"}
			c.Exclusive = false
		}, nil, false,
			[]string{"--account=research", "--qos=harvest", "--chdir=/shared/pilots", "--output=/shared/pilots/harvest-pilot-%j.out", "--constraint=bigmem"},
			[]string{"--exclusive"}},
		{"the spec's work dir and output win over the output dir", func(c *Config) { c.OutputDir = "/shared/pilots" },
			func(s *adapters.PilotSpec) { s.WorkDir, s.Output = "/scratch", "/scratch/p-%j.log" }, false,
			[]string{"--chdir=/scratch", "--output=/scratch/p-%j.log"}, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := backfillCluster(t)
			f.sbatch = ok([]byte("42\n"))
			a := newTestAdapter(t, f, tc.mod)
			if tc.snapshot {
				if _, err := a.Snapshot(context.Background()); err != nil {
					t.Fatal(err)
				}
			}
			s := spec
			if tc.spec != nil {
				tc.spec(&s)
			}
			id, err := a.Submit(context.Background(), s)
			if err != nil || id != "42" {
				t.Fatalf("Submit = %q, %v", id, err)
			}
			sb := f.calls[len(f.calls)-1]
			for _, w := range tc.want {
				if !slices.Contains(sb.args, w) {
					t.Errorf("missing %s in %q", w, sb.args)
				}
			}
			for _, w := range tc.absent {
				if slices.Contains(sb.args, w) {
					t.Errorf("unexpected %s in %q", w, sb.args)
				}
			}
			if !strings.HasPrefix(sb.stdin, "#!/bin/sh\n") || !strings.Contains(sb.stdin, "exec /usr/bin/harvest pilot\n") {
				t.Errorf("script:\n%s", sb.stdin)
			}
		})
	}
}

func TestSubmitRefusesBadSpecsWithoutRunningSbatch(t *testing.T) {
	for name, spec := range map[string]adapters.PilotSpec{
		"a limit under one minute":          {TimeLimit: 59, Command: []string{"x"}},
		"no command":                        {TimeLimit: 600},
		"an env name that is not a name":    {TimeLimit: 600, Command: []string{"x"}, Env: map[string]string{"A-B": "1"}},
		"a command starting with a dash":    {TimeLimit: 600, Command: []string{"-x"}},
		"a NUL byte in an argument":         {TimeLimit: 600, Command: []string{"x", "a\x00b"}},
		"a negative limit (not unlimited)":  {TimeLimit: -7, Command: []string{"x"}},
		"an env value holding a NUL byte":   {TimeLimit: 600, Command: []string{"x"}, Env: map[string]string{"A": "\x00"}},
		"an empty env name":                 {TimeLimit: 600, Command: []string{"x"}, Env: map[string]string{"": "1"}},
		"an empty first word of the argv":   {TimeLimit: 600, Command: []string{""}},
		"zero, which SLURM reads as no cap": {TimeLimit: 0, Command: []string{"x"}},
	} {
		t.Run(name, func(t *testing.T) {
			f := backfillCluster(t)
			a := newTestAdapter(t, f, nil)
			if _, err := a.Submit(context.Background(), spec); !errors.Is(err, adapters.ErrInvalidSpec) {
				t.Errorf("err = %v, want ErrInvalidSpec", err)
			}
			if slices.Contains(f.names(), "sbatch") {
				t.Error("sbatch ran")
			}
		})
	}
}

func TestSubmitErrors(t *testing.T) {
	tests := []struct {
		name   string
		sbatch func(call) (result, error)
		want   error // nil: a plain error, neither unreachable nor unknown
	}{
		{"a timeout after sbatch started leaves the outcome unknown", timeout, adapters.ErrOutcomeUnknown},
		{"a dead controller is unreachable", fail(1, string(fixture(t, "sbatch_ctld_down.stderr"))), adapters.ErrUnreachable},
		{"a lost reply leaves the outcome unknown", fail(1, "sbatch: error: Batch job submission failed: Socket timed out on send/recv operation\n"), adapters.ErrOutcomeUnknown},
		{"a rejection is a plain error", fail(1, string(fixture(t, "sbatch_bad_partition.stderr"))), nil},
		{"success with an unreadable id leaves the outcome unknown", ok([]byte("Submitted batch job 12\n")), adapters.ErrOutcomeUnknown},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := backfillCluster(t)
			f.sbatch = tc.sbatch
			a := newTestAdapter(t, f, nil)
			_, err := a.Submit(context.Background(), adapters.PilotSpec{TimeLimit: 600, Command: []string{"x"}})
			if err == nil {
				t.Fatal("no error")
			}
			if tc.want != nil && !errors.Is(err, tc.want) {
				t.Errorf("err = %v, want %v", err, tc.want)
			}
			if tc.want == nil && (errors.Is(err, adapters.ErrUnreachable) || errors.Is(err, adapters.ErrOutcomeUnknown)) {
				t.Errorf("a rejection reads as %v", err)
			}
			if tc.want == nil && !strings.Contains(err.Error(), "Invalid partition name specified") {
				t.Errorf("the reason is lost: %v", err)
			}
		})
	}
}

func TestCancel(t *testing.T) {
	tests := []struct {
		name       string
		id         adapters.PilotID
		squeue     func(call) (result, error)
		scancel    func(call) (result, error)
		want       error
		wantCancel bool
	}{
		{"a pending pilot is cancelled by name and user", "6", ok(fixture(t, "jobcheck_pilot.txt")), ok(nil), nil, true},
		{"a foreign job is refused", "3", ok(fixture(t, "jobcheck_foreign.txt")), ok(nil), adapters.ErrNotPilot, false},
		{"a foreign job whose name holds a newline is refused", "4", ok(fixture(t, "jobcheck_newline.txt")), ok(nil), adapters.ErrNotPilot, false},
		{"a job of another user named like the tag is refused", "6", ok([]byte("6|alice|RUNNING|harvest-pilot\n")), ok(nil), adapters.ErrNotPilot, false},
		{"a cancelled pilot needs nothing", "6", ok(fixture(t, "jobcheck_cancelled.txt")), nil, nil, false},
		{"a purged job needs nothing", "999999", fail(1, string(fixture(t, "jobcheck_unknown.stderr"))), nil, nil, false},
		{"a job squeue no longer lists needs nothing", "6", ok(nil), nil, nil, false},
		{"an id that is not a job id is refused", "6; rm -rf /", nil, nil, adapters.ErrNotPilot, false},
		{"a dead controller is unreachable", "6", fail(1, "slurm_load_jobs error: Unable to contact slurm controller (connect failure)"), nil, adapters.ErrUnreachable, false},
		{"a pilot that ended between check and scancel is fine", "6", ok(fixture(t, "jobcheck_pilot.txt")),
			fail(1, "scancel: error: Kill job error on job id 6: Job/step already completing or completed"), nil, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := &fakeSlurm{squeue: tc.squeue, scancel: tc.scancel}
			a := newTestAdapter(t, f, nil)
			err := a.Cancel(context.Background(), tc.id)
			if !errors.Is(err, tc.want) || (tc.want == nil && err != nil) {
				t.Fatalf("err = %v, want %v", err, tc.want)
			}
			cancelled := slices.Contains(f.names(), "scancel")
			if cancelled != tc.wantCancel {
				t.Fatalf("scancel ran = %v, want %v (calls %v)", cancelled, tc.wantCancel, f.names())
			}
			if cancelled {
				args := f.calls[len(f.calls)-1].args
				if !slices.Equal(args, []string{"--name=harvest-pilot", "--user=root", string(tc.id)}) {
					t.Errorf("scancel args %q", args)
				}
			}
		})
	}
}

func TestInfo(t *testing.T) {
	a := newTestAdapter(t, backfillCluster(t), nil)
	info, err := a.Info(context.Background())
	want := adapters.Info{Name: "slurm", Version: "22.05.8", Tag: "harvest-pilot", TimeGranularity: 60, ExpectedStart: true, Backfill: true, Shrink: true, SubmitsVisible: true}
	if err != nil || info != want {
		t.Errorf("Info = %+v, %v", info, err)
	}
}

func TestEnvironmentIsSanitised(t *testing.T) {
	t.Setenv("SQUEUE_FORMAT", "%all")
	t.Setenv("SBATCH_PARTITION", "debug")
	t.Setenv("SLURM_JOB_ID", "77")
	t.Setenv("SLURM_CONF", "/etc/agent/slurm.conf")
	a := newTestAdapter(t, &fakeSlurm{}, nil)
	env := a.environ()
	for _, kv := range env {
		if strings.HasPrefix(kv, "SQUEUE_") || strings.HasPrefix(kv, "SBATCH_") || strings.HasPrefix(kv, "SLURM_JOB_ID") {
			t.Errorf("leaked %s", kv)
		}
	}
	if !slices.Contains(env, "SLURM_CONF=/etc/agent/slurm.conf") {
		t.Error("the agent's SLURM_CONF is dropped")
	}
	b := newTestAdapter(t, &fakeSlurm{}, func(c *Config) { c.SlurmConf = "/lab/slurm.conf" })
	env = b.environ()
	if !slices.Contains(env, "SLURM_CONF=/lab/slurm.conf") || slices.Contains(env, "SLURM_CONF=/etc/agent/slurm.conf") {
		t.Errorf("configured SLURM_CONF not used: %v", env)
	}
}

func TestBatchScriptQuotesEverything(t *testing.T) {
	argv := []string{"printf", `[%s]\n`, "a b", "it's", "$HOME", "`id`", `"q"`, "", "; echo pwned", "\\"}
	env := map[string]string{"HARVEST_URL": "http://127.0.0.1:8080/v1?a=1&b=2", "TRICKY": `it's "$(id)" ,;`}
	script, err := BatchScript("harvest-pilot", adapters.PilotSpec{TimeLimit: 600, Command: argv, Env: env})
	if err != nil {
		t.Fatal(err)
	}
	// Run it with sh, with a trailing command that prints the env.
	script = strings.Replace(script, "exec printf", `printf '%s|%s\n' "$HARVEST_URL" "$TRICKY"; exec printf`, 1)
	out, err := exec.Command("/bin/sh", "-c", script).Output()
	if err != nil {
		t.Fatalf("%v\n%s", err, script)
	}
	want := env["HARVEST_URL"] + "|" + env["TRICKY"] + "\n[a b]\n[it's]\n[$HOME]\n[`id`]\n[\"q\"]\n[]\n[; echo pwned]\n[\\]\n"
	if string(out) != want {
		t.Errorf("script output:\n%s\nwant:\n%s\nscript:\n%s", out, want, script)
	}
}

func TestConfig(t *testing.T) {
	tests := []struct {
		name string
		mod  func(*Config)
		ok   bool
	}{
		{"the defaults are valid", func(*Config) {}, true},
		{"a tag with a comma is refused (squeue -n would split it)", func(c *Config) { c.Tag = "a,b" }, false},
		{"an empty tag is refused", func(c *Config) { c.Tag = "" }, false},
		{"a partition with a space is refused", func(c *Config) { c.Partition = "a b" }, false},
		{"a zero timeout is refused", func(c *Config) { c.Timeout = 0 }, false},
		{"a bare word in the extra args is refused (sbatch would read it as the script)", func(c *Config) { c.SbatchArgs = []string{"script.sh"} }, false},
		{"an extra --job-name is refused (the tag is the name)", func(c *Config) { c.SbatchArgs = []string{"--job-name=x"} }, false},
		{"a relative output dir is refused", func(c *Config) { c.OutputDir = "out" }, false},
		{"an empty export is refused", func(c *Config) { c.Export = "" }, false},
		{"extra options are accepted", func(c *Config) { c.SbatchArgs = []string{"--constraint=bigmem", "--reservation=h"} }, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := DefaultConfig()
			tc.mod(&c)
			err := c.Validate()
			if (err == nil) != tc.ok {
				t.Errorf("Validate() = %v, want ok=%v", err, tc.ok)
			}
			if err != nil && !errors.Is(err, ErrConfig) {
				t.Errorf("error %v does not wrap ErrConfig", err)
			}
		})
	}
}

func TestConfigFromOptions(t *testing.T) {
	cfg, err := ConfigFromOptions(map[string]string{
		"tag": "h1", "partition": "short", "account": "research", "qos": "low", "timeout": "3s",
		"sbatch_args": "--constraint=bigmem  --reservation=h", "output_dir": "/shared", "bin_dir": "/opt/slurm/bin",
		"exclusive": "false", "export": "ALL", "slurm_conf": "/lab/slurm.conf", "user": "harvest",
	})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Tag != "h1" || cfg.Partition != "short" || cfg.Account != "research" || cfg.QOS != "low" ||
		cfg.Timeout != 3*time.Second || !slices.Equal(cfg.SbatchArgs, []string{"--constraint=bigmem", "--reservation=h"}) ||
		cfg.OutputDir != "/shared" || cfg.Exclusive || cfg.Export != "ALL" || cfg.SlurmConf != "/lab/slurm.conf" || cfg.User != "harvest" ||
		cfg.binary("sbatch", cfg.Sbatch) != "/opt/slurm/bin/sbatch" {
		t.Errorf("cfg %+v", cfg)
	}
	for name, opts := range map[string]map[string]string{
		"an unknown key":     {"partiton": "x"},
		"a bad timeout":      {"timeout": "ten"},
		"a bad exclusive":    {"exclusive": "maybe"},
		"an invalid tag":     {"tag": "a b"},
		"a negative timeout": {"timeout": "-1s"},
	} {
		t.Run(name, func(t *testing.T) {
			if _, err := NewFromOptions(opts); !errors.Is(err, ErrConfig) {
				t.Errorf("err = %v, want ErrConfig", err)
			}
		})
	}
	if a, err := NewFromOptions(nil); err != nil || a.Config().Tag != "harvest-pilot" {
		t.Errorf("defaults: %v", err)
	}
}

// An empty job list beside allocated nodes is not a cluster without jobs:
// the snapshot is refused and the next round tries again.
func TestSnapshotRefusesAnEmptyJobListBesideBusyNodes(t *testing.T) {
	holders := ""
	f := backfillCluster(t)
	f.squeue = func(c call) (result, error) {
		switch {
		case slices.Contains(c.args, "-w"):
			if !slices.Contains(c.args, "n1,n2,n3") || !slices.Contains(c.args, holdersFormat) {
				t.Errorf("holders asked with %v", c.args)
			}
			return result{stdout: []byte(holders)}, nil
		case slices.Contains(c.args, pilotEndFormat), slices.Contains(c.args, "-n"):
			return result{}, nil
		}
		return result{}, nil // squeue answered with nothing
	}
	a := newTestAdapter(t, f, nil)
	s, err := a.Snapshot(context.Background())
	if !errors.Is(err, cluster.ErrInvalidSnapshot) || errors.Is(err, adapters.ErrUnreachable) {
		t.Fatalf("err = %v, snapshot %+v; want ErrInvalidSnapshot", err, s)
	}
	// Asked again, squeue shows the job that holds the nodes: the first
	// answer was wrong.
	holders = "1|batch|3|1795290137|RUNNING\n"
	if _, err := a.Snapshot(context.Background()); !errors.Is(err, cluster.ErrInvalidSnapshot) {
		t.Fatalf("err = %v; want ErrInvalidSnapshot", err)
	}
	// The nodes are held by a job of another partition over the same
	// nodes: the snapshot is right.
	holders = "9|debug|3|1795290137|RUNNING\n"
	s, err = a.Snapshot(context.Background())
	if err != nil || len(s.Jobs) != 0 || s.IdleNodes != 1 {
		t.Fatalf("err = %v, snapshot %+v", err, s)
	}
}
