package replay

import (
	"bufio"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
)

// TaskRun is one run of a harvest task in a pilot, from the tasks' own
// ledger: lines "s TASK PILOT UNIXTIME" when it starts and "e TASK PILOT
// UNIXTIME" when it ends. A run with no end was interrupted (its pilot
// was cancelled or preempted): End is NaN.
type TaskRun struct {
	Task, Pilot string
	Start, End  float64
}

// Done reports whether the run completed.
func (t TaskRun) Done() bool { return !math.IsNaN(t.End) }

// ParseLedger reads the ledger. Malformed lines are errors (the tasks
// write it); an end without a start is too.
func ParseLedger(r io.Reader) ([]TaskRun, error) {
	var runs []TaskRun
	open := map[[2]string]int{} // task, pilot -> index of its open run
	sc := bufio.NewScanner(r)
	n := 0
	for sc.Scan() {
		n++
		f := strings.Fields(sc.Text())
		if len(f) == 0 {
			continue
		}
		if len(f) != 4 || (f[0] != "s" && f[0] != "e") {
			return nil, fmt.Errorf("task ledger line %d: %q is not \"s|e TASK PILOT TIME\"", n, sc.Text())
		}
		t, err := strconv.ParseFloat(f[3], 64)
		if err != nil || math.IsNaN(t) || math.IsInf(t, 0) {
			return nil, fmt.Errorf("task ledger line %d: time %q", n, f[3])
		}
		k := [2]string{f[1], f[2]}
		if f[0] == "s" {
			open[k] = len(runs)
			runs = append(runs, TaskRun{Task: f[1], Pilot: f[2], Start: t, End: math.NaN()})
			continue
		}
		i, ok := open[k]
		if !ok {
			return nil, fmt.Errorf("task ledger line %d: task %s ends in pilot %s without a start", n, f[1], f[2])
		}
		runs[i].End = t
		delete(open, k)
	}
	return runs, sc.Err()
}
