package slurm

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/harvest-hpc/harvest/adapters"
	"github.com/harvest-hpc/harvest/cluster"
)

func configFixture(t *testing.T, name string) map[string]string {
	t.Helper()
	conf, err := ParseConfig(fixture(t, name))
	if err != nil {
		t.Fatal(err)
	}
	return conf
}

func partitionsFixture(t *testing.T, name string) []Partition {
	t.Helper()
	ps, err := ParsePartitions(fixture(t, name))
	if err != nil {
		t.Fatal(err)
	}
	return ps
}

func TestParseConfig(t *testing.T) {
	conf := configFixture(t, "preempt_config_grace_signal.txt")
	for k, want := range map[string]string{
		"PreemptType": "preempt/partition_prio", "PreemptMode": "CANCEL", "PreemptExemptTime": "00:00:00",
		"SlurmctldParameters": "preempt_send_user_signal", "SLURM_VERSION": "22.05.8", "KillWait": "2 sec",
	} {
		if conf[k] != want {
			t.Errorf("%s = %q, want %q", k, conf[k], want)
		}
	}
	if _, err := ParseConfig([]byte("Configuration data as of 2026-11-23T00:48:36\n\nSlurmctld(primary) at vm is UP\n")); !errors.Is(err, ErrParse) {
		t.Errorf("no Key = Value line: %v, want ErrParse", err)
	}
}

func TestDetectPreemption(t *testing.T) {
	on := partitionsFixture(t, "preempt_partitions_on.txt")
	batch, _ := PickPartition(on, "")
	with := func(mod func(ps []Partition)) []Partition {
		ps := slices.Clone(on)
		mod(ps)
		return ps
	}
	harvest := func(ps []Partition) *Partition {
		return &ps[slices.IndexFunc(ps, func(p Partition) bool { return p.Name == "harvest" })]
	}
	conf := func(name string, mod func(map[string]string)) map[string]string {
		c := configFixture(t, name)
		if mod != nil {
			mod(c)
		}
		return c
	}
	tests := []struct {
		name    string
		conf    map[string]string
		parts   []Partition
		want    string // "" = the auto-detected partition
		usable  bool
		nilTier bool
		problem string
	}{
		{name: "The mini-cluster's PREEMPT=1 partition is found and usable", conf: conf("preempt_config_youngest.txt", nil), parts: on, usable: true},
		{name: "Without preempt_youngest_first it is usable, with the master's hand-overs to watch for", conf: conf("preempt_config_on.txt", nil), parts: on, usable: true, problem: "lacks preempt_youngest_first"},
		{name: "A cluster with one partition has no tier", conf: conf("preempt_config_off.txt", nil), parts: partitionsFixture(t, "preempt_partitions_off.txt"), nilTier: true},
		{name: "Another partition of the same tier is no tier", conf: conf("preempt_config_off.txt", nil), parts: partitionsFixture(t, "scontrol_partitions.txt"), nilTier: true},
		{name: "preempt_partition=none turns it off", conf: conf("preempt_config_on.txt", nil), parts: on, want: "none", nilTier: true},
		{name: "A configured partition that does not exist is a problem", conf: conf("preempt_config_on.txt", nil), parts: on, want: "nope", problem: `partition "nope" does not exist`},
		{name: "PreemptType must be partition_prio", conf: conf("preempt_config_on.txt", func(c map[string]string) { c["PreemptType"] = "preempt/qos" }), parts: on, problem: "PreemptType is \"preempt/qos\""},
		{name: "Without preemption the configured partition is not usable", conf: conf("preempt_config_off.txt", nil), parts: on, problem: "PreemptType is \"preempt/none\""},
		{name: "SUSPEND keeps the node", conf: conf("preempt_config_on.txt", nil), parts: with(func(ps []Partition) { harvest(ps).PreemptMode = "SUSPEND,GANG" }), want: "harvest", problem: "PreemptMode SUSPEND,GANG"},
		{name: "REQUEUE frees the node too", conf: conf("preempt_config_youngest.txt", nil), parts: with(func(ps []Partition) { harvest(ps).PreemptMode = "REQUEUE" }), usable: true},
		{name: "A configured partition of the same tier is not preempted", conf: conf("preempt_config_on.txt", nil), parts: with(func(ps []Partition) { harvest(ps).PriorityTier = 10 }), want: "harvest", problem: "not below batch's 10"},
		{name: "A configured partition over other nodes is refused", conf: conf("preempt_config_on.txt", nil), parts: with(func(ps []Partition) { harvest(ps).Nodes = "n[1-2]" }), want: "harvest", problem: "over nodes n[1-2]"},
		{name: "A PreemptExemptTime protects pilots from preemption", conf: conf("preempt_config_on.txt", func(c map[string]string) { c["PreemptExemptTime"] = "00:05:00" }), parts: on, problem: "PreemptExemptTime is 00:05:00"},
		{name: "GraceTime without preempt_send_user_signal leaves the pilot unaware", conf: conf("preempt_config_grace_nosignal.txt", nil), parts: partitionsFixture(t, "preempt_partitions_grace.txt"), problem: "lacks preempt_send_user_signal"},
		{name: "GraceTime with preempt_send_user_signal is usable", conf: conf("preempt_config_grace_signal.txt", nil), parts: partitionsFixture(t, "preempt_partitions_grace.txt"), usable: true, problem: "lacks preempt_youngest_first"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h, _ := PickPartition(tc.parts, "")
			if h.Name != batch.Name {
				t.Fatalf("harvested partition %q", h.Name)
			}
			pre := DetectPreemption(tc.conf, tc.parts, h, tc.want)
			if tc.nilTier {
				if pre != nil {
					t.Fatalf("got %+v, want no tier", pre)
				}
				return
			}
			if pre == nil {
				t.Fatal("no tier detected")
			}
			if pre.Usable != tc.usable || !strings.Contains(pre.Problem, tc.problem) || tc.problem == "" && pre.Problem != "" {
				t.Errorf("got %+v, want usable %v, problem containing %q", pre, tc.usable, tc.problem)
			}
		})
	}
}

func TestTimeMinSizes(t *testing.T) {
	soft := map[string]string{"SchedulerParameters": "bf_interval=1,time_min_as_soft_limit"}
	for _, tc := range []struct {
		version string
		conf    map[string]string
		want    bool
	}{
		{"22.05.8", nil, false}, {"25.05.3", nil, false}, {"25.11.0", nil, true}, {"26.05.1", nil, true},
		{"25.11.0", soft, false}, {"garbage", nil, false},
	} {
		if got := TimeMinSizes(tc.version, tc.conf); got != tc.want {
			t.Errorf("TimeMinSizes(%q, %v) = %v, want %v", tc.version, tc.conf, got, tc.want)
		}
	}
}

// preemptCluster answers like the cluster of the preempt_* fixtures: batch
// and the preemptible harvest partition, bob's pilots 7 (harvest) and 8
// (batch, its end pulled in), alice's job 9 running and 10 queued in
// harvest.
func preemptCluster(t *testing.T) *fakeSlurm {
	return &fakeSlurm{
		scontrol: ok(fixture(t, "preempt_partitions_on.txt")),
		config:   ok(fixture(t, "preempt_config_on.txt")),
		version:  ok(fixture(t, "sinfo_version.txt")),
		squeue: func(c call) (result, error) {
			switch {
			case slices.Contains(c.args, pilotEndFormat):
				return result{stdout: fixture(t, "preempt_squeue_pilot_ends.txt")}, nil
			case slices.Contains(c.args, "-n"):
				return result{stdout: fixture(t, "preempt_squeue_pilots.txt")}, nil
			}
			return result{stdout: fixture(t, "preempt_squeue_jobs.txt")}, nil
		},
		sinfo: ok(fixture(t, "sinfo_idle.txt")),
	}
}

const preemptNow = 1795396611 // preempt_ids.txt

func TestSnapshotWithAPreemptibleTier(t *testing.T) {
	f := preemptCluster(t)
	a := newTestAdapter(t, f, func(c *Config) { c.User = "bob" })
	a.now = func() time.Time { return time.Unix(preemptNow, 0) }
	s, err := a.Snapshot(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range f.calls {
		if c.name == "squeue" && !slices.Contains(c.args, "batch,harvest") {
			t.Errorf("squeue %q does not list both partitions", c.args)
		}
	}
	ids := []string{}
	for _, j := range s.Jobs {
		ids = append(ids, j.ID)
	}
	if !slices.Equal(ids, []string{"7", "8", "9"}) {
		t.Fatalf("jobs %v: want pilots 7, 8 and alice's 9; her job queued in the preemptible partition is not waiting for anything", ids)
	}
	p7, _ := jobByID(s, "7")
	p8, _ := jobByID(s, "8")
	if !p7.Pilot || !p7.Preemptible || p7.TimeLimit != 30*60 {
		t.Errorf("pilot 7 in harvest: %+v", p7)
	}
	// Pilot 8's end was pulled in to now + 300: %l still says 6:00.
	if !p8.Pilot || p8.Preemptible || p8.Remaining() != 300 {
		t.Errorf("floor pilot 8: %+v, remaining %v, want 300s", p8, p8.Remaining())
	}
}

func jobByID(s cluster.Snapshot, id string) (cluster.Job, bool) {
	for _, j := range s.Jobs {
		if j.ID == id {
			return j, true
		}
	}
	return cluster.Job{}, false
}

func TestSubmitToThePreemptibleTier(t *testing.T) {
	spec := adapters.PilotSpec{TimeLimit: 60 * 60, Command: []string{"harvest", "pilot"}}
	tests := []struct {
		name    string
		f       func(t *testing.T) *fakeSlurm
		spec    func(*adapters.PilotSpec)
		want    []string
		absent  []string
		version string
	}{
		{name: "A preemptible pilot goes to the detected partition", f: preemptCluster,
			spec: func(s *adapters.PilotSpec) { s.Preemptible = true }, want: []string{"--partition=harvest"}, absent: []string{"--signal=B:TERM@30"}},
		{name: "A floor pilot goes to the harvested partition", f: preemptCluster,
			absent: []string{"--partition=harvest"}},
		{name: "With a grace time the pilot asks for SIGTERM at preemption", f: func(t *testing.T) *fakeSlurm {
			f := preemptCluster(t)
			f.scontrol = ok(fixture(t, "preempt_partitions_grace.txt"))
			f.config = ok(fixture(t, "preempt_config_grace_signal.txt"))
			return f
		}, spec: func(s *adapters.PilotSpec) { s.Preemptible = true }, want: []string{"--partition=harvest", "--signal=B:TERM@30"}},
		{name: "Without a usable tier a preemptible pilot stays in the harvested partition", f: func(t *testing.T) *fakeSlurm {
			f := preemptCluster(t)
			f.config = ok(fixture(t, "preempt_config_grace_nosignal.txt"))
			f.scontrol = ok(fixture(t, "preempt_partitions_grace.txt"))
			return f
		}, spec: func(s *adapters.PilotSpec) { s.Preemptible = true }, absent: []string{"--partition=harvest"}},
		{name: "22.05 gets no --time-min: its backfill would set the limit to it", f: preemptCluster,
			spec: func(s *adapters.PilotSpec) { s.MinTimeLimit = 10*60 + 1 }, absent: []string{"--time-min=11"}},
		{name: "25.11 gets --time-min, rounded up to whole minutes", f: func(t *testing.T) *fakeSlurm {
			f := preemptCluster(t)
			f.version = ok([]byte("slurm 25.11.0\n"))
			return f
		}, spec: func(s *adapters.PilotSpec) { s.MinTimeLimit = 10*60 + 1 }, want: []string{"--time-min=11", "--time=60"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := tc.f(t)
			f.sbatch = ok([]byte("42\n"))
			a := newTestAdapter(t, f, nil)
			s := spec
			if tc.spec != nil {
				tc.spec(&s)
			}
			if _, err := a.Submit(context.Background(), s); err != nil {
				t.Fatal(err)
			}
			args := f.calls[len(f.calls)-1].args
			for _, w := range tc.want {
				if !slices.Contains(args, w) {
					t.Errorf("sbatch %q lacks %s", args, w)
				}
			}
			for _, w := range tc.absent {
				if slices.Contains(args, w) {
					t.Errorf("sbatch %q has %s", args, w)
				}
			}
		})
	}
}

func TestShrink(t *testing.T) {
	const now = 1795396611
	end := int64(now + 300)
	// check answers the pilot check, then the end query (%e).
	check := func(out string) func(call) (result, error) {
		return func(c call) (result, error) {
			if slices.Contains(c.args, "%e") {
				return result{stdout: []byte("1795398411\n")}, nil // 30 min from now
			}
			return result{stdout: []byte(out + "\n")}, nil
		}
	}
	tests := []struct {
		name    string
		check   func(call) (result, error)
		update  func(call) (result, error)
		end     int64
		wantErr error
		updated bool
	}{
		{name: "A running pilot's end is pulled in with scontrol update, in UTC", check: check("8|root|RUNNING|harvest-pilot"), update: ok(nil), end: end, updated: true},
		{name: "Extending is refused by SLURM and changes nothing", check: check("8|root|RUNNING|harvest-pilot"),
			update: fail(1, string(fixture(t, "preempt_endtime_extend.stderr"))), end: end, updated: true},
		{name: "A pilot that finished meanwhile is left alone", check: check("8|root|RUNNING|harvest-pilot"),
			update: fail(1, string(fixture(t, "preempt_endtime_finished.stderr"))), end: end, updated: true},
		{name: "A queued pilot is not updated", check: check("8|root|PENDING|harvest-pilot"), end: end},
		{name: "A later end than the current one is not sent: an operator's update would extend", check: check("8|root|RUNNING|harvest-pilot"), end: 1795398411},
		{name: "A gone pilot is not updated", check: ok(nil), end: end},
		{name: "Another user's job is refused", check: check("8|alice|RUNNING|harvest-pilot"), end: end, wantErr: adapters.ErrNotPilot},
		{name: "An end in the past is refused before anything runs", end: now - 1, wantErr: adapters.ErrInvalidSpec},
		{name: "A time SLURM finds invalid is an invalid spec", check: check("8|root|RUNNING|harvest-pilot"),
			update: fail(1, string(fixture(t, "preempt_endtime_past.stderr"))), end: end, updated: true, wantErr: adapters.ErrInvalidSpec},
		{name: "An unreachable controller is unreachable", check: check("8|root|RUNNING|harvest-pilot"),
			update: fail(1, "slurm_update error: Unable to contact slurm controller (connect failure)\n"), end: end, updated: true, wantErr: adapters.ErrUnreachable},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := &fakeSlurm{squeue: tc.check, update: tc.update}
			a := newTestAdapter(t, f, nil)
			a.now = func() time.Time { return time.Unix(now, 0) }
			err := a.Shrink(context.Background(), "8", tc.end)
			if tc.wantErr == nil && err != nil || tc.wantErr != nil && !errors.Is(err, tc.wantErr) {
				t.Fatalf("Shrink = %v, want %v", err, tc.wantErr)
			}
			var up *call
			for i := range f.calls {
				if f.calls[i].name == "scontrol" {
					up = &f.calls[i]
				}
			}
			if (up != nil) != tc.updated {
				t.Fatalf("scontrol update ran: %v, want %v (calls %v)", up != nil, tc.updated, f.names())
			}
			if up != nil {
				stamp := time.Unix(end, 0).UTC().Format("2006-01-02T15:04:05")
				if !slices.Equal(up.args, []string{"update", "JobId=8", "EndTime=" + stamp}) || !slices.Contains(up.env, "TZ=UTC") {
					t.Errorf("scontrol %q env %q", up.args, up.env)
				}
			}
		})
	}
}

func TestParsePilotEnds(t *testing.T) {
	ends, err := ParsePilotEnds(fixture(t, "preempt_squeue_pilot_ends.txt"))
	if err != nil || len(ends) != 2 || ends["8"] != 1795396911 || ends["7"] != 1795398408 {
		t.Errorf("ends %v, %v", ends, err)
	}
	if _, err := ParsePilotEnds([]byte("8 1795396911\n")); !errors.Is(err, ErrParse) {
		t.Errorf("a line without '|': %v, want ErrParse", err)
	}
}
