package main

import (
	"bufio"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/harvest-hpc/harvest/queue/api"
)

// The README's console examples are checked against what the commands
// print, where a test can run them: every `harvest` command line parses
// with the real flag set, `harvest decide` prints the decision shown,
// and the tables of `harvest jobs` and `harvest explain` and the lines of
// `submit --wait` have the shape the code writes.

const readmePath = "../../README.md"

// example is one command of a ```console block and the lines it printed.
type example struct {
	line   int // in README.md, 1-based
	args   []string
	output []string
}

// prompt matches a command line of a console block: "$ harvest",
// "# harvest", "carol$ harvest".
var prompt = regexp.MustCompile(`^[a-z]*[$#] (harvest .*)$`)

func readmeExamples(t *testing.T) []example {
	t.Helper()
	f, err := os.Open(readmePath)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []example
	var cur *example
	inConsole, n := false, 0
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		n++
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "```console"):
			inConsole = true
			continue
		case strings.HasPrefix(line, "```"):
			inConsole, cur = false, nil
			continue
		case !inConsole:
			continue
		}
		if m := prompt.FindStringSubmatch(line); m != nil {
			cmd := m[1]
			for strings.HasSuffix(cmd, `\`) && sc.Scan() {
				n++
				cmd = strings.TrimSuffix(cmd, `\`) + " " + strings.TrimSpace(sc.Text())
			}
			out = append(out, example{line: n, args: shellWords(t, cmd)})
			cur = &out[len(out)-1]
			continue
		}
		if strings.HasPrefix(line, "$ ") || strings.HasPrefix(line, "# ") {
			cur = nil // another program's command
			continue
		}
		if cur != nil {
			cur.output = append(cur.output, line)
		}
	}
	if len(out) < 5 {
		t.Fatalf("found %d harvest examples in the README: the parser is broken", len(out))
	}
	return out
}

// shellWords splits a command line as sh would for these examples:
// blanks separate words, quotes group them, a trailing & and # comments
// are dropped.
func shellWords(t *testing.T, s string) []string {
	t.Helper()
	var words []string
	var w strings.Builder
	inWord := false
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '\'' || c == '"':
			j := strings.IndexByte(s[i+1:], c)
			if j < 0 {
				t.Fatalf("unbalanced quote in %q", s)
			}
			w.WriteString(s[i+1 : i+1+j])
			i += j + 1
			inWord = true
		case c == ' ' || c == '\t':
			if inWord {
				words, inWord = append(words, w.String()), false
				w.Reset()
			}
		case c == '#' && !inWord, c == '&' && !inWord && strings.TrimSpace(s[i+1:]) == "":
			i = len(s)
		default:
			w.WriteByte(c)
			inWord = true
		}
	}
	if inWord {
		words = append(words, w.String())
	}
	return words
}

func findExample(t *testing.T, examples []example, words ...string) example {
	t.Helper()
	for _, e := range examples {
		if len(e.args) > len(words) && reflect.DeepEqual(e.args[1:1+len(words)], words) {
			return e
		}
	}
	t.Fatalf("the README has no `harvest %s` example", strings.Join(words, " "))
	return example{}
}

func TestREADMECommandsParseWithTheRealFlags(t *testing.T) {
	for _, e := range readmeExamples(t) {
		app := newApp()
		app.Writer, app.ErrWriter = io.Discard, io.Discard
		ran := false
		var noop func(cmds []*cli.Command)
		noop = func(cmds []*cli.Command) {
			for _, c := range cmds {
				c.Before = nil // the agent's would read its config file
				if c.Action != nil {
					c.Action = func(*cli.Context) error { ran = true; return nil }
				}
				noop(c.Subcommands)
			}
		}
		noop(app.Commands)
		if err := app.Run(e.args); err != nil || !ran {
			t.Errorf("README.md:%d: %q does not parse: %v", e.line, strings.Join(e.args, " "), err)
		}
	}
}

func TestREADMEDecideExampleIsWhatDecidePrints(t *testing.T) {
	e := findExample(t, readmeExamples(t), "decide")
	args := append([]string{}, e.args[1:]...)
	for i, a := range args {
		if strings.HasPrefix(a, "agent/policy/testdata/") {
			args[i] = filepath.Join("../..", a)
		}
	}
	out, msg, code := runHarvest(t, "", args...)
	if code != 0 {
		t.Fatalf("README.md:%d: exit %d: %s", e.line, code, msg)
	}
	var got, want map[string]any
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal([]byte(strings.Join(e.output, "\n")), &want); err != nil {
		t.Fatalf("README.md:%d: the example's output is not JSON: %v", e.line, err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("README.md:%d: decide prints\n%s\nthe README shows\n%s", e.line, out, strings.Join(e.output, "\n"))
	}
}

func TestREADMEJobsAndExplainTablesHaveTheColumnsTheCommandsPrint(t *testing.T) {
	examples := readmeExamples(t)
	q := startCLIQueue(t)
	if _, msg, code := run(t, "submit", filepath.Join(q.data, "ds"), "--queue", q.url, "--token", q.token, "--", "prog", "{input}"); code != 0 {
		t.Fatal(msg)
	}
	jobsOut, msg, code := run(t, "jobs", "--queue", q.url, "--token", q.token)
	if code != 0 {
		t.Fatal(msg)
	}
	explainOut, msg, code := runHarvest(t, "", "explain", "--dir", dumpRounds(t))
	if code != 0 {
		t.Fatal(msg)
	}
	for _, tc := range []struct {
		cmd  string
		real string
	}{{"jobs", jobsOut}, {"explain", explainOut}} {
		e := findExample(t, examples, tc.cmd)
		if len(e.output) == 0 {
			t.Fatalf("README.md:%d: no output shown", e.line)
		}
		got, want := strings.Fields(strings.SplitN(tc.real, "\n", 2)[0]), strings.Fields(e.output[0])
		if !reflect.DeepEqual(got, want) {
			t.Errorf("README.md:%d: `harvest %s` prints the columns %q, the README shows %q", e.line, tc.cmd, got, want)
		}
	}
	// Every explain row's action reads as the code writes it.
	action := regexp.MustCompile(`  (nothing|submit \d+ \(limit \S+\)|release \d+ \([^)]+\))  `)
	for _, row := range findExample(t, examples, "explain").output[1:] {
		if !action.MatchString(row) {
			t.Errorf("README explain row %q has no action the code writes", row)
		}
	}
}

func TestREADMESubmitWaitLinesHaveTheShapeTheCodeWrites(t *testing.T) {
	e := findExample(t, readmeExamples(t), "submit")
	progress := regexp.MustCompile(`^\[[#.]{30}\] \d+/\d+ done, \d+ failed, \d+ running  (ETA --|ETA \S+ at [\d.]+ tasks/(s|min)|)  [A-Z_]+$`)
	shapes := []*regexp.Regexp{
		regexp.MustCompile(`^job \d+ submitted: \d+ tasks, output in \S+$`),
		progress,
		regexp.MustCompile(`^\.\.\.$`),
		regexp.MustCompile(`^job \d+ [A-Z_]+: \d+ done, \d+ failed, \d+ killed of \d+$`),
	}
	for _, l := range e.output {
		ok := false
		for _, re := range shapes {
			ok = ok || re.MatchString(strings.TrimRight(l, " "))
		}
		if !ok {
			t.Errorf("README.md: submit --wait line %q is not what the code writes", l)
		}
	}
	// The progress pattern is the code's: it matches lines progressLine draws.
	est := newRateEstimator(etaTau)
	j := api.Job{State: api.JobRunning, Tasks: api.TaskCounts{Total: 200, Done: 14, Running: 17}}
	for _, l := range []string{progressLine(j, est), func() string {
		t0 := time.Unix(1_700_000_000, 0)
		est.Observe(t0, 0)
		est.Observe(t0.Add(5*time.Second), 14)
		return progressLine(j, est)
	}()} {
		if !progress.MatchString(l) {
			t.Errorf("the README check's pattern misses the real line %q", l)
		}
	}
}

func TestREADMEStatesTheGoVersionOfGoMod(t *testing.T) {
	mod, err := os.ReadFile("../../go.mod")
	if err != nil {
		t.Fatal(err)
	}
	need := regexp.MustCompile(`(?m)^go (\S+)$`).FindSubmatch(mod)
	readme, err := os.ReadFile(readmePath)
	if err != nil {
		t.Fatal(err)
	}
	stated := regexp.MustCompile(`Go (\d+\.\d+(\.\d+)?) or newer`).FindAllSubmatch(readme, -1)
	if need == nil || len(stated) != 1 || string(stated[0][1]) != string(need[1]) {
		t.Fatalf("the README must state go.mod's Go version (%s) once, as \"Go %s or newer\"; it states %q", need[1], need[1], stated)
	}
}

func TestCheckGoAsksForTheVersionOfGoModBeforeAnythingElse(t *testing.T) {
	if _, err := exec.LookPath("bash"); err != nil {
		t.Skip("no bash")
	}
	fake := func(version string) string { // a directory with a go that reports version
		dir := t.TempDir()
		script := "#!/bin/sh\n[ \"$1 $2\" = \"env GOVERSION\" ] && echo go" + version + "\n"
		if err := os.WriteFile(filepath.Join(dir, "go"), []byte(script), 0o755); err != nil {
			t.Fatal(err)
		}
		return dir
	}
	mod, err := os.ReadFile("../../go.mod")
	if err != nil {
		t.Fatal(err)
	}
	need := string(regexp.MustCompile(`(?m)^go (\S+)$`).FindSubmatch(mod)[1])
	tests := []struct {
		name, goDir, toolchain string
		wantCode               int
		want                   string
	}{
		{"the version of go.mod passes", fake(need), "", 0, "go: " + need},
		{"a newer Go passes", fake("99.0.0"), "", 0, "go: 99.0.0"},
		{"an older Go is refused with what to install", fake("1.20.0"), "", 1, "harvest needs Go " + need + " or newer (go.mod), but"},
		{"an older Go may fetch the toolchain when the user allows it", fake("1.20.0"), "go" + need, 0, "lets it fetch Go " + need},
		{"no Go at all says where to get it", t.TempDir(), "", 1, "no 'go' is on the PATH: install Go " + need + " or newer from https://go.dev/dl/"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cmd := exec.Command("bash", "../../scripts/check-go.sh")
			cmd.Env = []string{"PATH=" + tc.goDir + ":/usr/bin:/bin", "GOTOOLCHAIN=" + tc.toolchain}
			out, err := cmd.CombinedOutput()
			code := 0
			if ee, ok := err.(*exec.ExitError); ok {
				code = ee.ExitCode()
			} else if err != nil {
				t.Fatal(err)
			}
			if code != tc.wantCode || !strings.Contains(string(out), tc.want) {
				t.Errorf("exit %d, output %q; want exit %d and %q", code, out, tc.wantCode, tc.want)
			}
		})
	}
}
