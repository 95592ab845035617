package worker

import (
	"os"
	"time"

	"github.com/harvest-hpc/harvest/internal/logcap"
)

// DefaultLogMax is the size a task's log (each of stdout and stderr) may
// reach before it is cut (logcap): its first DefaultLogMax bytes, a
// marker line and its last 8 KiB are kept, the task runs on.
const DefaultLogMax = 100 << 20

// watchLogs cuts the logs the worker holds for p's task (stdout, stderr:
// an unconfined task's, a batched run's) at r.LogMax every
// logcap.Interval until done closes, then once more, and returns a
// function that waits for that last cut (call it after done closed,
// before the logs are read). The logs a confined task's runner made are
// its runner's to cut (confine.RunnerPolicy.LogMax).
func (r *ExecRunner) watchLogs(p *prepared, done <-chan struct{}) (wait func()) {
	var logs []*os.File
	for _, f := range []*os.File{p.stdout, p.stderr} {
		if f != nil {
			logs = append(logs, f)
		}
	}
	if r.LogMax <= 0 || len(logs) == 0 {
		return func() {}
	}
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		t := time.NewTicker(logcap.Interval)
		defer t.Stop()
		cut := func() {
			for _, f := range logs {
				logcap.Cut(int(f.Fd()), r.LogMax)
			}
		}
		for {
			select {
			case <-t.C:
				cut()
			case <-done:
				cut()
				return
			}
		}
	}()
	return func() { <-finished }
}
