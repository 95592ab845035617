package main

import (
	"bufio"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/urfave/cli/v2"
	"gopkg.in/yaml.v3"

	"github.com/harvest-hpc/harvest/agent"
)

const exampleConfig = "../../deploy/agent.example.yaml"

// agentFlagNames are the names of every agent flag but --config.
func agentFlagNames() map[string]bool {
	out := map[string]bool{}
	for _, f := range agentFlags() {
		n := f.Names()[0]
		if n != "config" {
			out[n] = true
		}
	}
	return out
}

// commentedKey is an option documented but left commented out ("# min-nodes: 0").
var commentedKey = regexp.MustCompile(`^#\s*([a-z][a-z-]+):`)

func TestTheExampleConfigDocumentsEveryAgentFlagAndNothingElse(t *testing.T) {
	b, err := os.ReadFile(exampleConfig)
	if err != nil {
		t.Fatal(err)
	}
	var keys map[string]any
	if err := yaml.Unmarshal(b, &keys); err != nil {
		t.Fatalf("the example config is not YAML: %v", err)
	}
	documented := map[string]bool{}
	for k := range keys {
		documented[k] = true
	}
	sc := bufio.NewScanner(strings.NewReader(string(b)))
	for sc.Scan() {
		if m := commentedKey.FindStringSubmatch(sc.Text()); m != nil {
			documented[m[1]] = true
		}
	}
	flags := agentFlagNames()
	var unknown, missing []string
	for k := range documented {
		if !flags[k] {
			unknown = append(unknown, k)
		}
	}
	for f := range flags {
		if !documented[f] {
			missing = append(missing, f)
		}
	}
	sort.Strings(unknown)
	sort.Strings(missing)
	if len(unknown) > 0 {
		t.Errorf("keys that are not agent flags (typo, or a flag was renamed): %v", unknown)
	}
	if len(missing) > 0 {
		t.Errorf("agent flags the example config does not document: %v", missing)
	}
}

// parseAgent runs `harvest agent ARGS` through the real flag set and
// config loading, with an action that only builds the configuration.
func parseAgent(t *testing.T, args ...string) (agent.Config, *cli.Context, error) {
	t.Helper()
	app := newApp()
	app.Writer, app.ErrWriter = io.Discard, io.Discard
	var cfg agent.Config
	var ctx *cli.Context
	var cfgErr error
	for _, c := range app.Commands {
		if c.Name == "agent" {
			c.Action = func(c *cli.Context) error {
				ctx = c
				cfg, cfgErr = agentConfig(c)
				return nil
			}
		}
	}
	err := app.Run(append([]string{"harvest", "agent"}, args...))
	if err == nil {
		err = cfgErr
	}
	return cfg, ctx, err
}

func TestTheExampleConfigLoadsWithTheRealFlagSet(t *testing.T) {
	dump := filepath.Join(t.TempDir(), "snaps")
	// The dump directory is created by the parse: point it at a temp dir.
	cfg, c, err := parseAgent(t, "--config", exampleConfig, "--dump-snapshots", dump)
	if err != nil {
		t.Fatalf("the example config does not load: %v", err)
	}
	checks := []struct {
		name      string
		got, want any
	}{
		{"poll", cfg.PollInterval, 10 * time.Second},
		{"margin", cfg.Policy.Margin, int64(120)},
		{"mini-time", cfg.Policy.MiniTime, int64(60)},
		{"pilot command", strings.Join(cfg.PilotCommand, " "), "/usr/bin/harvest pilot"},
		{"adapter", c.String("adapter"), "slurm"},
		{"adapter options", strings.Join(c.StringSlice("adapter-opt"), ","), "partition=batch"},
		{"allowed roots", strings.Join(c.StringSlice("allowed-root"), ","), "/shared/data"},
		{"socket", c.String("socket"), "/run/harvest/queue.sock"},
		{"state dir", c.String("state-dir"), "/var/lib/harvest"},
		{"chart window", c.Duration("chart-window"), 6 * time.Hour},
		{"a flag wins over the file", cfg.DumpDir, dump},
		{"min-nodes left commented keeps the run-time setting", c.IsSet("min-nodes"), false},
	}
	for _, ch := range checks {
		if ch.got != ch.want {
			t.Errorf("%s: got %v, want %v", ch.name, ch.got, ch.want)
		}
	}
}

func TestABadConfigKeyValueIsRefused(t *testing.T) {
	p := filepath.Join(t.TempDir(), "agent.yaml")
	os.WriteFile(p, []byte("poll: often\n"), 0o644)
	if _, _, err := parseAgent(t, "--config", p); err == nil {
		t.Fatal("poll: often was accepted")
	}
}

// A misspelt key (mni-nodes) was ignored and the agent ran without the
// setting; values of the wrong type or out of range were refused, but the
// error did not name the file. Each bad file is refused naming the file
// and the key.
func TestABadConfigFileIsRefusedNamingTheKey(t *testing.T) {
	for _, c := range []struct{ name, yaml, want string }{
		{"unknown key", "mni-nodes: 3\n", `unknown key "mni-nodes"`},
		{"unknown key beside good ones", "poll: 10s\nmax-node: 4\n", `unknown key "max-node"`},
		{"not a mapping", "- poll\n", "not a mapping"},
		{"wrong type", "min-nodes: abc\n", "min-nodes"},
		{"a float for an int", "min-nodes: 3.7\n", "min-nodes"},
		{"negative minimum", "min-nodes: -1\n", "--min-nodes -1 is out of range: allowed 0 to 1000000"},
		{"negative maximum", "max-nodes: -4\n", "--max-nodes -4 is out of range: allowed 0 to 1000000"},
		{"minimum above maximum", "min-nodes: 5\nmax-nodes: 2\n", "exceeds --max-nodes 2"},
	} {
		t.Run(c.name, func(t *testing.T) {
			p := filepath.Join(t.TempDir(), "agent.yaml")
			os.WriteFile(p, []byte(c.yaml), 0o644)
			_, _, err := parseAgent(t, "--config", p)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("%q: %v, want an error naming %s", c.yaml, err, c.want)
			}
			if !strings.Contains(c.want, "range") && !strings.Contains(c.want, "exceeds") { // a range is judged after the file is read
				if !strings.Contains(err.Error(), p) {
					t.Errorf("%q: %v, want the file named", c.yaml, err)
				}
			}
		})
	}
}

func TestTheSystemdUnitStartsTheAgentWithTheConfigFile(t *testing.T) {
	b, err := os.ReadFile("../../deploy/harvest-agent.service")
	if err != nil {
		t.Fatal(err)
	}
	unit := string(b)
	for _, want := range []string{
		"Type=simple", "ExecStart=/usr/bin/harvest agent --config /etc/harvest/agent.yaml", "Restart=on-failure",
		"KillSignal=SIGTERM", "StateDirectory=harvest", "RuntimeDirectory=harvest",
	} {
		if !strings.Contains(unit, "\n"+want+"\n") {
			t.Errorf("the unit lacks %q", want)
		}
	}
	// The directories systemd makes are the agent's defaults.
	_, c, err := parseAgent(t, "--config", exampleConfig, "--dump-snapshots", filepath.Join(t.TempDir(), "d"))
	if err != nil {
		t.Fatal(err)
	}
	if c.String("state-dir") != "/var/lib/harvest" || !strings.HasPrefix(c.String("socket"), "/run/harvest/") {
		t.Errorf("state dir %s and socket %s do not match StateDirectory=harvest and RuntimeDirectory=harvest", c.String("state-dir"), c.String("socket"))
	}
}

// A large cluster's snapshot may take longer than the default 30 s: the
// admin can say so (the adapter's own timeout otherwise runs in vain),
// within a bound.
func TestTheSnapshotTimeoutIsAFlagWithABound(t *testing.T) {
	cfg, _, err := parseAgent(t, "--snapshot-timeout", "3m")
	if err != nil || cfg.SnapshotTimeout != 3*time.Minute {
		t.Fatalf("--snapshot-timeout 3m: %v, %v", cfg.SnapshotTimeout, err)
	}
	for _, bad := range []string{"2h", "0s", "-1s"} {
		if _, _, err := parseAgent(t, "--snapshot-timeout", bad); err == nil || !strings.Contains(err.Error(), "--snapshot-timeout") || !strings.Contains(err.Error(), "allowed 1s to 1h0m0s") {
			t.Errorf("--snapshot-timeout %s: %v, want a refusal", bad, err)
		}
	}
}

// TestFastPollFlag: --fast-poll reaches the agent's config (default 2 s),
// 0 turns it off, and a negative one is refused.
func TestFastPollFlag(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want time.Duration
	}{{nil, 2 * time.Second}, {[]string{"--fast-poll", "1s"}, time.Second}, {[]string{"--fast-poll", "0"}, 0}} {
		cfg, _, err := parseAgent(t, tc.args...)
		if err != nil || cfg.FastPoll != tc.want {
			t.Errorf("%v: fast poll %v (err %v), want %v", tc.args, cfg.FastPoll, err, tc.want)
		}
	}
	if _, _, err := parseAgent(t, "--fast-poll", "-1s"); err == nil {
		t.Error("--fast-poll -1s was accepted")
	}
}

// TestEventCheckFlag: --event-check reaches the agent's config (default
// 1 s), 0 turns it off, and a negative one is refused.
func TestEventCheckFlag(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want time.Duration
	}{{nil, time.Second}, {[]string{"--event-check", "2s"}, 2 * time.Second}, {[]string{"--event-check", "0"}, 0}} {
		cfg, _, err := parseAgent(t, tc.args...)
		if err != nil || cfg.EventCheck != tc.want {
			t.Errorf("%v: event check %v (err %v), want %v", tc.args, cfg.EventCheck, err, tc.want)
		}
	}
	if _, _, err := parseAgent(t, "--event-check", "-1s"); err == nil {
		t.Error("--event-check -1s was accepted")
	}
}
