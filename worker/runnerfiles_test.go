package worker_test

import (
	"context"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/harvest-hpc/harvest/pilotproto"
	"github.com/harvest-hpc/harvest/worker"
	"github.com/harvest-hpc/harvest/worker/confine"
)

// confinedRunner is an ExecRunner whose tasks its job's runner starts,
// making their logs and temporary directories (confine.Runner.StartSpec).
func confinedRunner(t *testing.T, dir string) *worker.ExecRunner {
	t.Helper()
	if sup := confine.Probe(); !sup.Confined(confine.ModeRequire) {
		t.Skipf("this kernel has no Landlock: %v", sup.Err)
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	r := worker.DefaultExecRunner()
	r.Roots, r.TempRoot, r.Jail = []string{dir}, dir, &confine.Launcher{Exe: exe, Mode: confine.ModeRequire}
	t.Cleanup(func() { r.Close() })
	return r
}

func logOf(task pilotproto.Task, stream string) string {
	return pilotproto.LogPath(task.OutputDir, task.ID, task.Attempt, stream)
}

// A confined task's log gets a file only if the task wrote to it: a
// task that printed nothing leaves no file behind, one that wrote only
// to stdout only its .out, and a failed task's error tail is its stderr
// whichever way. A former run's log of the same name does not outlive
// an empty one.
func TestAConfinedTasksEmptyLogsMakeNoFiles(t *testing.T) {
	dir := t.TempDir()
	r := confinedRunner(t, dir)
	quiet := execTask(dir, 0, "true")
	logs := filepath.Join(quiet.OutputDir, ".harvest", "logs")
	os.MkdirAll(logs, 0o755)
	os.WriteFile(logOf(quiet, "err"), []byte("a former run's\n"), 0o644)
	if o := r.Run(context.Background(), quiet); o.Status != pilotproto.StatusDone {
		t.Fatalf("%s %q", o.Status, o.ErrorTail)
	}
	if entries, _ := os.ReadDir(logs); len(entries) != 0 {
		t.Fatalf("a task that wrote nothing left logs: %v", entries)
	}
	loud := quiet
	loud.ID, loud.Command = 4, []string{"sh", "-c", "echo hello"}
	if o := r.Run(context.Background(), loud); o.Status != pilotproto.StatusDone {
		t.Fatalf("%s %q", o.Status, o.ErrorTail)
	}
	if b, err := os.ReadFile(logOf(loud, "out")); string(b) != "hello\n" {
		t.Fatalf("stdout log %q, %v", b, err)
	}
	if _, err := os.Lstat(logOf(loud, "err")); !os.IsNotExist(err) {
		t.Fatalf("an empty stderr made a file: %v", err)
	}
	failed := quiet
	failed.ID, failed.Command = 5, []string{"sh", "-c", "echo why >&2; exit 3"}
	if o := r.Run(context.Background(), failed); o.Status != pilotproto.StatusFailed || o.ExitCode != 3 || o.ErrorTail != "why\n" {
		t.Fatalf("%s %d %q", o.Status, o.ExitCode, o.ErrorTail)
	}
	silent := quiet
	silent.ID, silent.Command = 6, []string{"false"}
	if o := r.Run(context.Background(), silent); o.Status != pilotproto.StatusFailed || o.ExitCode != 1 || o.ErrorTail != "" {
		t.Fatalf("%s %d %q", o.Status, o.ExitCode, o.ErrorTail)
	}
}

// A log name a user turned into a link: the runner replaces the link by
// the task's log, never writing through it, even to a file the runner
// may write (one in the job's output directory: Landlock alone would let
// it through).
func TestAConfinedTasksLogReplacedByALinkIsNotFollowed(t *testing.T) {
	dir := t.TempDir()
	task := execTask(dir, 0, "sh", "-c", "echo mine; echo mine >&2")
	logs := filepath.Join(task.OutputDir, ".harvest", "logs")
	os.MkdirAll(logs, 0o755)
	precious := filepath.Join(task.OutputDir, "result")
	os.WriteFile(precious, []byte("checkpoint"), 0o600)
	for _, s := range []string{"out", "err"} {
		os.Symlink(precious, logOf(task, s))
	}
	if o := confinedRunner(t, dir).Run(context.Background(), task); o.Status != pilotproto.StatusDone {
		t.Fatalf("%s %q", o.Status, o.ErrorTail)
	}
	if b, _ := os.ReadFile(precious); string(b) != "checkpoint" {
		t.Fatalf("the runner wrote through the link: %q", b)
	}
	for _, s := range []string{"out", "err"} {
		st, err := os.Lstat(logOf(task, s))
		if b, _ := os.ReadFile(logOf(task, s)); err != nil || !st.Mode().IsRegular() || string(b) != "mine\n" {
			t.Fatalf("%s log: %v %v %q", s, st, err, b)
		}
	}
}

// A job's output directory removed (or replaced) after its runner was
// started: the next task's logs go to the directory as it is now, made
// afresh, not into the removed one, and the task runs.
func TestAConfinedJobsOutputDirectoryRemovedBetweenTasks(t *testing.T) {
	dir := t.TempDir()
	r := confinedRunner(t, dir)
	first := execTask(dir, 0, "sh", "-c", "echo one")
	if o := r.Run(context.Background(), first); o.Status != pilotproto.StatusDone {
		t.Fatalf("first task: %s %q", o.Status, o.ErrorTail)
	}
	if err := os.RemoveAll(first.OutputDir); err != nil {
		t.Fatal(err)
	}
	second := first
	second.ID, second.Command = 4, []string{"sh", "-c", "echo two"}
	if o := r.Run(context.Background(), second); o.Status != pilotproto.StatusDone {
		t.Fatalf("second task: %s %q", o.Status, o.ErrorTail)
	}
	if b, err := os.ReadFile(logOf(second, "out")); string(b) != "two\n" {
		t.Fatalf("second task's stdout log: %q, %v", b, err)
	}
}

// A confined task's temporary directory is its own (HOME and TMPDIR,
// 0700), made by its runner, and gone when it ends whether it left files
// there or not.
func TestAConfinedTasksTemporaryDirectoryComesAndGoes(t *testing.T) {
	dir := t.TempDir()
	r := confinedRunner(t, dir)
	task := execTask(dir, 0, "sh", "-c", `[ "$HOME" = "$TMPDIR" ] && stat -c %a "$TMPDIR" && pwd -P > /dev/null && echo "$TMPDIR" && mkdir "$TMPDIR/d" && echo x > "$TMPDIR/d/f"`)
	o := r.Run(context.Background(), task)
	if o.Status != pilotproto.StatusDone {
		t.Fatalf("%s %q", o.Status, o.ErrorTail)
	}
	b, _ := os.ReadFile(logOf(task, "out"))
	mode, tmp, _ := strings.Cut(strings.TrimSpace(string(b)), "\n")
	if mode != "700" || !strings.HasPrefix(tmp, dir+"/") {
		t.Fatalf("the task's temporary directory: %q", b)
	}
	if _, err := os.Lstat(tmp); !os.IsNotExist(err) {
		t.Fatalf("the task's temporary directory %s outlived it: %v", tmp, err)
	}
	empty := task
	empty.ID, empty.Command = 4, []string{"sh", "-c", `echo "$TMPDIR"`}
	if o := r.Run(context.Background(), empty); o.Status != pilotproto.StatusDone {
		t.Fatalf("%s %q", o.Status, o.ErrorTail)
	}
	b, _ = os.ReadFile(logOf(empty, "out"))
	if tmp := strings.TrimSpace(string(b)); tmp == "" {
		t.Fatal("no TMPDIR")
	} else if _, err := os.Lstat(tmp); !os.IsNotExist(err) {
		t.Fatalf("the task's empty temporary directory %s outlived it: %v", tmp, err)
	}
}

// A confined task starts with no signal blocked, ignored or caught,
// whatever the runner does with them (it catches the batch system's stop
// signals to outlive them, and its vfork child does not reset handlers:
// its exec does); only a signal this process was started with ignored
// (nohup's SIGHUP, as CI runs the suite) stays ignored, as it does for a
// pilot's tasks.
func TestAConfinedTaskStartsWithDefaultSignals(t *testing.T) {
	self, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	inherited := sigMask(t, string(self), "SigIgn")
	dir := t.TempDir()
	task := execTask(dir, 0, "cat", "/proc/self/status")
	if o := confinedRunner(t, dir).Run(context.Background(), task); o.Status != pilotproto.StatusDone {
		t.Fatalf("%s %q", o.Status, o.ErrorTail)
	}
	b, err := os.ReadFile(logOf(task, "out"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), "SigCgt:") {
		t.Fatalf("no signal lines in %q", b)
	}
	for _, k := range []string{"SigBlk", "SigIgn", "SigCgt"} {
		allowed := uint64(0)
		if k == "SigIgn" {
			allowed = inherited
		}
		if m := sigMask(t, string(b), k); m&^allowed != 0 {
			t.Errorf("the task started with %s: %016x (this test process was started with %016x ignored)", k, m, inherited)
		}
	}
}

// sigMask is the hexadecimal signal mask named k in a /proc/PID/status.
func sigMask(t *testing.T, status, k string) uint64 {
	t.Helper()
	for _, line := range strings.Split(status, "\n") {
		if name, v, ok := strings.Cut(line, ":"); ok && name == k {
			m, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
			if err != nil {
				t.Fatalf("%s: %v", line, err)
			}
			return m
		}
	}
	t.Fatalf("no %s in %q", k, status)
	return 0
}

// Many tasks of one job started at once from many goroutines (their
// requests share packets, their ends come back in waves): each gets its
// own outcome and its own logs.
func TestConfinedTasksStartedTogetherKeepTheirOwnOutcomes(t *testing.T) {
	dir := t.TempDir()
	r := confinedRunner(t, dir)
	base := execTask(dir, 0)
	var wg sync.WaitGroup
	outcomes := make([]worker.Outcome, 40)
	for i := range outcomes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			task := base
			task.ID = int64(100 + i)
			task.Command = []string{"sh", "-c", `echo "$HARVEST_TASK_ID"; exit $(($HARVEST_TASK_ID % 7))`}
			outcomes[i] = r.Run(context.Background(), task)
		}()
	}
	wg.Wait()
	for i, o := range outcomes {
		id := 100 + i
		if o.ExitCode != id%7 {
			t.Errorf("task %d: exit %d (%s %q), want %d", id, o.ExitCode, o.Status, o.ErrorTail, id%7)
		}
		task := base
		task.ID = int64(id)
		if b, _ := os.ReadFile(logOf(task, "out")); strings.TrimSpace(string(b)) != strconv.Itoa(id) {
			t.Errorf("task %d's log: %q", id, b)
		}
	}
}

// A task that leaves a process behind (its group outlives it) keeps its
// logs: what that process writes later lands in the task's own log,
// never in a later task's, even when the task itself wrote nothing.
func TestAConfinedTasksStragglerWritesToItsOwnLog(t *testing.T) {
	dir := t.TempDir()
	r := confinedRunner(t, dir)
	first := execTask(dir, 0, "sh", "-c", `mkfifo "$1/go" || exit 1; (read x < "$1/go"; echo late; touch "$1/done") & exit 0`, "sh", filepath.Join(dir, "out"))
	if o := r.Run(context.Background(), first); o.Status != pilotproto.StatusDone {
		t.Fatalf("%s %q", o.Status, o.ErrorTail)
	}
	second := first
	second.ID, second.Command = 4, []string{"true"}
	if o := r.Run(context.Background(), second); o.Status != pilotproto.StatusDone {
		t.Fatalf("%s %q", o.Status, o.ErrorTail)
	}
	if err := os.WriteFile(filepath.Join(dir, "out", "go"), []byte("x\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for i := 0; ; i++ {
		if _, err := os.Stat(filepath.Join(dir, "out", "done")); err == nil {
			break
		}
		if i > 3000 {
			b, _ := os.ReadFile(logOf(first, "err"))
			t.Fatalf("the straggler did not finish (stderr %q)", b)
		}
		time.Sleep(10 * time.Millisecond) // polling a file the straggler writes, with a bound
	}
	if b, err := os.ReadFile(logOf(first, "out")); string(b) != "late\n" {
		t.Fatalf("the first task's stdout log: %q, %v", b, err)
	}
	if _, err := os.Lstat(logOf(second, "out")); !os.IsNotExist(err) {
		b, _ := os.ReadFile(logOf(second, "out"))
		t.Fatalf("the second task got a log: %q", b)
	}
}

// A stop signal the pilot was started with ignored (nohup) stays ignored
// in its confined tasks, as it did when each task reset its handlers.
func TestAConfinedTaskKeepsASignalThePilotIgnores(t *testing.T) {
	signal.Ignore(syscall.SIGHUP)
	defer signal.Reset(syscall.SIGHUP)
	dir := t.TempDir()
	task := execTask(dir, 0, "cat", "/proc/self/status")
	if o := confinedRunner(t, dir).Run(context.Background(), task); o.Status != pilotproto.StatusDone {
		t.Fatalf("%s %q", o.Status, o.ErrorTail)
	}
	b, err := os.ReadFile(logOf(task, "out"))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if k, v, _ := strings.Cut(line, ":"); k == "SigIgn" && strings.TrimSpace(v) != "0000000000000001" {
			t.Fatalf("the task's ignored signals: %s, want SIGHUP alone", strings.TrimSpace(v))
		}
	}
}

// The tasks of a group, handed to their job's runner together, each run
// their own command line and environment (the specs of a group are built
// together, its program looked up once while it stays the same): here
// the program is each task's entry, two scripts in turn, and each prints
// its arguments and variables.
func TestAGroupsTasksRunTheirOwnCommandsAndEnvironments(t *testing.T) {
	dir := t.TempDir()
	r := confinedRunner(t, dir)
	r.Site, r.Pilot = "site-x", "77"
	ds, out := filepath.Join(dir, "ds"), filepath.Join(dir, "out")
	os.Mkdir(ds, 0o755)
	for _, name := range []string{"a", "b"} {
		script := "#!/bin/sh\necho " + name + ` "$1" "$HOME" "$TMPDIR" "$HARVEST_TASK_ID" "$HARVEST_JOB_ID" "$HARVEST_ATTEMPT" "$HARVEST_SITE" "$HARVEST_PILOT_ID" "$MINE"` + "\n"
		if err := os.WriteFile(filepath.Join(ds, name), []byte(script), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	ts := make([]pilotproto.Task, 12)
	for i := range ts {
		name := []string{"a", "b"}[i%3%2] // a b a a b a ...
		ts[i] = pilotproto.Task{ID: int64(95 + i), Attempt: 1 + i%2, JobID: 4, Input: filepath.Join(ds, name), OutputDir: out,
			Output: filepath.Join(out, strconv.Itoa(i)), Command: []string{"{input}", "{task}-{output}"}, Env: []string{"MINE=" + strconv.Itoa(i*i)}}
	}
	ended := make(chan worker.Outcome, len(ts))
	outcomes := make([]worker.Outcome, len(ts))
	r.StartGroup(ts, 3, func(idx []int, os []worker.Outcome) {
		for k, i := range idx {
			outcomes[i] = os[k]
			ended <- os[k]
		}
	})
	for range ts {
		<-ended
	}
	tmps := map[string]bool{}
	for i, task := range ts {
		if o := outcomes[i]; o.Status != pilotproto.StatusDone {
			t.Fatalf("task %d: %s %d %q", i, o.Status, o.ExitCode, o.ErrorTail)
		}
		b, err := os.ReadFile(logOf(task, "out"))
		if err != nil {
			t.Fatalf("task %d: %v", i, err)
		}
		f := strings.Fields(string(b))
		if len(f) != 10 {
			t.Fatalf("task %d printed %q", i, b)
		}
		want := []string{filepath.Base(task.Input), strconv.FormatInt(task.ID, 10) + "-" + task.Output, f[2], f[2],
			strconv.FormatInt(task.ID, 10), "4", strconv.Itoa(task.Attempt), "site-x", "77", strconv.Itoa(i * i)}
		if !slices.Equal(f, want) {
			t.Errorf("task %d printed %q, want %q", i, f, want)
		}
		if tmps[f[2]] || filepath.Base(f[2]) != "task-"+strconv.FormatInt(task.ID, 10)+"."+strconv.Itoa(task.Attempt) {
			t.Errorf("task %d's temporary directory %s: not its own", i, f[2])
		}
		tmps[f[2]] = true
	}
}
