package htcondor

import (
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/harvest-hpc/harvest/adapters"
	"github.com/harvest-hpc/harvest/cluster"
)

// splitNew parses an arguments value of the "new syntax" the way the
// condor_submit manual describes it: outer double quotes with "" for a
// literal ", arguments split on blanks, single quotes group, ” is a
// literal '. It is the test's independent reading of the rules.
func splitNew(t *testing.T, v string) []string {
	t.Helper()
	if len(v) < 2 || v[0] != '"' || v[len(v)-1] != '"' {
		t.Fatalf("%q is not in the new syntax (double-quoted)", v)
	}
	inner := strings.ReplaceAll(v[1:len(v)-1], `""`, `"`)
	var out []string
	var cur strings.Builder
	inArg, quoted := false, false
	for i := 0; i < len(inner); i++ {
		c := inner[i]
		switch {
		case c == '\'' && quoted && i+1 < len(inner) && inner[i+1] == '\'':
			cur.WriteByte('\'')
			i++
		case c == '\'':
			quoted = !quoted
			inArg = true
		case (c == ' ' || c == '\t') && !quoted:
			if inArg {
				out = append(out, cur.String())
				cur.Reset()
				inArg = false
			}
		default:
			cur.WriteByte(c)
			inArg = true
		}
	}
	if quoted {
		t.Fatalf("%q: unbalanced single quote", v)
	}
	if inArg {
		out = append(out, cur.String())
	}
	return out
}

// unmacro undoes escapeMacros, as condor_submit's macro expansion would.
func unmacro(s string) string { return strings.ReplaceAll(s, "$(DOLLAR)", "$") }

func descLines(d string) map[string]string {
	m := map[string]string{}
	for _, l := range strings.Split(d, "\n") {
		if k, v, ok := strings.Cut(l, " = "); ok {
			m[k] = v
		}
	}
	return m
}

func TestArgumentsSurviveHTCondorsQuotingRules(t *testing.T) {
	cases := []struct {
		name string
		argv []string
	}{
		{"plain words", []string{"pilot", "--queue", "http://127.0.0.1:8080"}},
		{"an argument with spaces", []string{"two words", "x"}},
		{"single quotes inside", []string{"it's", "''"}},
		{"double quotes inside", []string{`say "hi"`, `"`}},
		{"an empty argument", []string{"", "after-empty"}},
		{"a dollar that must not be expanded", []string{"$(Cluster)", "cost$5", "$$(Memory)"}},
		{"tabs and backslashes", []string{"a\tb", `C:\path\`, `\`}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			q, err := quoteArguments(tc.argv)
			if err != nil {
				t.Fatal(err)
			}
			got := splitNew(t, unmacro(q))
			if !reflect.DeepEqual(got, tc.argv) {
				t.Fatalf("arguments = %s\nparsed back %q, want %q", q, got, tc.argv)
			}
		})
	}
}

func TestEnvironmentSurvivesHTCondorsQuotingRules(t *testing.T) {
	env := map[string]string{"HARVEST_QUEUE": "http://127.0.0.1:8080/v1", "TOKEN": `a'b"c d`, "EMPTY": "", "PRICE": "$(x)"}
	q, err := quoteEnvironment(env)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, e := range splitNew(t, unmacro(q)) {
		k, v, _ := strings.Cut(e, "=")
		got[k] = v
	}
	if !reflect.DeepEqual(got, env) {
		t.Fatalf("environment = %s\nparsed back %q, want %q", q, got, env)
	}
}

func TestThePilotDescriptionCarriesTagLifetimeAndCommand(t *testing.T) {
	c := DefaultConfig()
	c.OutputDir = "/scratch/harvest/logs"
	c.ExtraSubmit = []string{"accounting_group = group_harvest"}
	spec := adapters.PilotSpec{
		TimeLimit: 1800,
		Command:   []string{"/opt/harvest/bin/harvest", "pilot", "--queue", "http://head:8080"},
		Env:       map[string]string{"HARVEST_TOKEN": "s3cret"},
		WorkDir:   "/scratch/harvest",
	}
	d, err := SubmitDescription(c, spec)
	if err != nil {
		t.Fatal(err)
	}
	l := descLines(d)
	want := map[string]string{
		"universe":            "vanilla",
		"executable":          "/opt/harvest/bin/harvest",
		"transfer_executable": "false",
		"initialdir":          "/scratch/harvest",
		"+HarvestPilot":       `"harvest-pilot"`,
		"+HarvestLifetime":    "1800",
		"batch_name":          "harvest-pilot",
		"periodic_remove":     "(JobStatus == 2) && ((time() - JobCurrentStartDate) > 1800)",
		"output":              "/scratch/harvest/logs/harvest-pilot-$(Cluster).$(Process).out",
		"error":               "/scratch/harvest/logs/harvest-pilot-$(Cluster).$(Process).err",
		"log":                 "/scratch/harvest/logs/harvest-pilot-$(Cluster).log",
		"accounting_group":    "group_harvest",
	}
	for k, v := range want {
		if l[k] != v {
			t.Errorf("%s = %q, want %q", k, l[k], v)
		}
	}
	if got := splitNew(t, l["arguments"]); !reflect.DeepEqual(got, spec.Command[1:]) {
		t.Errorf("arguments %q", got)
	}
	gotEnv := map[string]string{}
	for _, e := range splitNew(t, l["environment"]) {
		k, v, _ := strings.Cut(e, "=")
		gotEnv[k] = v
	}
	wantEnv := map[string]string{"HARVEST_TOKEN": "s3cret", "HARVEST_TIME_LIMIT": "1800s", "HARVEST_PILOT_ID": "$(Cluster).$(Process)"}
	if !reflect.DeepEqual(gotEnv, wantEnv) {
		t.Errorf("environment %s\nparsed %q, want %q", l["environment"], gotEnv, wantEnv)
	}
	if !strings.HasSuffix(d, "accounting_group = group_harvest\nqueue 1\n") {
		t.Errorf("extra lines must come just before the single queue:\n%s", d)
	}
	if strings.Count("\n"+d, "\nqueue") != 1 {
		t.Errorf("more than one queue statement:\n%s", d)
	}
}

func TestPilotLifetimeIsCappedByTheConfiguredMaximum(t *testing.T) {
	cases := []struct {
		name  string
		asked cluster.Limit
		max   time.Duration
		want  string // +HarvestLifetime, "" = none
	}{
		{"an unlimited pilot gets the maximum lifetime", cluster.Unlimited, 24 * time.Hour, "86400"},
		{"a shorter limit is kept", 600, 24 * time.Hour, "600"},
		{"a longer limit is cut to the maximum", 100000, time.Hour, "3600"},
		{"no maximum leaves an unlimited pilot unlimited", cluster.Unlimited, 0, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := DefaultConfig()
			c.MaxLifetime = tc.max
			d, err := SubmitDescription(c, adapters.PilotSpec{TimeLimit: tc.asked, Command: []string{"/bin/harvest"}})
			if err != nil {
				t.Fatal(err)
			}
			l := descLines(d)
			if l["+HarvestLifetime"] != tc.want {
				t.Fatalf("+HarvestLifetime = %q, want %q\n%s", l["+HarvestLifetime"], tc.want, d)
			}
			if (tc.want == "") != (l["periodic_remove"] == "") {
				t.Fatalf("periodic_remove %q does not match the lifetime %q", l["periodic_remove"], tc.want)
			}
		})
	}
}

func TestAllowedJobDurationModeHoldsThenRemoves(t *testing.T) {
	c := DefaultConfig()
	c.Lifetime = LifetimeAllowedJobDuration
	d, err := SubmitDescription(c, adapters.PilotSpec{TimeLimit: 900, Command: []string{"/bin/harvest"}})
	if err != nil {
		t.Fatal(err)
	}
	l := descLines(d)
	if l["allowed_job_duration"] != "900" || l["periodic_remove"] != "(JobStatus == 5) && (HoldReasonCode == 46)" {
		t.Fatalf("allowed_job_duration mode:\n%s", d)
	}
}

func TestSlotSizeIsWholeMachineOrConfigured(t *testing.T) {
	spec := adapters.PilotSpec{TimeLimit: 60, Command: []string{"/bin/harvest"}}
	d, _ := SubmitDescription(DefaultConfig(), spec)
	l := descLines(d)
	if !strings.Contains(l["request_cpus"], "TARGET.TotalSlotCpus") || !strings.Contains(l["requirements"], "TARGET.Cpus == TARGET.TotalSlotCpus") {
		t.Errorf("whole machine by default:\n%s", d)
	}
	c := DefaultConfig()
	c.SlotCPUs, c.SlotMemoryMB = 8, 16000
	d, _ = SubmitDescription(c, spec)
	l = descLines(d)
	if l["request_cpus"] != "8" || l["request_memory"] != "16000" || l["requirements"] != "" {
		t.Errorf("configured slot size:\n%s", d)
	}
}

func TestSpecsThatCannotBeWrittenAreInvalid(t *testing.T) {
	cases := []struct {
		name string
		spec adapters.PilotSpec
	}{
		{"no command", adapters.PilotSpec{TimeLimit: 60}},
		{"a newline in an argument", adapters.PilotSpec{TimeLimit: 60, Command: []string{"/bin/h", "a\nqueue 100"}}},
		{"a newline in the executable", adapters.PilotSpec{TimeLimit: 60, Command: []string{"/bin/h\nqueue 5"}}},
		{"an executable ending in a continuation", adapters.PilotSpec{TimeLimit: 60, Command: []string{`/bin/h\`}}},
		{"a bad environment name", adapters.PilotSpec{TimeLimit: 60, Command: []string{"/bin/h"}, Env: map[string]string{"A B": "x"}}},
		{"a newline in an environment value", adapters.PilotSpec{TimeLimit: 60, Command: []string{"/bin/h"}, Env: map[string]string{"A": "x\ny"}}},
		{"a newline in the output pattern", adapters.PilotSpec{TimeLimit: 60, Command: []string{"/bin/h"}, Output: "/tmp/x\nqueue"}},
		{"a zero limit", adapters.PilotSpec{TimeLimit: 0, Command: []string{"/bin/h"}}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if d, err := SubmitDescription(DefaultConfig(), tc.spec); !errors.Is(err, adapters.ErrInvalidSpec) {
				t.Fatalf("err = %v, want ErrInvalidSpec; description:\n%s", err, d)
			}
		})
	}
}
