package worker_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/harvest-hpc/harvest/pilotproto"
	"github.com/harvest-hpc/harvest/worker"
	"github.com/harvest-hpc/harvest/worker/confine"
)

// TestMain lets this test binary serve as the confining launcher.
func TestMain(m *testing.M) {
	confine.Main()
	os.Exit(m.Run())
}

// TestAnOutputDirectoryReplacedByALinkIsRefused is issue 13 item 3: a
// user submits with an output directory, then replaces it with a link;
// the worker wrote through it (logs, the task's working directory). The
// worker now opens the output directory without following links.
func TestAnOutputDirectoryReplacedByALinkIsRefused(t *testing.T) {
	dir := t.TempDir()
	elsewhere := filepath.Join(dir, "state")
	os.Mkdir(elsewhere, 0o700)
	task := execTask(dir, 0, "sh", "-c", `echo pwned > "$1"`, "sh", "x")
	os.Symlink(elsewhere, task.OutputDir)
	o := worker.DefaultExecRunner().Run(context.Background(), task)
	if o.Status != pilotproto.StatusFailed || !strings.Contains(o.ErrorTail, "output directory") {
		t.Fatalf("status %s (%q), want a failure naming the output directory", o.Status, o.ErrorTail)
	}
	if entries, _ := os.ReadDir(elsewhere); len(entries) != 0 {
		t.Fatalf("the worker wrote through the link: %v", entries)
	}
}

// TestALogFileReplacedByALinkIsRefused: the same for a task log a user
// turned into a link to a file of harvest's (a retry reuses the name).
func TestALogFileReplacedByALinkIsRefused(t *testing.T) {
	dir := t.TempDir()
	precious := filepath.Join(dir, "master.db")
	os.WriteFile(precious, []byte("checkpoint"), 0o600)
	task := execTask(dir, 0, "true")
	logs := filepath.Join(task.OutputDir, ".harvest", "logs")
	os.MkdirAll(logs, 0o755)
	os.Symlink(precious, filepath.Join(logs, "3.2.err"))
	o := worker.DefaultExecRunner().Run(context.Background(), task)
	if o.Status != pilotproto.StatusFailed {
		t.Fatalf("status %s, want failed", o.Status)
	}
	if b, _ := os.ReadFile(precious); string(b) != "checkpoint" {
		t.Fatalf("the worker truncated the link's target: %q", b)
	}
}

// TestAnInputLinkedOutsideTheRootsIsRefused is issue 13 item 4's worker
// part: a dataset entry that is a link leading out of the allowed roots
// is not handed to the task.
func TestAnInputLinkedOutsideTheRootsIsRefused(t *testing.T) {
	dir := t.TempDir()
	root := filepath.Join(dir, "data")
	os.MkdirAll(filepath.Join(root, "ds"), 0o755)
	os.MkdirAll(filepath.Join(dir, "private"), 0o700)
	os.WriteFile(filepath.Join(dir, "private", "secret"), []byte("s"), 0o600)
	task := execTask(dir, 0, "sh", "-c", `cat "$1/secret" > "$2"`, "sh", "{input}", "{output}")
	task.Input = filepath.Join(root, "ds", "shadow")
	os.Symlink(filepath.Join(dir, "private"), task.Input)
	r := worker.DefaultExecRunner()
	r.Roots = []string{root}
	o := r.Run(context.Background(), task)
	if o.Status != pilotproto.StatusFailed || !strings.Contains(o.ErrorTail, "input") {
		t.Fatalf("status %s (%q), want a failure naming the input", o.Status, o.ErrorTail)
	}
	if _, err := os.Stat(task.Output); err == nil {
		t.Fatal("the task ran with an input outside the roots")
	}
}

// probeScript tries what a hostile task would and prints one line per
// attempt: "<what> ok" or "<what> denied".
const probeScript = `
try() { what=$1; shift; if "$@" >/dev/null 2>&1; then echo "$what ok"; else echo "$what denied"; fi; }
try read-checkpoint cat "$STATE/master.db"
try read-token cat "$STATE/pilot.token"
try write-other-output sh -c 'echo x > "$OTHER/stolen"'
try write-outside sh -c 'echo x > "$STATE/forged"'
try read-roots cat "$ROOT/ds/in/data"
try read-input sh -c 'ls "$1" | grep -q data' sh "$1"
try write-tmp sh -c 'echo x > "$TMPDIR/t"'
try write-own-output sh -c 'echo x > "$2"' sh "$1" "$2"
try signal-pilot kill -0 $PPID
try pilot-environ sh -c 'cat /proc/$PPID/environ | grep -q HARVEST'
try read-devshm cat "$SHM"
try read-urandom head -c 1 /dev/urandom
`

// TestAConfinedTaskReachesOnlyItsOwnFiles is issue 13 item 2: a task ran
// with everything the pilot account can reach (the checkpoint, the token,
// other users' outputs). Confined, it reads the roots and writes only its
// output directory and its temporary directory. The same probe run
// unconfined shows the test can tell.
func TestAConfinedTaskReachesOnlyItsOwnFiles(t *testing.T) {
	sup := confine.Probe()
	if !sup.Confined(confine.ModeRequire) {
		t.Skipf("this kernel has no Landlock: %v", sup.Err)
	}
	dir := t.TempDir()
	root := filepath.Join(dir, "data")
	state := filepath.Join(dir, "state")
	other := filepath.Join(root, "bob-out")
	for _, d := range []string{filepath.Join(root, "ds", "in"), state, other} {
		os.MkdirAll(d, 0o755)
	}
	os.WriteFile(filepath.Join(root, "ds", "in", "data"), []byte("d"), 0o644)
	os.WriteFile(filepath.Join(state, "master.db"), []byte("checkpoint"), 0o600)
	os.WriteFile(filepath.Join(state, "pilot.token"), []byte("token"), 0o600)
	// A pilot's file in /dev/shm (TMPDIR=/dev/shm put every job's
	// temporary directories there): tasks read all of /dev.
	shm, err := os.CreateTemp("/dev/shm", "harvest-probe-")
	if err != nil {
		t.Fatal(err)
	}
	shm.Close()
	t.Cleanup(func() { os.Remove(shm.Name()) })
	t.Setenv("HARVEST_TEST_MARKER", "x") // the pilot's own environment, for pilot-environ
	run := func(jail *confine.Launcher) map[string]string {
		task := pilotproto.Task{ID: 1, Attempt: 1, JobID: 1, Input: filepath.Join(root, "ds", "in"),
			OutputDir: filepath.Join(root, "alice-out"), Output: filepath.Join(root, "alice-out", "in"),
			Command: []string{"sh", "-c", probeScript, "sh", "{input}", "{output}"},
			Env:     []string{"STATE=" + state, "OTHER=" + other, "ROOT=" + root, "SHM=" + shm.Name()}}
		r := worker.DefaultExecRunner()
		r.Roots, r.Jail = []string{root}, jail
		o := r.Run(context.Background(), task)
		if o.Status != pilotproto.StatusDone {
			t.Fatalf("probe: %s %d %q", o.Status, o.ExitCode, o.ErrorTail)
		}
		b, _ := os.ReadFile(filepath.Join(task.OutputDir, ".harvest", "logs", "1.1.out"))
		got := map[string]string{}
		for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
			k, v, _ := strings.Cut(line, " ")
			got[k] = v
		}
		os.Remove(filepath.Join(state, "forged"))
		os.Remove(filepath.Join(other, "stolen"))
		return got
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	confined := run(&confine.Launcher{Exe: exe, Mode: confine.ModeRequire})
	open := run(nil)
	want := map[string]string{
		"read-checkpoint": "denied", "read-token": "denied", "write-other-output": "denied", "write-outside": "denied",
		"read-roots": "ok", "read-input": "ok", "write-tmp": "ok", "write-own-output": "ok", "signal-pilot": "denied",
		"pilot-environ": "denied", "read-devshm": "denied", "read-urandom": "ok",
	}
	if os.Getuid() == 0 {
		// Root passes the kernel's ptrace check on /proc/PID/environ even
		// in a Landlock domain; pilots are not meant to run as root, and
		// the pilot token is not in the pilot's environment anyway.
		delete(want, "pilot-environ")
	}
	for k, v := range want {
		if confined[k] != v {
			t.Errorf("confined task: %s %s, want %s", k, confined[k], v)
		}
	}
	for _, k := range []string{"read-checkpoint", "write-other-output", "write-outside", "read-devshm"} {
		if open[k] != "ok" {
			t.Errorf("unconfined probe %s: %s: the probe cannot tell", k, open[k])
		}
	}
}

// TestConfiningTasksLeavesTheWorkerFree: the tasks of a job are started
// by the job's runner, confined once; none of that confinement may reach
// the worker (its checkpoint and state are outside every task's rules).
// After many confined tasks at once, every goroutine of the worker still
// writes where the tasks cannot, and each task is in a domain of its own:
// it cannot signal a sibling task of the same job.
func TestConfiningTasksLeavesTheWorkerFree(t *testing.T) {
	if sup := confine.Probe(); !sup.Confined(confine.ModeRequire) {
		t.Skipf("this kernel has no Landlock: %v", sup.Err)
	}
	dir := t.TempDir()
	root := filepath.Join(dir, "data")
	state := filepath.Join(dir, "state")
	os.MkdirAll(root, 0o755)
	os.MkdirAll(state, 0o755)
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	r := worker.DefaultExecRunner()
	r.Roots, r.Jail = []string{root}, &confine.Launcher{Exe: exe, Mode: confine.ModeRequire}
	defer r.Close()
	out := filepath.Join(root, "out")
	// A long task of the job whose pid the others try to signal.
	pidFile := filepath.Join(out, "sibling.pid")
	ctx, cancel := context.WithCancel(context.Background())
	sibling := make(chan worker.Outcome, 1)
	go func() {
		sibling <- r.Run(ctx, pilotproto.Task{ID: 1000, Attempt: 1, JobID: 7, OutputDir: out, Output: filepath.Join(out, "s"),
			Command: []string{"sh", "-c", `echo $$ > "$1.tmp" && mv "$1.tmp" "$1" && exec sleep 60`, "sh", pidFile}})
	}()
	ended := false
	defer func() {
		cancel()
		if !ended {
			<-sibling
		}
	}()
	for i := 0; ; i++ {
		if _, err := os.Stat(pidFile); err == nil {
			break
		}
		select {
		case o := <-sibling:
			ended = true
			t.Fatalf("the long task ended: %+v", o)
		default:
		}
		if i > 500 {
			t.Fatal("the long task did not start")
		}
		time.Sleep(10 * time.Millisecond) // polling a file the task writes, with a bound
	}
	var wg sync.WaitGroup
	outcomes := make([]worker.Outcome, 40)
	for i := range outcomes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			outcomes[i] = r.Run(context.Background(), pilotproto.Task{ID: int64(i + 1), Attempt: 1, JobID: 7, OutputDir: out,
				Output: filepath.Join(out, strconv.Itoa(i)), Env: []string{"STATE=" + state, "PIDFILE=" + pidFile},
				Command: []string{"sh", "-c", `if kill -0 "$(cat "$PIDFILE")" 2>/dev/null; then echo signalled > "$1"; fi; ! echo x > "$STATE/t$$"`, "sh", "{output}"}})
		}()
	}
	wg.Wait()
	for i, o := range outcomes {
		if o.Status != pilotproto.StatusDone {
			t.Fatalf("task %d: %s %d %q: it wrote outside its rules", i+1, o.Status, o.ExitCode, o.ErrorTail)
		}
		if b, _ := os.ReadFile(filepath.Join(out, strconv.Itoa(i))); len(b) > 0 {
			t.Fatalf("task %d signalled its sibling task", i+1)
		}
	}
	var werr atomic.Value
	for i := range 200 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := os.WriteFile(filepath.Join(state, fmt.Sprintf("w%d", i)), []byte("x"), 0o600); err != nil {
				werr.Store(err)
			}
		}()
	}
	wg.Wait()
	if err := werr.Load(); err != nil {
		t.Fatalf("the worker lost access to its own files: %v", err)
	}
}

// runnerPids lists this process's children that are task runners.
func runnerPids(t *testing.T) []int {
	tasks, _ := filepath.Glob("/proc/self/task/*/children")
	var pids []int
	for _, f := range tasks {
		b, _ := os.ReadFile(f)
		for _, s := range strings.Fields(string(b)) {
			pid, _ := strconv.Atoi(s)
			cmd, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
			if strings.Contains(string(cmd), confine.RunnerArg) {
				pids = append(pids, pid)
			}
		}
	}
	return pids
}

// TestARunnerThatDiesFailsItsTasksAndIsReplaced: if a job's runner dies
// (a task of the job killed it), the tasks it ran fail saying so, they do
// not outlive it, and the job's next task gets a new runner.
func TestARunnerThatDiesFailsItsTasksAndIsReplaced(t *testing.T) {
	if sup := confine.Probe(); !sup.Confined(confine.ModeRequire) {
		t.Skipf("this kernel has no Landlock: %v", sup.Err)
	}
	dir := t.TempDir()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	r := worker.DefaultExecRunner()
	r.Roots, r.Jail = []string{dir}, &confine.Launcher{Exe: exe, Mode: confine.ModeRequire}
	defer r.Close()
	out := filepath.Join(dir, "out")
	pidFile := filepath.Join(out, "task.pid")
	others := map[int]bool{} // other tests' runners
	for _, pid := range runnerPids(t) {
		others[pid] = true
	}
	res := make(chan worker.Outcome, 1)
	go func() {
		res <- r.Run(context.Background(), pilotproto.Task{ID: 1, Attempt: 1, JobID: 3, OutputDir: out, Output: filepath.Join(out, "1"),
			Command: []string{"sh", "-c", `echo $$ > "$1.tmp" && mv "$1.tmp" "$1" && exec sleep 60`, "sh", pidFile}})
	}()
	for i := 0; ; i++ {
		if _, err := os.Stat(pidFile); err == nil {
			break
		}
		if i > 500 {
			t.Fatal("the task did not start")
		}
		time.Sleep(10 * time.Millisecond) // polling a file the task writes, with a bound
	}
	b, _ := os.ReadFile(pidFile)
	taskPid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	var runners []int
	for _, pid := range runnerPids(t) {
		if !others[pid] {
			runners = append(runners, pid)
		}
	}
	if len(runners) != 1 {
		t.Fatalf("runners %v, want one", runners)
	}
	syscall.Kill(runners[0], syscall.SIGKILL)
	select {
	case o := <-res:
		if o.Status != pilotproto.StatusFailed || !strings.Contains(o.ErrorTail, "task runner ended") {
			t.Fatalf("the task of the dead runner: %s %q", o.Status, o.ErrorTail)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the task of the dead runner was not reported")
	}
	for i := 0; syscall.Kill(taskPid, 0) == nil && !zombie(taskPid); i++ {
		if i > 500 {
			t.Fatal("the task outlived its runner")
		}
		time.Sleep(10 * time.Millisecond) // the kernel's SIGKILL, with a bound
	}
	o := r.Run(context.Background(), pilotproto.Task{ID: 2, Attempt: 1, JobID: 3, OutputDir: out, Output: filepath.Join(out, "2"),
		Command: []string{"true"}})
	if o.Status != pilotproto.StatusDone {
		t.Fatalf("the job's next task: %s %q", o.Status, o.ErrorTail)
	}
}

// TestARunnerOutlivesTheBatchSystemsStopSignal: scancel's SIGTERM reaches
// the job's runner as well as the worker; the runner keeps running (the
// worker, not a dead runner, decides that its tasks were interrupted and
// charges no attempt), its task too, and it runs the job's next task.
func TestARunnerOutlivesTheBatchSystemsStopSignal(t *testing.T) {
	if sup := confine.Probe(); !sup.Confined(confine.ModeRequire) {
		t.Skipf("this kernel has no Landlock: %v", sup.Err)
	}
	dir := t.TempDir()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	r := worker.DefaultExecRunner()
	r.Roots, r.Jail = []string{dir}, &confine.Launcher{Exe: exe, Mode: confine.ModeRequire}
	defer r.Close()
	out := filepath.Join(dir, "out")
	pidFile := filepath.Join(out, "task.pid")
	others := map[int]bool{}
	for _, pid := range runnerPids(t) {
		others[pid] = true
	}
	ctx, cancel := context.WithCancel(context.Background())
	res := make(chan worker.Outcome, 1)
	go func() {
		res <- r.Run(ctx, pilotproto.Task{ID: 1, Attempt: 1, JobID: 3, OutputDir: out, Output: filepath.Join(out, "1"),
			Command: []string{"sh", "-c", `echo $$ > "$1.tmp" && mv "$1.tmp" "$1" && exec sleep 60`, "sh", pidFile}})
	}()
	for i := 0; ; i++ {
		if _, err := os.Stat(pidFile); err == nil {
			break
		}
		if i > 500 {
			t.Fatal("the task did not start")
		}
		time.Sleep(10 * time.Millisecond) // polling a file the task writes, with a bound
	}
	b, _ := os.ReadFile(pidFile)
	taskPid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	var runners []int
	for _, pid := range runnerPids(t) {
		if !others[pid] {
			runners = append(runners, pid)
		}
	}
	if len(runners) != 1 {
		t.Fatalf("runners %v, want one", runners)
	}
	syscall.Kill(runners[0], syscall.SIGTERM)
	o := r.Run(context.Background(), pilotproto.Task{ID: 2, Attempt: 1, JobID: 3, OutputDir: out, Output: filepath.Join(out, "2"),
		Command: []string{"true"}})
	if o.Status != pilotproto.StatusDone {
		t.Fatalf("the job's next task after SIGTERM: %s %q", o.Status, o.ErrorTail)
	}
	if syscall.Kill(runners[0], 0) != nil || zombie(runners[0]) {
		t.Fatal("the runner died of the stop signal")
	}
	if syscall.Kill(taskPid, 0) != nil || zombie(taskPid) {
		t.Fatal("the running task died with its runner")
	}
	select {
	case o := <-res:
		t.Fatalf("the running task ended: %s %q", o.Status, o.ErrorTail)
	default:
	}
	cancel()
	<-res
}

// TestATaskReadsOnlyItsOwnJobsData: a confined task read everything
// under the roots, so alice's `cat /data/bob/ds/b2/r.txt > {output}`
// printed bob's file although the queue refuses alice bob's dataset. A
// task now reads its job's dataset directory (its input's parent), the
// target of its own entry when that is a link, the --task-read
// directories and the system's; not another job's dataset under the
// same root, nor another task's link target. The same probe unconfined
// shows the test can tell.
func TestATaskReadsOnlyItsOwnJobsData(t *testing.T) {
	if sup := confine.Probe(); !sup.Confined(confine.ModeRequire) {
		t.Skipf("this kernel has no Landlock: %v", sup.Err)
	}
	dir := t.TempDir()
	root := filepath.Join(dir, "data")
	ref := filepath.Join(dir, "ref") // the admin's --task-read
	files := map[string]string{
		filepath.Join(root, "alice", "ds", "a1"):        "a1",
		filepath.Join(root, "alice", "ds", "a2"):        "a2",
		filepath.Join(root, "bob", "ds", "b2", "r.txt"): "bob",
		filepath.Join(root, "shared", "x"):              "x",   // alice's link l1 leads here
		filepath.Join(root, "shared", "y"):              "y",   // next to it: nobody's entry
		filepath.Join(root, "lib", "d", "z"):            "z",   // alice's link l2 leads to lib/d
		filepath.Join(ref, "genome"):                    "ref", // shared reference data
	}
	for p, s := range files {
		os.MkdirAll(filepath.Dir(p), 0o755)
		os.WriteFile(p, []byte(s), 0o644)
	}
	ds := filepath.Join(root, "alice", "ds")
	os.Symlink(filepath.Join(root, "shared", "x"), filepath.Join(ds, "l1"))
	os.Symlink(filepath.Join(root, "lib", "d"), filepath.Join(ds, "l2"))
	const probe = `
try() { what=$1; shift; if "$@" >/dev/null 2>&1; then echo "$what ok"; else echo "$what denied"; fi; }
try own-input cat "$1"
try own-input-dir ls "$1"
try sibling-entry cat "$DS/a2"
try other-job cat "$ROOT/bob/ds/b2/r.txt"
try other-job-dir ls "$ROOT/bob/ds"
try root ls "$ROOT"
try link-file-target cat "$ROOT/shared/x"
try link-file-next cat "$ROOT/shared/y"
try link-dir-target cat "$ROOT/lib/d/z"
try task-read cat "$REF/genome"
`
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	// One job's tasks share its runner: each its own rules.
	newRunner := func(jail *confine.Launcher) *worker.ExecRunner {
		r := worker.DefaultExecRunner()
		r.Roots, r.Read, r.TempRoot, r.Jail = []string{root}, []string{ref}, dir, jail
		t.Cleanup(func() { r.Close() })
		return r
	}
	run := func(r *worker.ExecRunner, id int64, entry string) map[string]string {
		in := filepath.Join(ds, entry)
		out := filepath.Join(root, "alice", "out")
		task := pilotproto.Task{ID: id, Attempt: 1, JobID: 1, Input: in, OutputDir: out, Output: filepath.Join(out, entry),
			Command: []string{"sh", "-c", probe, "sh", "{input}"},
			Env:     []string{"DS=" + ds, "ROOT=" + root, "REF=" + ref}}
		o := r.Run(context.Background(), task)
		if o.Status != pilotproto.StatusDone {
			t.Fatalf("probe: %s %d %q", o.Status, o.ExitCode, o.ErrorTail)
		}
		b, _ := os.ReadFile(logOf(task, "out"))
		got := map[string]string{}
		for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
			k, v, _ := strings.Cut(line, " ")
			got[k] = v
		}
		return got
	}
	confined := newRunner(&confine.Launcher{Exe: exe, Mode: confine.ModeRequire})
	for i, c := range []struct {
		entry string
		want  map[string]string
	}{
		{"a1", map[string]string{"own-input": "ok", "sibling-entry": "ok", "other-job": "denied", "other-job-dir": "denied",
			"root": "denied", "link-file-target": "denied", "link-dir-target": "denied", "task-read": "ok"}},
		{"l1", map[string]string{"own-input": "ok", "sibling-entry": "ok", "other-job": "denied", "link-file-target": "ok",
			"link-file-next": "denied", "link-dir-target": "denied", "task-read": "ok"}},
		{"l2", map[string]string{"own-input-dir": "ok", "link-dir-target": "ok", "link-file-target": "denied",
			"other-job": "denied", "task-read": "ok"}},
	} {
		got := run(confined, int64(i+1), c.entry)
		for k, v := range c.want {
			if got[k] != v {
				t.Errorf("task of entry %s: %s %s, want %s", c.entry, k, got[k], v)
			}
		}
	}
	// A batched run of a1 and l1 (its entries' targets added together):
	// it reads both, and still not bob's.
	var batch []pilotproto.Task
	for i, entry := range []string{"a1", "l1"} {
		out := filepath.Join(root, "alice", "out")
		batch = append(batch, pilotproto.Task{ID: int64(11 + i), Attempt: 1, JobID: 1, Input: filepath.Join(ds, entry), OutputDir: out,
			Output: filepath.Join(out, entry), Command: []string{"sh", "-c", `cat "$@" && ! cat "$ROOT/bob/ds/b2/r.txt"`, "sh", "{inputs}"},
			Env: []string{"ROOT=" + root}})
	}
	if o := confined.RunBatch(context.Background(), batch); o.Status != pilotproto.StatusDone {
		t.Errorf("batched run: %s %d %q", o.Status, o.ExitCode, o.ErrorTail)
	} else if b, _ := os.ReadFile(logOf(batch[0], "out")); string(b) != "a1x" {
		t.Errorf("batched run printed %q, want a1x", b)
	}
	if open := run(newRunner(nil), 9, "a1"); open["other-job"] != "ok" || open["link-dir-target"] != "ok" {
		t.Errorf("unconfined probe: %v: the probe cannot tell", open)
	}
}

// An unconfined task (--confine off) renames its job's output directory
// and puts a link to elsewhere in its place: the next task of the job on
// this worker got the job's files as cached, the directory opened when
// the first task started, now under another name, and ran with its logs
// there while its output path led through the link. The job's cached
// output directory is checked against its path at each task: one that no
// longer is what the path names is opened afresh, and the link refused.
func TestAnOutputDirectorySwappedForALinkBetweenTasksIsRefused(t *testing.T) {
	dir := t.TempDir()
	elsewhere := filepath.Join(dir, "state")
	os.Mkdir(elsewhere, 0o700)
	r := worker.DefaultExecRunner()
	t.Cleanup(func() { r.Close() })
	first := execTask(dir, 0, "sh", "-c", `mv "$1" "$1.old" && ln -s "$2" "$1"`, "sh", filepath.Join(dir, "out"), elsewhere)
	if o := r.Run(context.Background(), first); o.Status != pilotproto.StatusDone {
		t.Fatalf("first task: %s %q", o.Status, o.ErrorTail)
	}
	second := execTask(dir, 0, "sh", "-c", `echo two; echo pwned > "$1"`, "sh", "{output}")
	second.ID = 4
	o := r.Run(context.Background(), second)
	if o.Status != pilotproto.StatusFailed || !strings.Contains(o.ErrorTail, "output directory") {
		t.Errorf("second task: %s (%q), want a failure naming the output directory", o.Status, o.ErrorTail)
	}
	if entries, _ := os.ReadDir(elsewhere); len(entries) != 0 {
		t.Errorf("the second task ran through the link: %v", entries)
	}
	if _, err := os.Lstat(pilotproto.LogPath(filepath.Join(dir, "out.old"), second.ID, second.Attempt, "out")); err == nil {
		t.Errorf("the second task's log went to the renamed directory")
	}
}
