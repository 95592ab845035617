package confine

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestMain lets this test binary serve as a task runner.
func TestMain(m *testing.M) {
	Main()
	if os.Getenv("HARVEST_TEST_MAIN_THREAD") == "1" {
		// Run with GOMAXPROCS=1: a goroutine started and waited for runs
		// on the main thread unless the main goroutine holds it locked.
		onMain := make(chan bool)
		go func() { onMain <- unix.Gettid() == unix.Getpid() }()
		if <-onMain {
			os.Exit(0)
		}
		os.Exit(3)
	}
	os.Exit(m.Run())
}

// Linking the package does not lock the main thread to the main goroutine
// (its init did, in the agent, the queue and harvest sim alike): only the
// processes that confine themselves (Main's runner and launcher) lock it.
func TestLinkingDoesNotLockTheMainThread(t *testing.T) {
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "HARVEST_TEST_MAIN_THREAD=1", "GOMAXPROCS=1")
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	if errors.As(err, &ee) && ee.ExitCode() == 3 {
		t.Fatal("the main goroutine holds the main thread in a process that only links the package")
	}
	if err != nil {
		t.Fatalf("probe: %v: %s", err, out)
	}
}

// Where the logs cannot be unnamed files (NamedLogs, or a file system
// without O_TMPFILE), the runner creates them when the task starts: a log
// name turned into a link fails the task's start, saying its files could
// not be made, and nothing is written through the link; a task's logs
// exist even when empty; its temporary directory comes and goes.
func TestARunnerWithNamedLogs(t *testing.T) {
	dir, logs, tmp, exe := runnerDirs(t)
	r, sh := startShRunner(t, exe, RunnerPolicy{Policy: Policy{Path: "/usr/bin:/bin"}, Logs: logs, Tmp: tmp, NamedLogs: true})
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

// Queued tasks run in the runner's slots, no more at once; one stopped
// while it waits never starts; the runner stops a task at its timeout,
// with SIGKILL after the grace if SIGTERM does not end it; the tasks that
// end are told to the caller in waves, each once.
func TestARunnerKeepsItsSlotsAndTimeouts(t *testing.T) {
	dir, logs, tmp, exe := runnerDirs(t)
	r, err := StartRunner(&Launcher{Exe: exe, Mode: ModeOff}, RunnerPolicy{Policy: Policy{Path: "/usr/bin:/bin"}, Logs: logs, Tmp: tmp, GraceMS: 50}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	sh, err := LookPath("sh", "/usr/bin:/bin")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	told := map[int]int{}
	ended := make(chan struct{}, 16)
	tell := func(ts []*Task) {
		mu.Lock()
		for _, task := range ts {
			told[task.Tag()]++
		}
		mu.Unlock()
		ended <- struct{}{}
	}
	spec := func(i int, script string) Spec {
		n := strconv.Itoa(i)
		return Spec{Path: sh, Argv: []string{"sh", "-c", script, n}, Env: []string{"D=" + dir}, Out: n + ".out", Err: n + ".err", Tmp: "t" + n}
	}
	wait := `touch "$D/started.$0"; while [ ! -e "$D/go" ]; do sleep 0.01; done`
	r.SetSlots(2)
	ts, err := r.Queue([]Spec{spec(0, wait), spec(1, wait), spec(2, wait), spec(3, wait)}, []int{0, 1, 2, 3}, 0, tell)
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		m, _ := filepath.Glob(filepath.Join(dir, "started.*"))
		if len(m) == 2 {
			break
		}
		if len(m) > 2 || time.Now().After(deadline) {
			t.Fatalf("started with 2 slots: %v", m)
		}
		time.Sleep(5 * time.Millisecond)
	}
	// Nothing ended: the last two wait; the fourth, stopped, never runs.
	r.Stop(ts[3])
	if !ts[3].Skipped() {
		t.Fatal("a waiting task stopped was not skipped")
	}
	os.WriteFile(filepath.Join(dir, "go"), nil, 0o600)
	for _, i := range []int{0, 1, 2} {
		if ws, err := ts[i].Wait(); err != nil || ws.ExitStatus() != 0 || ts[i].Skipped() || ts[i].TimedOut() {
			t.Fatalf("task %d: %v %v", i, ws, err)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "started.3")); !os.IsNotExist(err) {
		t.Fatalf("the stopped task ran: %v", err)
	}
	// Timeouts: one that SIGTERM ends, one that ignores it.
	ts, err = r.Queue([]Spec{spec(4, "exec sleep 30"), spec(5, `trap "" TERM; sleep 30; true`)}, []int{4, 5}, 100*time.Millisecond, tell)
	if err != nil {
		t.Fatal(err)
	}
	for i, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGKILL} {
		ws, err := ts[i].Wait()
		if err != nil || !ws.Signaled() || ws.Signal() != sig || !ts[i].TimedOut() {
			t.Fatalf("task %d past its timeout: %v %v, timed out %v", 4+i, ws, err, ts[i].TimedOut())
		}
	}
	for {
		mu.Lock()
		n := len(told)
		mu.Unlock()
		if n == 6 {
			break
		}
		<-ended
	}
	for i, n := range told {
		if n != 1 {
			t.Errorf("task %d told %d times", i, n)
		}
	}
}

// The ends of queued tasks while others of the job wait for a slot are
// held back (RunnerPolicy.HoldMS) and told together, so that the worker
// wakes once for several; a group's last tasks and the answer to a
// request go at once. With a hold longer than the test, eight tasks on
// one slot come back in two waves: the seven that ended before the last
// one started, then the last; a Stop is answered at once, hold or not.
func TestARunnerHoldsTheEndsOfQueuedTasks(t *testing.T) {
	dir, logs, tmp, exe := runnerDirs(t)
	r, err := StartRunner(&Launcher{Exe: exe, Mode: ModeOff}, RunnerPolicy{Policy: Policy{Path: "/usr/bin:/bin"}, Logs: logs, Tmp: tmp, GraceMS: 50, HoldMS: 3_600_000}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	tr, err := LookPath("true", "/usr/bin:/bin")
	if err != nil {
		t.Fatal(err)
	}
	sh, err := LookPath("sh", "/usr/bin:/bin")
	if err != nil {
		t.Fatal(err)
	}
	waves := make(chan []int, 16)
	tell := func(ts []*Task) {
		var tags []int
		for _, task := range ts {
			tags = append(tags, task.Tag())
		}
		waves <- tags
	}
	r.SetSlots(1)
	var specs []Spec
	var tags []int
	for i := range 8 {
		n := strconv.Itoa(i)
		specs = append(specs, Spec{Path: tr, Argv: []string{"true"}, Out: n + ".out", Err: n + ".err", Tmp: "t" + n})
		tags = append(tags, i)
	}
	if _, err := r.Queue(specs, tags, 0, tell); err != nil {
		t.Fatal(err)
	}
	deadline := time.After(time.Minute)
	var got [][]int
	for n := 0; n < 8; {
		select {
		case w := <-waves:
			got = append(got, w)
			n += len(w)
		case <-deadline:
			t.Fatalf("waves so far %v: the rest never came", got)
		}
	}
	if len(got) != 2 || len(got[0]) != 7 || len(got[1]) != 1 || got[1][0] != 7 {
		t.Fatalf("waves %v, want the first seven tasks, then the last", got)
	}
	// One running, one waiting: the running one ends while the other
	// waits (held), and the Stop of the waiting one is a request: both
	// are told at once.
	gate := filepath.Join(dir, "go")
	ts, err := r.Queue([]Spec{
		{Path: sh, Argv: []string{"sh", "-c", `while [ ! -e "$0" ]; do sleep 0.01; done`, gate}, Out: "a.out", Err: "a.err", Tmp: "ta"},
		{Path: tr, Argv: []string{"true"}, Out: "b.out", Err: "b.err", Tmp: "tb"},
	}, []int{8, 9}, 0, tell)
	if err != nil {
		t.Fatal(err)
	}
	r.Stop(ts[1])
	if !ts[1].Skipped() {
		t.Fatal("a waiting task stopped was not skipped")
	}
	os.WriteFile(gate, nil, 0o600)
	done := make(chan error, 1)
	go func() { _, err := ts[0].Wait(); done <- err }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-deadline:
		t.Fatal("the group's last task was held back")
	}
}

// runnerDirs makes a test's directory with the runner's logs and tmp
// directories in it, and finds the test binary (the runner's).
func runnerDirs(t *testing.T) (dir, logs, tmp, exe string) {
	t.Helper()
	dir = t.TempDir()
	logs, tmp = filepath.Join(dir, "logs"), filepath.Join(dir, "tmp")
	for _, d := range []string{logs, tmp} {
		if err := os.Mkdir(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	return dir, logs, tmp, exe
}

// A task gets its arguments and environment exactly, in order, empty
// ones too, whether it has more of them than the task before it or fewer
// (the runner packs them in one buffer it keeps, and lays out the arrays
// in C memory it grows); one holding a NUL byte is refused.
func TestARunnerPassesArgumentsAndEnvironmentExactly(t *testing.T) {
	_, logs, tmp, exe := runnerDirs(t)
	r, sh := startShRunner(t, exe, RunnerPolicy{Policy: Policy{Path: "/usr/bin:/bin"}, Logs: logs, Tmp: tmp})
	// The arguments on stdout, a line each; the variables given on stderr
	// (sh adds PWD and others).
	script := `printf '%s\n' "$0" "$@"; env | grep -E '^(V[0-9]+|PATH)=' | LC_ALL=C sort >&2`
	for i, n := range []int{3, 400, 1, 50} {
		argv, wantOut := []string{"sh", "-c", script, "zero"}, "zero\n"
		env, wantErr := []string{"PATH=/usr/bin:/bin"}, "PATH=/usr/bin:/bin\n"
		for j := range n {
			a := strconv.Itoa(i) + " " + strconv.Itoa(j)
			if j == 1 {
				a = ""
			}
			argv, wantOut = append(argv, a), wantOut+a+"\n"
			v := "V" + strconv.Itoa(10000+j) + "=" + strconv.Itoa(i)
			env, wantErr = append(env, v), wantErr+v+"\n"
		}
		name := strconv.Itoa(i)
		task, err := r.StartSpec(Spec{Path: sh, Argv: argv, Env: env, Out: name + ".out", Err: name + ".err", Tmp: "t" + name})
		if err != nil {
			t.Fatal(err)
		}
		if ws, err := task.Wait(); err != nil || ws.ExitStatus() != 0 {
			t.Fatalf("task %d: %v %v", i, ws, err)
		}
		out, _ := os.ReadFile(filepath.Join(logs, name+".out"))
		errLog, _ := os.ReadFile(filepath.Join(logs, name+".err"))
		if string(out) != wantOut || string(errLog) != wantErr {
			t.Fatalf("task %d with %d arguments and variables: got\n%.300s\n%.300s\nwant\n%.300s\n%.300s", i, n, out, errLog, wantOut, wantErr)
		}
	}
	task, err := r.StartSpec(Spec{Path: sh, Argv: []string{"sh", "-c", "true", "a\x00b"}, Out: "n.out", Err: "n.err", Tmp: "tn"})
	if err == nil {
		_, err = task.Wait()
	}
	if err == nil {
		t.Fatal("an argument with a NUL byte was passed")
	}
}

// startShRunner starts an unconfined runner with rp (closed when the test
// ends) and finds sh.
func startShRunner(t *testing.T, exe string, rp RunnerPolicy) (*Runner, string) {
	t.Helper()
	r, err := StartRunner(&Launcher{Exe: exe, Mode: ModeOff}, rp, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	sh, err := LookPath("sh", "/usr/bin:/bin")
	if err != nil {
		t.Fatal(err)
	}
	return r, sh
}

// A runner that dies before it is ready (the batch system's SIGTERM
// reaching it in its Go runtime's start: here a binary that exits at
// once) is an error from StartRunner, not a wait for good: the worker
// held the runner's end of the socket, so the wait never saw it close.
func TestARunnerDeadBeforeItIsReadyIsAnError(t *testing.T) {
	done := make(chan error, 1)
	go func() {
		r, err := StartRunner(&Launcher{Exe: "/bin/true", Mode: ModeOff}, RunnerPolicy{}, nil)
		if r != nil {
			r.Close()
		}
		done <- err
	}()
	select {
	case err := <-done:
		if err == nil {
			t.Fatal("a runner that never was ready started")
		}
	case <-time.After(time.Minute): // a deadline, not a wait for timing
		t.Fatal("StartRunner still waits for a runner that is gone")
	}
}

// Queued tasks started back to back, all at once, each get their own
// arguments and environment, and one that cannot exec fails its start:
// the runner packs each task's strings in one buffer it reuses, which the
// task's process reads until its exec, so it must not start the next task
// before then, nor read whether the start failed.
func TestQueuedTasksStartedBackToBackGetTheirOwnStrings(t *testing.T) {
	_, logs, tmp, exe := runnerDirs(t)
	r, sh := startShRunner(t, exe, RunnerPolicy{Policy: Policy{Path: "/usr/bin:/bin"}, Logs: logs, Tmp: tmp})
	const n = 60
	var specs []Spec
	var tags []int
	want := map[int]string{}
	for i := range n {
		name := strconv.Itoa(i)
		// Long and short command lines in turn: a task that read the
		// next one's strings would print another's.
		pad := strings.Repeat(strconv.Itoa(i%10), 1+(i%2)*4000)
		sp := Spec{Path: sh, Argv: []string{"sh", "-c", `printf '%s %s' "$1" "$V"`, "sh", name + pad}, Env: []string{"V=" + name},
			Out: name + ".out", Err: name + ".err", Tmp: "t" + name}
		if i%7 == 3 {
			sp.Path = filepath.Join(tmp, "missing")
		} else {
			want[i] = name + pad + " " + name
		}
		specs, tags = append(specs, sp), append(tags, i)
	}
	ts, err := r.Queue(specs, tags, 0, func([]*Task) {})
	if err != nil {
		t.Fatal(err)
	}
	for i, task := range ts {
		ws, err := task.Wait()
		if i%7 == 3 {
			var se *StartError
			if !errors.As(err, &se) || se.Code != ExitNotFound || !strings.Contains(err.Error(), "no such file") {
				t.Errorf("task %d, a missing program: %v %v, want its start to fail (not found)", i, ws, err)
			}
			continue
		}
		out, _ := os.ReadFile(filepath.Join(logs, strconv.Itoa(i)+".out"))
		if err != nil || ws.ExitStatus() != 0 || string(out) != want[i] {
			t.Errorf("task %d: %v %v, printed %.40q, want %.40q", i, ws, err, out, want[i])
		}
	}
}

// A queued task waiting for a slot keeps its own command line while the
// runner reads the worker's next packets into the same buffer (its
// requests' strings are a copy of their packet's, not copied one by one).
func TestAWaitingTaskKeepsItsCommandLine(t *testing.T) {
	dir, logs, tmp, exe := runnerDirs(t)
	r, sh := startShRunner(t, exe, RunnerPolicy{Policy: Policy{Path: "/usr/bin:/bin"}, Logs: logs, Tmp: tmp})
	spec := func(name, arg string) Spec {
		return Spec{Path: sh, Argv: []string{"sh", "-c", `while [ ! -e "$D/go" ]; do sleep 0.01; done; printf %s "$1"`, "sh", arg},
			Env: []string{"D=" + dir}, Out: name + ".out", Err: name + ".err", Tmp: "t" + name}
	}
	r.SetSlots(1)
	first, err := r.Queue([]Spec{spec("a", "a"), spec("b", strings.Repeat("b", 300))}, []int{0, 1}, 0, func([]*Task) {})
	if err != nil {
		t.Fatal(err)
	}
	// More packets while b waits: over b's bytes in the runner's buffer.
	more, err := r.Queue([]Spec{spec("c", strings.Repeat("c", 3000))}, []int{2}, 0, func([]*Task) {})
	if err != nil {
		t.Fatal(err)
	}
	r.SetSlots(2)
	os.WriteFile(filepath.Join(dir, "go"), nil, 0o600)
	for i, task := range append(first, more...) {
		name, want := string(rune('a'+i)), []string{"a", strings.Repeat("b", 300), strings.Repeat("c", 3000)}[i]
		ws, err := task.Wait()
		out, _ := os.ReadFile(filepath.Join(logs, name+".out"))
		if err != nil || ws.ExitStatus() != 0 || string(out) != want {
			t.Errorf("task %s: %v %v, printed %.20q (%d bytes), want %.20q (%d)", name, ws, err, out, len(out), want, len(want))
		}
	}
}

// BenchmarkRunnerQueueTrue runs /bin/true as queued tasks of a confined
// runner (as the worker's groups do: 100 a packet, its slots 1 or 4) and
// reports the runner's own CPU per task (runner-us/task: all its threads,
// /proc/PID/task/*/schedstat; its tasks not included): what the runner
// adds to each fork and exec; and its threads' context switches per task
// (runner-cs/task: a figure load does not move much, as it does the CPU).
func BenchmarkRunnerQueueTrue(b *testing.B) {
	tr, err := LookPath("true", "/usr/bin:/bin")
	if err != nil {
		b.Fatal(err)
	}
	// rules: as a pilot's runner with --task-roots (the benchmark's
	// --exec): the system's paths, a root, and each task's own rules.
	for _, c := range []struct {
		mode  Mode
		slots int
		rules bool
	}{{ModeAuto, 1, false}, {ModeAuto, 4, false}, {ModeOff, 1, false}, {ModeAuto, 1, true}} {
		slots := c.slots
		name := string(c.mode) + "-slots-" + strconv.Itoa(slots)
		if c.rules {
			name = string(c.mode) + "-rules-slots-" + strconv.Itoa(slots)
		}
		b.Run(name, func(b *testing.B) {
			dir := b.TempDir()
			logs, tmp := filepath.Join(dir, "logs"), filepath.Join(dir, "tmp")
			os.Mkdir(logs, 0o700)
			os.Mkdir(tmp, 0o700)
			exe, err := os.Executable()
			if err != nil {
				b.Fatal(err)
			}
			rp := RunnerPolicy{Policy: Policy{Path: "/usr/bin:/bin", Read: []string{"/usr", "/lib", "/etc"}, Write: []string{dir}}, Logs: logs, Tmp: tmp}
			if c.rules {
				root, ds := filepath.Join(dir, "root"), filepath.Join(dir, "root", "ds")
				os.MkdirAll(ds, 0o755)
				rp.Policy.Read = append(append([]string(nil), SystemRead...), root)
				rp.Tasks = &Policy{Read: append(append([]string(nil), SystemRead...), ds), Write: rp.Policy.Write}
			}
			r, err := StartRunner(&Launcher{Exe: exe, Mode: c.mode}, rp, nil)
			if err != nil {
				b.Fatal(err)
			}
			defer r.Close()
			r.SetSlots(slots)
			env := []string{"PATH=/usr/bin:/bin", "HOME=" + dir, "TMPDIR=" + tmp, "HARVEST_TASK_ID=1", "HARVEST_JOB_ID=1", "HARVEST_ATTEMPT=1"}
			cpu0, cs0 := threadsCPU(b, r.cmd.Process.Pid)
			tasks0 := childrenCPU(b, r.cmd.Process.Pid)
			b.ResetTimer()
			for i := 0; i < b.N; i += 100 {
				var specs []Spec
				var tags []int
				for j := i; j < min(i+100, b.N); j++ {
					n := strconv.Itoa(j)
					specs, tags = append(specs, Spec{Path: tr, Argv: []string{"true"}, Env: env, Out: n + ".1.out", Err: n + ".1.err", Tmp: "task-" + n}), append(tags, j)
				}
				ts, err := r.Queue(specs, tags, 0, func([]*Task) {})
				if err != nil {
					b.Fatal(err)
				}
				for _, task := range ts {
					if ws, err := task.Wait(); err != nil || ws.ExitStatus() != 0 {
						b.Fatal(ws, err)
					}
				}
			}
			b.StopTimer()
			cpu, cs := threadsCPU(b, r.cmd.Process.Pid)
			b.ReportMetric(float64(cpu-cpu0)/1e3/float64(b.N), "runner-us/task")
			b.ReportMetric(float64(cs-cs0)/float64(b.N), "runner-cs/task")
			b.ReportMetric(float64(childrenCPU(b, r.cmd.Process.Pid)-tasks0)/1e3/float64(b.N), "tasks-us/task")
		})
	}
}

// childrenCPU is the CPU time of process pid's reaped children, in ns
// (/proc/PID/stat: clock ticks).
func childrenCPU(b *testing.B, pid int) int64 {
	s, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		b.Fatal(err)
	}
	// After the command's closing parenthesis: state is field 3, cutime
	// and cstime fields 16 and 17.
	f := strings.Fields(string(s[strings.LastIndexByte(string(s), ')')+1:]))
	u, _ := strconv.ParseInt(f[13], 10, 64)
	k, _ := strconv.ParseInt(f[14], 10, 64)
	return (u + k) * 1e9 / 100
}

// threadsCPU is the CPU time of process pid's threads, in ns, and their
// context switches.
func threadsCPU(b *testing.B, pid int) (ns, switches int64) {
	ds, err := os.ReadDir("/proc/" + strconv.Itoa(pid) + "/task")
	if err != nil {
		b.Fatal(err)
	}
	for _, d := range ds {
		s, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/task/" + d.Name() + "/schedstat")
		if err != nil {
			continue
		}
		// on-CPU ns, waiting ns, time slices (one per switch to the thread)
		if f := strings.Fields(string(s)); len(f) == 3 {
			n, _ := strconv.ParseInt(f[0], 10, 64)
			k, _ := strconv.ParseInt(f[2], 10, 64)
			ns, switches = ns+n, switches+k
		}
	}
	return ns, switches
}

// A runner whose tasks have rules of their own holds no descriptor of
// their paths once it made their common ruleset (every task's process
// would copy them at its clone and close them at its exec); a task that
// needs a ruleset of its own (a linked entry: Read) gets it, the paths
// opened again, and reads what it adds, and only that.
func TestARunnersTasksInheritNoDescriptorOfTheirRules(t *testing.T) {
	sup := Probe()
	if sup.ABI == 0 {
		t.Skipf("no Landlock: %v", sup.Err)
	}
	dir, logs, tmp, exe := runnerDirs(t)
	data, other := filepath.Join(dir, "data"), filepath.Join(dir, "other")
	for _, d := range []string{data, other} {
		os.Mkdir(d, 0o755)
		os.WriteFile(filepath.Join(d, "f"), []byte("x"), 0o644)
	}
	read := append(append([]string(nil), SystemRead...), dir)
	rp := RunnerPolicy{Policy: Policy{Path: "/usr/bin:/bin", Read: read, Write: []string{tmp, logs}}, Logs: logs, Tmp: tmp,
		Tasks: &Policy{Read: append(append([]string(nil), SystemRead...), data), Write: []string{tmp, logs}}}
	r, err := StartRunner(&Launcher{Exe: exe, Mode: ModeAuto}, rp, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	sh, err := LookPath("sh", "/usr/bin:/bin")
	if err != nil {
		t.Fatal(err)
	}
	run := func(name string, extra ...string) int {
		task, err := r.StartSpec(Spec{Path: sh, Argv: []string{"sh", "-c", `cat "$1/f" && ! cat "$2/f"`, "sh", data, other},
			Out: name + ".out", Err: name + ".err", Tmp: name, Read: extra})
		if err != nil {
			t.Fatal(err)
		}
		ws, err := task.Wait()
		if err != nil {
			t.Fatal(err)
		}
		return ws.ExitStatus()
	}
	rulesOpen := func() (n int) {
		fds, _ := os.ReadDir("/proc/" + strconv.Itoa(r.cmd.Process.Pid) + "/fd")
		for _, fd := range fds {
			if l, _ := os.Readlink("/proc/" + strconv.Itoa(r.cmd.Process.Pid) + "/fd/" + fd.Name()); l == "/usr" || l == "/etc" || l == data {
				n++
			}
		}
		return n
	}
	if code := run("a"); code != 0 {
		t.Fatalf("a task reading its data, not the other: exit %d", code)
	}
	if n := rulesOpen(); n != 0 {
		t.Errorf("the runner holds %d descriptors of its tasks' rules", n)
	}
	if code := run("b", filepath.Join(other, "f")); code == 0 {
		t.Errorf("a task given %s/f read it not", other)
	}
	if code := run("c"); code != 0 {
		t.Fatalf("a task after a linked one: exit %d", code)
	}
}

// A task's stdin is /dev/null, for reading only: the runner's own stdin
// (StartRunner's), which the task's process inherits in place, not a
// /dev/null of the runner's dup'd to it at each task.
func TestATasksStdinIsTheRunnersDevNull(t *testing.T) {
	_, logs, tmp, exe := runnerDirs(t)
	// Not the descriptors this test process may have inherited (a
	// shell's /dev/null, say): the runner would inherit them too.
	unix.CloseRange(3, ^uint(0), unix.CLOSE_RANGE_CLOEXEC)
	r, sh := startShRunner(t, exe, RunnerPolicy{Policy: Policy{Path: "/usr/bin:/bin"}, Logs: logs, Tmp: tmp})
	task, err := r.StartSpec(Spec{Path: sh, Argv: []string{"sh", "-c", `readlink /proc/self/fd/0; cat; echo "read $?"; { echo x >&0; } 2>/dev/null || echo "no write"`},
		Out: "o", Err: "e", Tmp: "t"})
	if err != nil {
		t.Fatal(err)
	}
	if ws, err := task.Wait(); err != nil || ws.ExitStatus() != 0 {
		t.Fatalf("task: %v %v", ws, err)
	}
	if out, _ := os.ReadFile(filepath.Join(logs, "o")); string(out) != "/dev/null\nread 0\nno write\n" {
		t.Errorf("the task's stdin: %q", out)
	}
	pid := strconv.Itoa(r.cmd.Process.Pid)
	fds, _ := os.ReadDir("/proc/" + pid + "/fd")
	var readers []string
	for _, fd := range fds {
		l, _ := os.Readlink("/proc/" + pid + "/fd/" + fd.Name())
		info, _ := os.ReadFile("/proc/" + pid + "/fdinfo/" + fd.Name())
		var flags int64
		for _, line := range strings.Split(string(info), "\n") {
			if v, ok := strings.CutPrefix(line, "flags:\t"); ok {
				flags, _ = strconv.ParseInt(v, 8, 64)
			}
		}
		if l == os.DevNull && flags&unix.O_ACCMODE == unix.O_RDONLY {
			readers = append(readers, fd.Name())
		}
	}
	if len(readers) != 1 || readers[0] != "0" {
		t.Errorf("the runner reads /dev/null from descriptors %v, want 0 alone", readers)
	}
}

// Quiet tasks (empty logs) that end together leave no log, and the logs
// a former run of the same task and attempt left under their names go
// before their end is told: found by one read of the log directory for
// all of them, or, once it holds many entries, by an unlink per name. A
// task that wrote keeps its log; other files stay.
func TestQuietTasksRemoveTheirFormerRunsLogs(t *testing.T) {
	for _, big := range []bool{false, true} {
		_, logs, tmp, exe := runnerDirs(t)
		r, err := StartRunner(&Launcher{Exe: exe, Mode: ModeOff}, RunnerPolicy{Policy: Policy{Path: "/usr/bin:/bin"}, Logs: logs, Tmp: tmp, HoldMS: 3_600_000}, nil)
		if err != nil {
			t.Fatal(err)
		}
		sh, err := LookPath("sh", "/usr/bin:/bin")
		if err != nil {
			t.Fatal(err)
		}
		others := 3
		if big {
			others = maxLogsRead + 10
		}
		for i := range others {
			os.WriteFile(filepath.Join(logs, "other."+strconv.Itoa(i)), nil, 0o644)
		}
		var specs []Spec
		var tags []int
		for i := range 8 {
			n := strconv.Itoa(i)
			script := "true"
			if i == 5 {
				script = "echo five"
			}
			if i%2 == 0 {
				for _, s := range []string{".out", ".err"} {
					os.WriteFile(filepath.Join(logs, n+s), []byte("a former run's\n"), 0o644)
				}
			}
			specs = append(specs, Spec{Path: sh, Argv: []string{"sh", "-c", script}, Out: n + ".out", Err: n + ".err", Tmp: "t" + n})
			tags = append(tags, i)
		}
		r.SetSlots(1)
		ended := make(chan int, 8)
		if _, err := r.Queue(specs, tags, 0, func(ts []*Task) {
			for _, task := range ts {
				ended <- task.Tag()
			}
		}); err != nil {
			t.Fatal(err)
		}
		for range 8 {
			<-ended
		}
		r.Close()
		ents, _ := os.ReadDir(logs)
		var got []string
		for _, e := range ents {
			if !strings.HasPrefix(e.Name(), "other.") {
				got = append(got, e.Name())
			}
		}
		if len(got) != 1 || got[0] != "5.out" || len(ents) != others+1 {
			t.Errorf("big %v: logs %v and %d others, want 5.out and %d", big, got, len(ents)-len(got), others)
		}
		if b, _ := os.ReadFile(filepath.Join(logs, "5.out")); string(b) != "five\n" {
			t.Errorf("big %v: 5.out holds %q", big, b)
		}
	}
}
