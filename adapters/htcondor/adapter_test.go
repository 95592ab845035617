package htcondor

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/harvest-hpc/harvest/adapters"
	"github.com/harvest-hpc/harvest/adapters/adaptertest"
	"github.com/harvest-hpc/harvest/cluster"
)

// fakePool is a pool of the fake condor_* command set in
// testdata/fakecondor, with its state in a temporary directory.
type fakePool struct {
	t     testing.TB
	state string
	bin   string
}

func newFakePool(t testing.TB, machines string) *fakePool {
	t.Helper()
	bin, err := filepath.Abs(filepath.Join("testdata", "fakecondor"))
	if err != nil {
		t.Fatal(err)
	}
	p := &fakePool{t: t, state: t.TempDir(), bin: bin}
	t.Setenv("FAKECONDOR_STATE", p.state)
	p.write("machines", machines)
	return p
}

func (p *fakePool) write(name, content string) {
	p.t.Helper()
	if err := os.WriteFile(filepath.Join(p.state, name), []byte(content), 0o644); err != nil {
		p.t.Fatal(err)
	}
}

// mode sets the failure mode of one command ("" = all commands).
func (p *fakePool) mode(cmd, mode string) {
	name := "mode"
	if cmd != "" {
		name += "." + cmd
	}
	p.write(name, mode)
}

// submitForeign submits a job of user through the fake condor_submit.
func (p *fakePool) submitForeign(user, desc string) {
	p.t.Helper()
	cmd := exec.Command(filepath.Join(p.bin, "condor_submit"), "-terse", "-")
	cmd.Stdin = strings.NewReader(desc)
	cmd.Env = append(os.Environ(), "FAKECONDOR_USER="+user)
	if out, err := cmd.CombinedOutput(); err != nil {
		p.t.Fatalf("foreign submit: %v: %s", err, out)
	}
}

// negotiate runs one round of the fake negotiator.
func (p *fakePool) negotiate() {
	p.t.Helper()
	if out, err := exec.Command(filepath.Join(p.bin, "fakecondor_negotiate")).CombinedOutput(); err != nil {
		p.t.Fatalf("negotiate: %v: %s", err, out)
	}
}

func (p *fakePool) adapter(mod func(*Config)) *Adapter {
	p.t.Helper()
	c := DefaultConfig()
	c.BinDir = p.bin
	c.CommandTimeout = 5 * time.Second
	if mod != nil {
		mod(&c)
	}
	a, err := New(c)
	if err != nil {
		p.t.Fatal(err)
	}
	return a
}

const threeMachines = "node1 8 16000\nnode2 8 16000\nnode3 8 16000\n"

// busyPool has three machines, one running a foreign job and one foreign
// job waiting for more than is free.
func busyPool(t testing.TB) *fakePool {
	p := newFakePool(t, threeMachines)
	p.submitForeign("alice", "executable = /bin/sim\nrequest_cpus = 4\nrequest_memory = 4000\nqueue 1\n")
	p.negotiate()
	return p
}

func harness(wrap func(testing.TB, adapters.Adapter) adapters.Adapter) adaptertest.Harness {
	var pool *fakePool
	return adaptertest.Harness{
		New: func(t *testing.T) adapters.Adapter {
			pool = busyPool(t)
			return wrap(t, pool.adapter(nil))
		},
		Settle: func(*testing.T) { pool.negotiate() },
		Tries:  5,
		Unreachable: func(t *testing.T) adapters.Adapter {
			p := newFakePool(t, threeMachines)
			p.mode("", "unreachable")
			return wrap(t, p.adapter(nil))
		},
	}
}

func TestTheAdapterPassesTheConformanceSuiteOnTheFakePool(t *testing.T) {
	adaptertest.Run(t, harness(func(_ testing.TB, a adapters.Adapter) adapters.Adapter { return a }))
}

func TestTheAdapterPassesTheConformanceSuiteAcrossThePluginBoundary(t *testing.T) {
	adaptertest.Run(t, harness(adaptertest.OverPlugin))
}

func ctxT(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return c
}

func TestASubmittedPilotIsIdleThenRunsOnAWholeMachine(t *testing.T) {
	p := busyPool(t)
	a := p.adapter(nil)
	id, err := a.Submit(ctxT(t), adapters.PilotSpec{TimeLimit: 900, Command: []string{"/opt/harvest", "pilot", "--queue", "http://127.0.0.1:1"}})
	if err != nil {
		t.Fatal(err)
	}
	s, err := a.Snapshot(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	pilots := s.Pilots()
	if len(pilots) != 1 || pilots[0].ID != string(id) || pilots[0].State != cluster.Pending || pilots[0].TimeLimit != 900 {
		t.Fatalf("after submit, pilots = %+v; want %s pending with 900 s", pilots, id)
	}
	if s.IdleNodes != 2 {
		t.Fatalf("idle nodes = %d before the negotiator ran, want 2", s.IdleNodes)
	}
	p.negotiate()
	s, err = a.Snapshot(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	pilots = s.Pilots()
	if len(pilots) != 1 || pilots[0].State != cluster.Running || pilots[0].NodeList != "node2" {
		t.Fatalf("after negotiation, pilots = %+v; want running on node2", pilots)
	}
	if s.IdleNodes != 1 {
		t.Fatalf("idle nodes = %d, want 1 (the pilot took a whole machine)", s.IdleNodes)
	}
	desc, err := os.ReadFile(filepath.Join(p.state, "submitted", strings.TrimSuffix(string(id), ".0")+".sub"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(desc), `+HarvestPilot = "harvest-pilot"`) || !strings.Contains(string(desc), `arguments = "'pilot' '--queue' 'http://127.0.0.1:1'"`) {
		t.Fatalf("condor_submit got:\n%s", desc)
	}
}

func TestAForeignJobIsNeverCancelled(t *testing.T) {
	p := busyPool(t)
	a := p.adapter(nil)
	if err := a.Cancel(ctxT(t), "100.0"); !errors.Is(err, adapters.ErrNotPilot) {
		t.Fatalf("Cancel(foreign 100.0) = %v, want ErrNotPilot", err)
	}
	s, err := a.Snapshot(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	if len(s.Jobs) != 1 || s.Jobs[0].ID != "100.0" || s.Jobs[0].State != cluster.Running {
		t.Fatalf("the foreign job must still run: %+v", s.Jobs)
	}
	if err := a.Cancel(ctxT(t), "not-an-id"); !errors.Is(err, adapters.ErrNotPilot) {
		t.Fatalf("Cancel(not-an-id) = %v, want ErrNotPilot", err)
	}
}

// Any pool user can give a job the HarvestPilot attribute. A job with the
// agent's tag that another account owns is foreign: not counted as a
// pilot (which would stop the harvest, or be released) and never removed.
func TestAJobWithAForgedPilotTagIsForeign(t *testing.T) {
	p := newFakePool(t, threeMachines)
	p.submitForeign("mallory", "executable = /bin/sleep\nrequest_cpus = 1\n+HarvestPilot = \"harvest-pilot\"\nqueue 1\n")
	p.negotiate()
	a := p.adapter(nil)
	s, err := a.Snapshot(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	if len(s.Jobs) != 1 || s.Jobs[0].User != "mallory" || s.Jobs[0].Pilot {
		t.Fatalf("mallory's job with the pilot tag: %+v, want one foreign job", s.Jobs)
	}
	if err := a.Cancel(ctxT(t), adapters.PilotID(s.Jobs[0].ID)); !errors.Is(err, adapters.ErrNotPilot) {
		t.Fatalf("Cancel(mallory's job) = %v, want ErrNotPilot", err)
	}
	if s, err := a.Snapshot(ctxT(t)); err != nil || len(s.Jobs) != 1 || s.Jobs[0].State != cluster.Running {
		t.Fatalf("mallory's job must still run: %+v %v", s.Jobs, err)
	}
}

func TestFailuresMapToTheContractsErrors(t *testing.T) {
	spec := adapters.PilotSpec{TimeLimit: 600, Command: []string{"/opt/harvest", "pilot"}}
	cases := []struct {
		name    string
		cmd     string // command whose mode is set
		mode    string
		timeout time.Duration
		call    func(t *testing.T, a *Adapter) error
		want    error
	}{
		{"an unreachable schedd fails the snapshot as unreachable", "condor_q", "unreachable", 0,
			func(t *testing.T, a *Adapter) error { _, err := a.Snapshot(ctxT(t)); return err }, adapters.ErrUnreachable},
		{"an unreachable collector fails the snapshot as unreachable", "condor_status", "unreachable", 0,
			func(t *testing.T, a *Adapter) error { _, err := a.Snapshot(ctxT(t)); return err }, adapters.ErrUnreachable},
		{"a truncated condor_q answer fails the snapshot as malformed", "condor_q", "malformed", 0,
			func(t *testing.T, a *Adapter) error { _, err := a.Snapshot(ctxT(t)); return err }, ErrMalformed},
		{"an HTML page from condor_status fails the snapshot as malformed", "condor_status", "malformed", 0,
			func(t *testing.T, a *Adapter) error { _, err := a.Snapshot(ctxT(t)); return err }, ErrMalformed},
		{"a condor_q that fails for another reason is unreachable", "condor_q", "fail", 0,
			func(t *testing.T, a *Adapter) error { _, err := a.Snapshot(ctxT(t)); return err }, adapters.ErrUnreachable},
		{"a hanging condor_q times out as unreachable", "condor_q", "hang", 500 * time.Millisecond,
			func(t *testing.T, a *Adapter) error { _, err := a.Snapshot(ctxT(t)); return err }, adapters.ErrUnreachable},
		{"an unreachable schedd refuses a submit as unreachable", "condor_submit", "unreachable", 0,
			func(t *testing.T, a *Adapter) error { _, err := a.Submit(ctxT(t), spec); return err }, adapters.ErrUnreachable},
		{"a hanging condor_submit is an unknown outcome", "condor_submit", "hang", 500 * time.Millisecond,
			func(t *testing.T, a *Adapter) error { _, err := a.Submit(ctxT(t), spec); return err }, adapters.ErrOutcomeUnknown},
		{"a condor_submit answer without an id is an unknown outcome", "condor_submit", "malformed", 0,
			func(t *testing.T, a *Adapter) error { _, err := a.Submit(ctxT(t), spec); return err }, adapters.ErrOutcomeUnknown},
		{"an unreachable schedd fails a cancel as unreachable", "condor_rm", "unreachable", 0,
			func(t *testing.T, a *Adapter) error { return a.Cancel(ctxT(t), "100.0") }, adapters.ErrUnreachable},
		{"a hanging condor_rm is an unknown outcome", "condor_rm", "hang", 500 * time.Millisecond,
			func(t *testing.T, a *Adapter) error { return a.Cancel(ctxT(t), "100.0") }, adapters.ErrOutcomeUnknown},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := busyPool(t)
			p.mode(tc.cmd, tc.mode)
			a := p.adapter(func(c *Config) {
				if tc.timeout > 0 {
					c.CommandTimeout = tc.timeout
				}
			})
			start := time.Now()
			err := tc.call(t, a)
			if !errors.Is(err, tc.want) {
				t.Fatalf("error = %v, want %v", err, tc.want)
			}
			if tc.timeout > 0 && time.Since(start) > tc.timeout+4*time.Second {
				t.Fatalf("the call took %v; the timeout is %v", time.Since(start), tc.timeout)
			}
		})
	}
}

func TestASubmitWhoseAnswerWasLostShowsUpInTheNextSnapshot(t *testing.T) {
	p := busyPool(t)
	p.mode("condor_submit", "malformed")
	a := p.adapter(nil)
	if _, err := a.Submit(ctxT(t), adapters.PilotSpec{TimeLimit: 600, Command: []string{"/opt/harvest"}}); !errors.Is(err, adapters.ErrOutcomeUnknown) {
		t.Fatalf("Submit = %v, want ErrOutcomeUnknown", err)
	}
	s, err := a.Snapshot(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	if len(s.Pilots()) != 1 {
		t.Fatalf("the snapshot must reveal the pilot the lost answer was about: %+v", s.Jobs)
	}
}

func TestMissingCommandsMakeThePoolUnreachable(t *testing.T) {
	newFakePool(t, threeMachines)
	c := DefaultConfig()
	c.BinDir = t.TempDir() // no condor_* in it
	a, err := New(c)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.Snapshot(ctxT(t)); !errors.Is(err, adapters.ErrUnreachable) {
		t.Fatalf("Snapshot = %v, want ErrUnreachable", err)
	}
	if _, err := a.Submit(ctxT(t), adapters.PilotSpec{TimeLimit: 60, Command: []string{"/x"}}); !errors.Is(err, adapters.ErrUnreachable) {
		t.Fatalf("Submit = %v, want ErrUnreachable", err)
	}
	info, err := a.Info(ctxT(t))
	if err != nil || info.Version != "" || info.Name != "htcondor" {
		t.Fatalf("Info = %+v, %v: want the name without a version, and no error", info, err)
	}
}

func TestInfoReportsNoExpectedStartNoBackfillAndTheVersion(t *testing.T) {
	p := newFakePool(t, threeMachines)
	info, err := p.adapter(nil).Info(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	want := adapters.Info{Name: "htcondor", Version: "23.0.3", Tag: "harvest-pilot", TimeGranularity: 1, SubmitsVisible: true}
	if info != want {
		t.Fatalf("Info = %+v, want %+v", info, want)
	}
}

func TestTheLongFormatWorksAgainstTheFakePool(t *testing.T) {
	p := busyPool(t)
	a := p.adapter(func(c *Config) { c.Format = FormatLong })
	id, err := a.Submit(ctxT(t), adapters.PilotSpec{TimeLimit: 300, Command: []string{"/opt/harvest"}})
	if err != nil {
		t.Fatal(err)
	}
	p.negotiate()
	s, err := a.Snapshot(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	if len(s.Pilots()) != 1 || s.Pilots()[0].ID != string(id) || s.TotalNodes != 3 || len(s.Jobs) != 2 {
		t.Fatalf("long-format snapshot %+v", s)
	}
	if err := a.Cancel(ctxT(t), id); err != nil {
		t.Fatal(err)
	}
}
