package worker_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/harvest-hpc/harvest/internal/logcap"
	"github.com/harvest-hpc/harvest/pilotproto"
	"github.com/harvest-hpc/harvest/worker"
)

// logHog writes 2 MiB to stdout and stderr, waits (on the event, up to
// the task's timeout) until its stdout was cut while it runs, says so on
// stderr and fails: the task is not killed, its logs stay bounded, and
// its error tail is what it printed last.
const logHog = `
head -c 2097152 /dev/zero | tr '\0' o
head -c 2097152 /dev/zero | tr '\0' e >&2
while size=$(stat -L -c %s /proc/$$/fd/1) && [ "$size" -gt 200000 ]; do sleep 0.05; done
[ -n "$size" ] || exit 9
echo "cut while running; the last words" >&2
exit 3
`

// TestATaskLogIsCutAtItsLimitAndTheTaskRunsOn is the audit's "task logs
// have no size limit": a task writing gigabytes filled the disk. Each log
// keeps its first LogMax bytes, a marker line and its last 8 KiB, cut
// while the task runs (it sees its own stdout shrink) and when it ends;
// the task is neither killed nor failed for it. Unconfined (the worker
// cuts) and confined (the job's runner cuts the logs it made).
func TestATaskLogIsCutAtItsLimitAndTheTaskRunsOn(t *testing.T) {
	const max = 64 << 10
	for _, c := range []struct {
		name string
		mk   func(t *testing.T, dir string) *worker.ExecRunner
	}{
		{"unconfined", func(t *testing.T, dir string) *worker.ExecRunner {
			r := worker.DefaultExecRunner()
			t.Cleanup(func() { r.Close() })
			return r
		}},
		{"confined", confinedRunner},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			r := c.mk(t, dir)
			r.LogMax = max
			task := execTask(dir, 20, "sh", "-c", logHog)
			o := r.Run(context.Background(), task)
			if o.Status != pilotproto.StatusFailed || o.ExitCode != 3 {
				t.Fatalf("status %s, exit %d (%q): want the task's own exit 3, not killed", o.Status, o.ExitCode, o.ErrorTail)
			}
			if !strings.HasSuffix(o.ErrorTail, "cut while running; the last words\n") {
				t.Errorf("error tail %q: want the task's last words", o.ErrorTail)
			}
			for _, s := range []struct{ stream, fill string }{{"out", "o"}, {"err", "e"}} {
				b, err := os.ReadFile(logOf(task, s.stream))
				if err != nil {
					t.Fatal(err)
				}
				if len(b) > max+len(logcap.Marker(max))+logcap.KeepTail {
					t.Errorf("%s log: %d bytes, over its limit", s.stream, len(b))
				}
				if !strings.HasPrefix(string(b), strings.Repeat(s.fill, max)) || !strings.Contains(string(b), logcap.Marker(max)) {
					t.Errorf("%s log: want its first %d bytes and the marker, got %d bytes starting %q", s.stream, max, len(b), b[:min(len(b), 40)])
				}
			}
			if ents, _ := os.ReadDir(filepath.Join(task.OutputDir, ".harvest", "logs")); len(ents) != 2 {
				t.Errorf("logs: %v", ents)
			}
		})
	}
}
