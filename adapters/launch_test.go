package adapters_test

import (
	"context"
	"errors"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/harvest-hpc/harvest/adapters"
	"github.com/harvest-hpc/harvest/adapters/adaptertest"
	"github.com/harvest-hpc/harvest/cluster"
)

// buildPlugin builds the example external plugin once per test binary.
func buildPlugin(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "memory-plugin")
	out, err := exec.Command("go", "build", "-o", bin, "../examples/memory-plugin").CombinedOutput()
	if err != nil {
		t.Fatalf("build plugin: %v\n%s", err, out)
	}
	return bin
}

// The conformance suite against a real plugin subprocess: every call
// crosses a process boundary over go-plugin's gRPC, as with a site's own
// adapter binary.
func TestAnExternalPluginBinaryPassesTheSuite(t *testing.T) {
	bin := buildPlugin(t)
	launch := func(t *testing.T, opts map[string]string) adapters.Adapter {
		l, err := adapters.Launch(exec.Command(bin), opts, nil)
		if err != nil {
			t.Fatalf("launch: %v", err)
		}
		t.Cleanup(l.Close)
		return l
	}
	adaptertest.Run(t, adaptertest.Harness{
		New:    func(t *testing.T) adapters.Adapter { return launch(t, map[string]string{"nodes": "3"}) },
		Settle: func(*testing.T) {},
	})
	t.Run("the job-event count is asked of the plugin", func(t *testing.T) {
		// The example plugin keeps no count: its answer, not the
		// wrapper's, says so (a Launched that hid JobEvents is no counter).
		jc, ok := launch(t, nil).(adapters.JobEventCounter)
		if !ok {
			t.Fatal("a launched plugin is no JobEventCounter")
		}
		if _, err := jc.JobEvents(context.Background()); !errors.Is(err, adapters.ErrNotImplemented) {
			t.Fatalf("JobEvents: %v, want ErrNotImplemented", err)
		}
	})
	t.Run("options reach the plugin", func(t *testing.T) {
		s, err := launch(t, map[string]string{"nodes": "7"}).Snapshot(context.Background())
		if err != nil || s.TotalNodes != 7 {
			t.Fatalf("snapshot %+v, %v; want 7 nodes", s, err)
		}
	})
}

func TestAPluginThatRefusesItsOptionsFailsToLaunchWithItsMessage(t *testing.T) {
	bin := buildPlugin(t)
	_, err := adapters.Launch(exec.Command(bin), map[string]string{"colour": "blue"}, nil)
	if err == nil {
		t.Fatal("launch with an unknown option succeeded")
	}
}

func TestAMissingPluginBinaryIsAClearError(t *testing.T) {
	_, err := adapters.Launch(exec.Command("/nonexistent/plugin"), nil, nil)
	if err == nil || !strings.Contains(err.Error(), "/nonexistent/plugin") {
		t.Fatalf("err = %v, want one naming the binary", err)
	}
}

func TestAPluginThatDiesMakesCallsFailAsUnreachableOrUnknown(t *testing.T) {
	bin := buildPlugin(t)
	l, err := adapters.Launch(exec.Command(bin), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	l.Close()
	ctx := context.Background()
	if _, err := l.Snapshot(ctx); !errors.Is(err, adapters.ErrUnreachable) {
		t.Errorf("Snapshot after the plugin died: %v, want ErrUnreachable", err)
	}
	if _, err := l.Submit(ctx, adapters.PilotSpec{TimeLimit: 600, Command: []string{"x"}}); !errors.Is(err, adapters.ErrOutcomeUnknown) && !errors.Is(err, adapters.ErrUnreachable) {
		t.Errorf("Submit after the plugin died: %v", err)
	}
}

func TestRoundDown(t *testing.T) {
	cases := []struct {
		in   cluster.Limit
		g    int64
		want cluster.Limit
	}{
		{1020, 60, 1020},
		{1079, 60, 1020},
		{59, 60, 0},
		{cluster.Unlimited, 60, cluster.Unlimited},
		{59, 1, 59},
	}
	for _, c := range cases {
		if got := adapters.RoundDown(c.in, c.g); got != c.want {
			t.Errorf("RoundDown(%v, %d) = %v, want %v", c.in, c.g, got, c.want)
		}
	}
}

func TestParseOptions(t *testing.T) {
	o, err := adapters.ParseOptions([]string{"partition=batch", "sbatch_args=--qos=low --x=y"})
	if err != nil || o["partition"] != "batch" || o["sbatch_args"] != "--qos=low --x=y" {
		t.Fatalf("%v %v", o, err)
	}
	for _, bad := range []string{"novalue", "=x"} {
		if _, err := adapters.ParseOptions([]string{bad}); err == nil {
			t.Errorf("ParseOptions(%q) accepted", bad)
		}
	}
	if err := adapters.UnknownOptions(map[string]string{"b": "", "a": ""}, "x"); err == nil || !strings.Contains(err.Error(), "a, b") {
		t.Errorf("UnknownOptions = %v", err)
	}
}
