package replay

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// A run cut short stops its agent before it cancels the jobs and pilots:
// cancelled first, the jobs freed nodes that the still running agent
// filled with new pilots, left behind by the replay.
func TestAbandonStopsTheAgentBeforeItCancels(t *testing.T) {
	dir := t.TempDir()
	agent := exec.Command("sleep", "60")
	if err := agent.Start(); err != nil {
		t.Fatal(err)
	}
	defer agent.Process.Kill()
	// scancel, as the run calls it, notes its arguments and whether the
	// agent still ran then.
	notes := filepath.Join(dir, "notes")
	script := "#!/bin/sh\nif kill -0 " + strconv.Itoa(agent.Process.Pid) + " 2>/dev/null; then s=alive; else s=gone; fi\necho \"$s $*\" >> " + notes + "\n"
	if err := os.WriteFile(filepath.Join(dir, "scancel"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", dir+string(os.PathListSeparator)+os.Getenv("PATH"))
	abandon(agent, RunConfig{Tag: "harvest-pilot"}, map[string]string{"41": "j1"})
	b, err := os.ReadFile(notes)
	if err != nil {
		t.Fatal(err)
	}
	got := strings.Split(strings.TrimSpace(string(b)), "\n")
	want := []string{"gone 41", "gone --name harvest-pilot"}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Fatalf("scancel calls %q, want %q (the agent stopped before any cancel)", got, want)
	}
}
