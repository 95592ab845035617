package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/urfave/cli/v2"
)

var (
	docsBuiltOnce sync.Once
	docsBuiltPath string
	docsBuiltErr  error
)

// builtHarvestForDocs builds the harvest binary once per test process, for tests
// that run it as a shell would (completion, the docs' runnable blocks).
func builtHarvestForDocs(t *testing.T) string {
	t.Helper()
	docsBuiltOnce.Do(func() {
		dir, err := os.MkdirTemp("", "harvest-bin-")
		if err != nil {
			docsBuiltErr = err
			return
		}
		docsBuiltPath = filepath.Join(dir, "harvest")
		out, err := exec.Command("go", "build", "-o", docsBuiltPath, ".").CombinedOutput()
		if err != nil {
			docsBuiltErr = &docsBuildError{out: string(out), err: err}
		}
	})
	if docsBuiltErr != nil {
		t.Fatalf("go build: %v", docsBuiltErr)
	}
	return docsBuiltPath
}

type docsBuildError struct {
	out string
	err error
}

func (e *docsBuildError) Error() string { return e.err.Error() + ": " + e.out }

// commandPaths lists "harvest-a-b" for every visible command.
func commandPaths(prefix string, cmds []*cli.Command) []string {
	var out []string
	for _, c := range cmds {
		if c.Hidden {
			continue
		}
		out = append(out, prefix+"-"+c.Name)
		out = append(out, commandPaths(prefix+"-"+c.Name, c.Subcommands)...)
	}
	return out
}

func TestEveryCommandHasAManPageListingItsFlags(t *testing.T) {
	dir := t.TempDir()
	app := newApp()
	if _, err := writeDocs(app, dir); err != nil {
		t.Fatal(err)
	}
	entries, err := os.ReadDir(filepath.Join(dir, "man1"))
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range entries {
		got = append(got, strings.TrimSuffix(e.Name(), ".1"))
	}
	want := append([]string{"harvest"}, commandPaths("harvest", app.Commands)...)
	sort.Strings(got)
	sort.Strings(want)
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Fatalf("man pages %v, want one per visible command %v", got, want)
	}
	for _, p := range []string{"harvest-__docs", "harvest-worker"} {
		if _, err := os.Stat(filepath.Join(dir, "man1", p+".1")); err == nil {
			t.Errorf("hidden command %s has a man page", p)
		}
	}
	// Each page documents its command's own flags, under OPTIONS.
	page, err := os.ReadFile(filepath.Join(dir, "man1", "harvest-agent.1"))
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range agentFlags() {
		if vf, ok := f.(cli.VisibleFlag); ok && !vf.IsVisible() {
			continue // hidden (kept so old configurations start): no page lists it
		}
		if !strings.Contains(string(page), "--"+f.Names()[0]) {
			t.Errorf("harvest-agent.1 does not document --%s", f.Names()[0])
		}
	}
	if !strings.Contains(string(page), ".SH OPTIONS") || strings.Contains(string(page), "GLOBAL OPTIONS") {
		t.Error("harvest-agent.1's flags are not under OPTIONS")
	}
	if man, err := exec.LookPath("man"); err == nil {
		out, err := exec.Command(man, "-l", filepath.Join(dir, "man1", "harvest-submit.1")).CombinedOutput()
		if err != nil || !strings.Contains(string(out), "harvest submit") || !strings.Contains(string(out), "--batch-size") {
			t.Errorf("man -l harvest-submit.1: %v\n%s", err, out)
		}
	}
}

func TestBashCompletionAsksTheBinary(t *testing.T) {
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Skip("no bash")
	}
	bin := builtHarvestForDocs(t)
	dir := t.TempDir()
	if _, err := writeDocs(newApp(), dir); err != nil {
		t.Fatal(err)
	}
	complete := func(words ...string) []string {
		script := `source "$1"; shift; COMP_WORDS=("$@"); COMP_CWORD=$(($# - 1)); _harvest_complete; printf '%s\n' "${COMPREPLY[@]}"`
		cmd := exec.Command(bash, append([]string{"-c", script, "bash", filepath.Join(dir, "bash-completion", "harvest")}, words...)...)
		cmd.Env = append(os.Environ(), "PATH="+filepath.Dir(bin)+":"+os.Getenv("PATH"))
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("completing %q: %v", words, err)
		}
		return strings.Fields(string(out))
	}
	cases := []struct {
		words []string
		want  string
	}{
		{[]string{"harvest", "sub"}, "submit"},
		{[]string{"harvest", "admin", "dr"}, "drain"},
		{[]string{"harvest", "agent", "--give"}, "--give-back"},
	}
	for _, tc := range cases {
		got := complete(tc.words...)
		if len(got) != 1 || got[0] != tc.want {
			t.Errorf("completing %q gave %q, want [%s]", tc.words, got, tc.want)
		}
	}
}
