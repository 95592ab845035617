package worker_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/harvest-hpc/harvest/pilotproto"
	"github.com/harvest-hpc/harvest/worker"
	"github.com/harvest-hpc/harvest/worker/confine"
)

// A job's runner holds the ends of its queued tasks up to 40 ms while more
// of them wait for a slot (its own default, 10 ms, woke the worker about
// once per 7 tasks at one slot; 40 ms about once per 18): the worker asks
// for it in the runner's policy.
func TestTheWorkersRunnersHoldTheirTasksEnds(t *testing.T) {
	if !confine.Probe().Confined(confine.ModeAuto) {
		t.Skip("no Landlock: the worker starts no runner")
	}
	dir := t.TempDir()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	r := worker.DefaultExecRunner()
	r.Roots, r.TempRoot = []string{dir}, dir
	r.Jail = &confine.Launcher{Exe: exe, Mode: confine.ModeAuto}
	defer r.Close()
	out := filepath.Join(dir, "out")
	if o := r.Run(context.Background(), pilotproto.Task{ID: 1, Attempt: 1, JobID: 1, OutputDir: out, Output: filepath.Join(out, "x"),
		Command: []string{"true"}}); o.Status != pilotproto.StatusDone {
		t.Fatalf("%s %q", o.Status, o.ErrorTail)
	}
	// The job's runner: this process's child (the job stays cached).
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	found := false
	for _, p := range procs {
		b, err := os.ReadFile(p)
		args := strings.Split(string(b), "\x00")
		if err != nil || len(args) < 3 || args[1] != confine.RunnerArg {
			continue
		}
		st, err := os.ReadFile(filepath.Join(filepath.Dir(p), "stat"))
		if err != nil {
			continue
		}
		f := strings.Fields(string(st[strings.LastIndexByte(string(st), ')')+1:]))
		if ppid, _ := strconv.Atoi(f[1]); ppid != os.Getpid() {
			continue
		}
		var rp confine.RunnerPolicy
		if err := json.Unmarshal([]byte(args[2]), &rp); err != nil {
			t.Fatal(err)
		}
		if rp.HoldMS != 40 {
			t.Errorf("the job's runner holds its tasks' ends %d ms, want 40", rp.HoldMS)
		}
		found = true
	}
	if !found {
		t.Fatal("no runner of the job found among this process's children")
	}
}
