package pilot_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/harvest-hpc/harvest/queue/api"
	"github.com/harvest-hpc/harvest/worker/confine"
)

// batchedScript copies each entry's file v into its output directory and
// records the run (how many entries, which tasks). Its arguments are the
// outputs, then the inputs, in the same order. (No braces: the queue
// reads {...} as a placeholder.)
const batchedScript = `
n=$(($# / 2)); k=0
while [ $k -lt $n ]; do eval "o$k=\$1"; shift; k=$((k+1)); done
k=0
for in in "$@"; do eval "out=\$o$k"; cat "$in/v" > "$out/v" || exit 9; k=$((k+1)); done
echo "$n $HARVEST_TASK_IDS" >> "$(dirname "$out")/runs"
exit "$FAIL"
`

// TestABatchedCommandRunsOncePerBatchOnTheRealPath is issue 30 item 3
// with a real pilot (confined, when the kernel can) and the real queue:
// a job whose command holds {inputs} runs once per batch, with every
// entry's input and output directory; when the command fails, every
// entry of its batch fails with its exit code.
func TestABatchedCommandRunsOncePerBatchOnTheRealPath(t *testing.T) {
	r := startQueue(t)
	submit := func(name string, n, batch int, fail int) api.Job {
		ds := filepath.Join(r.data, name)
		for i := range n {
			os.MkdirAll(filepath.Join(ds, fmt.Sprintf("e%02d", i)), 0o755)
			os.WriteFile(filepath.Join(ds, fmt.Sprintf("e%02d", i), "v"), []byte(fmt.Sprintf("entry %d", i)), 0o644)
		}
		one := 1
		j, err := r.user.Submit(t.Context(), api.JobSpec{Dataset: ds, BatchSize: batch, MaxAttempts: &one,
			Command: []string{"env", "FAIL=" + strconv.Itoa(fail), "sh", "-c", batchedScript, "batch", "{outputs}", "{inputs}"}})
		if err != nil {
			t.Fatal(err)
		}
		return j
	}
	ok := submit("ok", 12, 4, 0)
	bad := submit("bad", 3, 3, 3)
	cfg := fastPilot(r, "600", 2)
	if s := confine.Probe(); s.Confined(confine.ModeRequire) {
		cfg.Worker.Runner = nil // the pilot's own, confined, runner
		cfg.Confine, cfg.TaskRoots = confine.ModeRequire, []string{r.data}
	}
	startPilot(t, cfg, r.pilot)

	got := r.waitJob(t, ok.ID, 30*time.Second)
	if got.State != api.JobDone {
		t.Fatalf("job ended %s with %+v", got.State, got.Tasks)
	}
	for i := range 12 {
		b, err := os.ReadFile(filepath.Join(got.OutputDir, fmt.Sprintf("e%02d", i), "v"))
		if string(b) != fmt.Sprintf("entry %d", i) {
			t.Errorf("entry %d's output: %q %v", i, b, err)
		}
	}
	b, _ := os.ReadFile(filepath.Join(got.OutputDir, "runs"))
	runs := strings.Split(strings.TrimSpace(string(b)), "\n")
	entries, ids := 0, map[string]bool{}
	for _, line := range runs {
		f := strings.Fields(line)
		n, _ := strconv.Atoi(f[0])
		if len(f) != 2 || n < 1 || n > 4 || len(strings.Split(f[1], ",")) != n {
			t.Errorf("run %q: want 1 to 4 entries (the batch size) and as many task ids", line)
			continue
		}
		entries += n
		for _, id := range strings.Split(f[1], ",") {
			ids[id] = true
		}
	}
	t.Logf("runs:\n%s", b)
	if entries != 12 || len(ids) != 12 || len(runs) >= 12 {
		t.Errorf("%d runs for %d entries (%d tasks), want each entry once in fewer runs than entries:\n%s", len(runs), entries, len(ids), b)
	}
	// Each task's log names the run's logs.
	for id := range ids {
		if _, err := os.Stat(filepath.Join(got.OutputDir, ".harvest", "logs", id+".1.err")); err != nil {
			t.Errorf("task %s has no log: %v", id, err)
		}
	}

	got = r.waitJob(t, bad.ID, 30*time.Second)
	if got.State != api.JobFailed {
		t.Fatalf("failing job ended %s", got.State)
	}
	fs, err := r.user.Failures(t.Context(), bad.ID, 0, 100)
	if err != nil {
		t.Fatal(err)
	}
	if len(fs.Failures) != 3 {
		t.Fatalf("%d failures, want the batch's 3 entries: %+v", len(fs.Failures), fs.Failures)
	}
	for _, f := range fs.Failures {
		if f.Status != "failed" || f.ExitCode != 3 {
			t.Errorf("entry %s: %s exit %d, want failed with the command's exit 3", f.Name, f.Status, f.ExitCode)
		}
	}
	b, _ = os.ReadFile(filepath.Join(got.OutputDir, "runs"))
	if strings.Count(string(b), "\n") != 1 {
		t.Errorf("the failing batch ran %q, want once", b)
	}
}
