package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/urfave/cli/v2"
)

// runHarvest runs the CLI in process and returns stdout, the error message
// and the exit code main would use.
func runHarvest(t *testing.T, stdin string, args ...string) (string, string, int) {
	t.Helper()
	app := newApp()
	var out, errOut bytes.Buffer
	app.Writer, app.ErrWriter = &out, &errOut
	app.Reader = strings.NewReader(stdin)
	app.ExitErrHandler = func(*cli.Context, error) {} // main decides the exit, not os.Exit in a test
	err := app.Run(append([]string{"harvest"}, args...))
	if err != nil {
		return out.String(), err.Error(), exitCode(err)
	}
	return out.String(), "", 0
}

func writeTemp(t *testing.T, content string) string {
	t.Helper()
	f := filepath.Join(t.TempDir(), "file.json")
	if err := os.WriteFile(f, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return f
}

const policyTestdata = "../../agent/policy/testdata"

func TestDecideCommand(t *testing.T) {
	worked := func(name string) string { return filepath.Join(policyTestdata, name) }
	contract, err := os.ReadFile(filepath.Join(policyTestdata, "scenarios", "contract-example.txt"))
	if err != nil {
		t.Fatal(err)
	}
	// The contract example's snapshot, without the scenario's comments and expectation.
	contractSnap, _, _ := strings.Cut(string(contract), "\n----\n")
	contractSnap = contractSnap[strings.Index(contractSnap, "{"):]

	tests := []struct {
		name       string
		stdin      string
		args       []string
		wantJSON   string // the contract fields, compact
		wantCase   string
		wantCode   int
		wantErrSub string
	}{
		{
			name:     "Worked example 1 releases one pilot",
			args:     []string{"decide", "--snapshot", worked("worked-example-release.json"), "--mini-time", "2m", "--margin", "2m"},
			wantJSON: `{"submit":null,"release":["p20"]}`,
			wantCase: "release-for-backfill",
		},
		{
			name:     "Worked example 2 submits 5 pilots of 1020 s (DESIGN.md's, without an idle margin)",
			args:     []string{"decide", "--snapshot", worked("worked-example-fill.json"), "--mini-time", "2m", "--margin", "2m", "--idle-margin", "0"},
			wantJSON: `{"submit":{"count":5,"time_limit_s":1020},"release":[]}`,
			wantCase: "fill-hole",
		},
		{
			name:     "By default, as the agent, it keeps one of the 5 idle nodes free while job 3 waits",
			args:     []string{"decide", "--snapshot", worked("worked-example-fill.json"), "--mini-time", "2m", "--margin", "2m"},
			wantJSON: `{"submit":{"count":4,"time_limit_s":1020},"release":[]}`,
			wantCase: "fill-hole",
		},
		{
			name:     "The contract example read from stdin submits 5 pilots of 1020 s",
			stdin:    contractSnap,
			args:     []string{"decide", "--snapshot", "-"},
			wantJSON: `{"submit":{"count":5,"time_limit_s":1020},"release":[]}`,
			wantCase: "below-min-nodes",
		},
		{
			name:     "--min-nodes overrides the snapshot's min_nodes",
			args:     []string{"decide", "--snapshot", worked("worked-example-release.json"), "--min-nodes", "11"},
			wantJSON: `{"submit":{"count":4,"time_limit_s":1020},"release":[]}`,
			wantCase: "fill-hole",
		},
		{
			name:     "--min-nodes 0 overrides a non-zero min_nodes too, so jobs 3 and 4 get 11 pilots' nodes at once",
			args:     []string{"decide", "--snapshot", worked("worked-example-release.json"), "--min-nodes", "0"},
			wantJSON: `{"submit":null,"release":["p20","p19","p18","p17","p16","p15","p14","p13","p12","p11","p10"]}`,
			wantCase: "release-for-top-job",
		},
		{
			name:     "A longer margin shortens the pilots",
			args:     []string{"decide", "--snapshot", worked("worked-example-fill.json"), "--margin", "5m"},
			wantJSON: `{"submit":{"count":4,"time_limit_s":840},"release":[]}`,
			wantCase: "fill-hole",
		},
		{
			name:     "A coarser granularity rounds the limit down",
			args:     []string{"decide", "--snapshot", worked("worked-example-fill.json"), "--margin", "90s", "--granularity", "5m"},
			wantJSON: `{"submit":{"count":4,"time_limit_s":900},"release":[]}`,
			wantCase: "fill-hole",
		},
		{
			name:     "--max-nodes caps the submission",
			args:     []string{"decide", "--snapshot", worked("worked-example-fill.json"), "--max-nodes", "13"},
			wantJSON: `{"submit":{"count":2,"time_limit_s":1020},"release":[]}`,
			wantCase: "fill-hole",
		},
		{
			name:     "--harvest-while-idle ignores an empty backlog",
			stdin:    `{"now": 0, "total_nodes": 4, "idle_nodes": 4, "demand": {"pending_tasks": 0, "running_tasks": 0, "slots_per_node": 8}, "jobs": []}`,
			args:     []string{"decide", "-s", "-", "--harvest-while-idle"},
			wantJSON: `{"submit":{"count":4,"time_limit_s":null},"release":[]}`,
			wantCase: "no-pending-job",
		},
		{
			name:     "Without it an empty backlog submits nothing",
			stdin:    `{"now": 0, "total_nodes": 4, "idle_nodes": 4, "demand": {"pending_tasks": 0, "running_tasks": 0, "slots_per_node": 8}, "jobs": []}`,
			args:     []string{"decide", "-s", "-"},
			wantJSON: `{"submit":null,"release":[]}`,
			wantCase: "no-demand",
		},

		{
			name:     "Pilots on the ledger take the idle nodes, so nothing is submitted twice",
			args:     []string{"decide", "--snapshot", worked("worked-example-fill.json"), "--upcoming", writeTemp(t, `[{"count": 3, "time_limit_s": 1020, "submitted_at": 0}]`)},
			wantJSON: `{"submit":{"count":1,"time_limit_s":1020},"release":[]}`,
			wantCase: "fill-hole",
		},

		// Bad input: a clear message and exit code 2.
		{
			name:       "A ledger entry with a zero limit is an error",
			args:       []string{"decide", "--snapshot", worked("worked-example-fill.json"), "--upcoming", writeTemp(t, `[{"count": 3, "time_limit_s": 0}]`)},
			wantCode:   2,
			wantErrSub: "upcoming pilots: time limit must be positive or unlimited",
		},
		{
			name:       "A missing file is an error",
			args:       []string{"decide", "--snapshot", "testdata/does-not-exist.json"},
			wantCode:   2,
			wantErrSub: "read snapshot: open testdata/does-not-exist.json",
		},
		{
			name:       "Malformed JSON is an error",
			stdin:      `{"now": 0, "total_nodes": 4,`,
			args:       []string{"decide", "--snapshot", "-"},
			wantCode:   2,
			wantErrSub: "stdin: not a snapshot",
		},
		{
			name:       "null for the snapshot is an error, not an empty cluster",
			stdin:      `null`,
			args:       []string{"decide", "--snapshot", "-"},
			wantCode:   2,
			wantErrSub: "stdin: not a snapshot: null for the body",
		},
		{
			name:       "null for a count is an error, not zero",
			stdin:      `{"now": 0, "total_nodes": 4, "idle_nodes": null, "jobs": []}`,
			args:       []string{"decide", "--snapshot", "-"},
			wantCode:   2,
			wantErrSub: `null for "idle_nodes"`,
		},
		{
			name:       "null for an upcoming pilot is an error",
			args:       []string{"decide", "--snapshot", worked("worked-example-fill.json"), "--upcoming", writeTemp(t, `[null]`)},
			wantCode:   2,
			wantErrSub: "not a list of upcoming pilots: null for an element",
		},
		{
			name:       "A misspelt field is an error, not silently ignored",
			stdin:      `{"now": 0, "total_nodes": 4, "idle_nodes": 1, "min_node": 3, "jobs": []}`,
			args:       []string{"decide", "--snapshot", "-"},
			wantCode:   2,
			wantErrSub: `unknown field "min_node"`,
		},
		{
			name:       "A snapshot that fails validation is an error",
			stdin:      `{"now": 0, "total_nodes": 4, "idle_nodes": 1, "jobs": [{"id": "1", "state": "running", "nodes": 1}]}`,
			args:       []string{"decide", "--snapshot", "-"},
			wantCode:   2,
			wantErrSub: "stdin: invalid snapshot: job 1: time_limit_s missing or zero",
		},
		{
			name:       "A negative time limit is an error",
			stdin:      `{"now": 0, "total_nodes": 4, "idle_nodes": 1, "jobs": [{"id": "1", "state": "running", "nodes": 1, "time_limit_s": -5}]}`,
			args:       []string{"decide", "--snapshot", "-"},
			wantCode:   2,
			wantErrSub: "is negative (use null for unlimited)",
		},
		{
			name:       "Two JSON values are an error",
			stdin:      `{"now": 0, "total_nodes": 4, "idle_nodes": 1, "jobs": []} {}`,
			args:       []string{"decide", "--snapshot", "-"},
			wantCode:   2,
			wantErrSub: "more than one JSON value",
		},
		{
			name:       "A negative margin is an error",
			args:       []string{"decide", "--snapshot", worked("worked-example-fill.json"), "--margin", "-2m"},
			wantCode:   2,
			wantErrSub: "--margin -2m0s is out of range: allowed 0s to 24h0m0s",
		},
		{
			name:       "A duration that does not parse is an error",
			args:       []string{"decide", "--snapshot", worked("worked-example-fill.json"), "--mini-time", "soon"},
			wantCode:   2,
			wantErrSub: `invalid value "soon"`,
		},
		{
			name:       "A sub-second duration is an error",
			args:       []string{"decide", "--snapshot", worked("worked-example-fill.json"), "--margin", "1.5s"},
			wantCode:   2,
			wantErrSub: "not a whole number of seconds",
		},
		{
			name:       "A zero granularity is an error",
			args:       []string{"decide", "--snapshot", worked("worked-example-fill.json"), "--granularity", "0s"},
			wantCode:   2,
			wantErrSub: "--granularity 0s is out of range: allowed 1s to 24h0m0s",
		},
		{
			name:       "Min nodes above max nodes is an error",
			args:       []string{"decide", "--snapshot", worked("worked-example-fill.json"), "--min-nodes", "5", "--max-nodes", "3"},
			wantCode:   2,
			wantErrSub: "--min-nodes 5 exceeds --max-nodes 3",
		},
		{
			name:       "A negative min nodes is an error",
			args:       []string{"decide", "--snapshot", worked("worked-example-fill.json"), "--min-nodes", "-1"},
			wantCode:   2,
			wantErrSub: "--min-nodes -1 is out of range: allowed 0 to 1000000",
		},
		{
			name:       "An idle margin with an extra zero or two is an error",
			args:       []string{"decide", "--snapshot", worked("worked-example-fill.json"), "--idle-margin", "1000"},
			wantCode:   2,
			wantErrSub: "--idle-margin 1000 is out of range: allowed 0 to 100: the margin is kept for a job that arrives",
		},
		{
			name:       "A pilot cap past any cluster is an error",
			args:       []string{"decide", "--snapshot", worked("worked-example-fill.json"), "--max-nodes", "10000000"},
			wantCode:   2,
			wantErrSub: "--max-nodes 10000000 is out of range: allowed 0 to 1000000",
		},
		{
			name:       "No --snapshot is an error",
			args:       []string{"decide"},
			wantCode:   2,
			wantErrSub: "--snapshot FILE is required",
		},
		{
			name:       "A stray argument is an error",
			args:       []string{"decide", "--snapshot", worked("worked-example-fill.json"), "extra.json"},
			wantCode:   2,
			wantErrSub: `unexpected argument "extra.json"`,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			out, errMsg, code := runHarvest(t, tc.stdin, tc.args...)
			if code != tc.wantCode {
				t.Fatalf("exit code %d, want %d (error %q, stdout %q)", code, tc.wantCode, errMsg, out)
			}
			if tc.wantCode != 0 {
				if !strings.Contains(errMsg, tc.wantErrSub) || !strings.HasPrefix(errMsg, "harvest decide: ") {
					t.Errorf("error %q, want it to start with \"harvest decide: \" and contain %q", errMsg, tc.wantErrSub)
				}
				if out != "" {
					t.Errorf("stdout %q on error, want nothing", out)
				}
				return
			}
			var got struct {
				Submit  json.RawMessage `json:"submit"`
				Release json.RawMessage `json:"release"`
				Reason  string          `json:"reason"`
				Case    string          `json:"case"`
			}
			if err := json.Unmarshal([]byte(out), &got); err != nil {
				t.Fatalf("stdout is not JSON: %v\n%s", err, out)
			}
			var compact bytes.Buffer
			if err := json.Compact(&compact, []byte(`{"submit":`+string(got.Submit)+`,"release":`+string(got.Release)+`}`)); err != nil {
				t.Fatal(err)
			}
			if compact.String() != tc.wantJSON {
				t.Errorf("decision %s, want %s\n%s", compact.String(), tc.wantJSON, out)
			}
			if got.Case != tc.wantCase || got.Reason == "" {
				t.Errorf("case %q reason %q, want case %q and a reason", got.Case, got.Reason, tc.wantCase)
			}
			if !strings.HasPrefix(out, "{\n  \"submit\": ") || !strings.HasSuffix(out, "}\n") {
				t.Errorf("output is not indented JSON with submit first:\n%s", out)
			}
		})
	}
}

func TestDecideReplaysADumpedRoundWithItsContext(t *testing.T) {
	snap := "../../agent/policy/testdata/worked-example-fill.json"
	// The agent ran with a 5-minute margin and one pilot already on its way.
	ctx := writeTemp(t, `{"config": {"min_nodes": 0, "max_nodes": 0, "mini_time_s": 120, "margin_s": 300,
		"granularity_s": 60, "max_pilot_limit_s": null, "harvest_while_idle": false, "use_expected_start": true,
		"recommendation": {"few_tasks": 5, "few_nodes": 2, "some_tasks": 20, "some_nodes": 4, "many_tasks": 100, "tasks_per_node": 20, "base": 3, "many_nodes": 10}},
		"upcoming": [{"count": 1, "time_limit_s": 600, "submitted_at": 0}], "recommended": 0}`)
	out, stderr, code := runHarvest(t, "", "decide", "--snapshot", snap, "--context", ctx)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	var d struct {
		Submit *struct {
			Count     int   `json:"count"`
			TimeLimit int64 `json:"time_limit_s"`
		} `json:"submit"`
	}
	if err := json.Unmarshal([]byte(out), &d); err != nil {
		t.Fatal(err)
	}
	if d.Submit == nil || d.Submit.TimeLimit != 840 || d.Submit.Count != 4 {
		t.Fatalf("decision %s; want 4 pilots (one already on its way) of 19m-5m = 840 s", out)
	}
	// An explicit flag still wins over the context.
	out, _, _ = runHarvest(t, "", "decide", "--snapshot", snap, "--context", ctx, "--margin", "2m")
	if !strings.Contains(out, `"time_limit_s": 1020`) {
		t.Fatalf("--margin 2m did not override the context: %s", out)
	}
	if _, stderr, code := runHarvest(t, "", "decide", "--snapshot", snap, "--context", writeTemp(t, `{"colour": 1}`)); code != 2 || !strings.Contains(stderr, "round context") {
		t.Fatalf("bad context: exit %d, %s", code, stderr)
	}
}

func TestDecideReplaysTheAdminsPauseAndDrainFromTheContext(t *testing.T) {
	snap := "../../agent/policy/testdata/worked-example-fill.json"
	tests := []struct {
		name, context, wantCase, wantRelease string
	}{
		{"a paused round submits nothing", `{"upcoming": [], "recommended": 0, "paused": true}`, "paused", `"release": []`},
		{"a drained round releases every idle pilot", `{"upcoming": [], "recommended": 0, "paused": true, "drain": {"now": false}}`, "drain", `"p20"`},
		{"without them the round fills the hole", `{"upcoming": [], "recommended": 0}`, "fill-hole", `"release": []`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			out, stderr, code := runHarvest(t, "", "decide", "--snapshot", snap, "--context", writeTemp(t, tc.context), "--mini-time", "2m", "--margin", "2m")
			if code != 0 {
				t.Fatalf("exit %d: %s", code, stderr)
			}
			if !strings.Contains(out, `"case": "`+tc.wantCase+`"`) || !strings.Contains(out, tc.wantRelease) {
				t.Fatalf("decision %s; want case %s and %s", out, tc.wantCase, tc.wantRelease)
			}
		})
	}
}

func TestAgentRefusesBadSettingsBeforeTouchingAnything(t *testing.T) {
	dir := t.TempDir()
	cases := []struct {
		name string
		args []string
		want string
	}{
		{"the hosted queue needs an allowed root", []string{"--state-dir", dir, "--socket", dir + "/s", "--listen", "127.0.0.1:0"}, "--allowed-root is required"},
		{"the users' socket inside the private state directory", []string{"--state-dir", dir, "--socket", dir + "/s", "--allowed-root", dir}, "--socket"},
		{"a negative margin", []string{"--no-queue", "--margin", "-1m"}, "--margin -1m0s is out of range: allowed 0s to 24h0m0s"},
		{"a malformed pilot environment", []string{"--no-queue", "--pilot-env", "NOEQUALS"}, "want KEY=VALUE"},
		{"an unknown adapter", []string{"--no-queue", "--adapter", "pbs"}, `unknown adapter "pbs"`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, stderr, code := runHarvest(t, "", append([]string{"agent", "--adapter-in-process"}, tc.args...)...)
			if code == 0 || !strings.Contains(stderr, tc.want) {
				t.Fatalf("exit %d, stderr %q; want a failure mentioning %q", code, stderr, tc.want)
			}
		})
	}
	if _, err := os.Stat(dir + "/queue.db"); err == nil {
		t.Fatal("a refused start created the queue database")
	}
}
