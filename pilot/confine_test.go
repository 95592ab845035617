package pilot_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/harvest-hpc/harvest/queue/api"
	"github.com/harvest-hpc/harvest/worker/confine"
)

// TestMain lets this test binary serve as the confining launcher, as
// harvest's main does.
func TestMain(m *testing.M) {
	confine.Main()
	os.Exit(m.Run())
}

// TestAPilotsTasksCannotReadTheCheckpointNorWriteOutsideTheirOutput is
// issue 13 item 2 with a real pilot and the real queue: a task ran with
// the pilot's reach, so it could read (and forge) the master's checkpoint
// in the state directory and write into other users' outputs.
func TestAPilotsTasksCannotReadTheCheckpointNorWriteOutsideTheirOutput(t *testing.T) {
	if s := confine.Probe(); !s.Confined(confine.ModeRequire) {
		t.Skipf("this kernel has no Landlock: %v", s.Err)
	}
	r := startQueue(t)
	other := filepath.Join(r.outputs, "bob", "job-1")
	os.MkdirAll(other, 0o755)
	checkpoint := filepath.Join(r.state, "master-1.db") // the first master's epoch
	// A function body in ( ) rather than { }: the queue reads {...} as a placeholder.
	script := `
try() ( what=$1; shift; if "$@" >/dev/null 2>&1; then echo "$what ok"; else echo "$what denied"; fi )
try read-checkpoint cat "$3"
try write-state sh -c 'echo x > "$1/forged"' sh "$4"
try write-other sh -c 'echo x > "$1/stolen"' sh "$5"
try read-input ls "$1"
try write-output sh -c 'echo x > "$1"' sh "$2"
try env-token sh -c 'env | grep -q HARVEST_PILOT_TOKEN'
`
	ds := filepath.Join(r.data, "probe")
	os.MkdirAll(filepath.Join(ds, "only"), 0o755)
	j, err := r.user.Submit(t.Context(), api.JobSpec{Dataset: ds, BatchSize: 1,
		Command: []string{"sh", "-c", `exec > "$2.report"; ` + script, "task", "{input}", "{output}", checkpoint, r.state, other}})
	if err != nil {
		t.Fatal(err)
	}
	cfg := fastPilot(r, "600", 2)
	cfg.Worker.Runner = nil // the pilot's own, confined, runner
	cfg.Confine, cfg.TaskRoots = confine.ModeRequire, []string{r.data}
	startPilot(t, cfg, r.pilot)
	got := r.waitJob(t, j.ID, 30*time.Second)
	if got.State != api.JobDone {
		t.Fatalf("job ended %s with %+v", got.State, got.Tasks)
	}
	if _, err := os.Stat(checkpoint); err != nil {
		t.Fatalf("no checkpoint to protect: %v", err)
	}
	b, _ := os.ReadFile(filepath.Join(got.OutputDir, "only.report"))
	report := string(b)
	for _, want := range []string{"read-checkpoint denied", "write-state denied", "write-other denied",
		"read-input ok", "write-output ok", "env-token denied"} {
		if !strings.Contains(report, want+"\n") {
			t.Errorf("report lacks %q:\n%s", want, report)
		}
	}
	for _, f := range []string{filepath.Join(r.state, "forged"), filepath.Join(other, "stolen")} {
		if _, err := os.Stat(f); err == nil {
			t.Errorf("the task wrote %s", f)
		}
	}
}
