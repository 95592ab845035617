package confine

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// TestMain lets this test binary serve as a task runner.
func TestMain(m *testing.M) {
	Main()
	os.Exit(m.Run())
}

// Where the logs cannot be unnamed files (NamedLogs, or a file system
// without O_TMPFILE), the runner creates them when the task starts: a log
// name turned into a link fails the task's start, saying its files could
// not be made, and nothing is written through the link; a task's logs
// exist even when empty; its temporary directory comes and goes.
func TestARunnerWithNamedLogs(t *testing.T) {
	dir := t.TempDir()
	logs, tmp := filepath.Join(dir, "logs"), filepath.Join(dir, "tmp")
	for _, d := range []string{logs, tmp} {
		if err := os.Mkdir(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	r, err := StartRunner(&Launcher{Exe: exe, Mode: ModeOff}, RunnerPolicy{Policy: Policy{Path: "/usr/bin:/bin"}, Logs: logs, Tmp: tmp, NamedLogs: true}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	sh, err := LookPath("sh", "/usr/bin:/bin")
	if err != nil {
		t.Fatal(err)
	}
	precious := filepath.Join(dir, "precious")
	os.WriteFile(precious, []byte("keep"), 0o600)
	os.Symlink(precious, filepath.Join(logs, "1.out"))
	task, err := r.StartSpec(Spec{Path: sh, Argv: []string{"sh", "-c", "echo pwned"}, Out: "1.out", Err: "1.err", Tmp: "t1"})
	if err != nil {
		t.Fatal(err)
	}
	var se *StartError
	if _, err := task.Wait(); !errors.As(err, &se) || !se.Files {
		t.Fatalf("a task whose log is a link: %v, want a start error about its files", err)
	}
	if b, _ := os.ReadFile(precious); string(b) != "keep" {
		t.Fatalf("written through the link: %q", b)
	}
	task, err = r.StartSpec(Spec{Path: sh, Argv: []string{"sh", "-c", `echo "$0"; mkdir "$T/x"`, "ran"}, Env: []string{"T=" + filepath.Join(tmp, "t2")},
		Out: "2.out", Err: "2.err", Tmp: "t2"})
	if err != nil {
		t.Fatal(err)
	}
	if ws, err := task.Wait(); err != nil || ws.ExitStatus() != 0 {
		t.Fatalf("%v %v", ws, err)
	}
	if b, err := os.ReadFile(filepath.Join(logs, "2.out")); string(b) != "ran\n" {
		t.Fatalf("stdout %q %v", b, err)
	}
	if st, err := os.Lstat(filepath.Join(logs, "2.err")); err != nil || st.Size() != 0 {
		t.Fatalf("an empty named log: %v %v", st, err)
	}
	if _, err := os.Lstat(filepath.Join(tmp, "t1")); !os.IsNotExist(err) {
		t.Fatalf("the failed task's temporary directory is left: %v", err)
	}
	// Not empty: left to the caller (the worker removes it, off the
	// runner's loop).
	if !task.TmpLeft() {
		t.Fatal("a temporary directory the task left files in is not reported")
	}
	if _, err := os.Lstat(filepath.Join(tmp, "t2", "x")); err != nil {
		t.Fatalf("the task's temporary directory: %v", err)
	}
	task, err = r.StartSpec(Spec{Path: sh, Argv: []string{"sh", "-c", "true"}, Out: "3.out", Err: "3.err", Tmp: "t3"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := task.Wait(); err != nil || task.TmpLeft() {
		t.Fatalf("%v, left %v", err, task.TmpLeft())
	}
	if _, err := os.Lstat(filepath.Join(tmp, "t3")); !os.IsNotExist(err) {
		t.Fatalf("the task's empty temporary directory is left: %v", err)
	}
}
