package worker_test

import (
	"context"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
	"testing"
	"time"

	"github.com/harvest-hpc/harvest/pilotproto"
	"github.com/harvest-hpc/harvest/worker"
	"github.com/harvest-hpc/harvest/worker/confine"
)

func TestSubstitute(t *testing.T) {
	task := pilotproto.Task{ID: 7, JobID: 42, Name: "sub-01", Input: "/data/sub-01", Output: "/out/sub-01"}
	cases := []struct {
		name string
		argv []string
		want []string
	}{
		{"every placeholder is replaced", []string{"prog", "{input}", "-o", "{output}", "--job={job}", "{task}.log"},
			[]string{"prog", "/data/sub-01", "-o", "/out/sub-01", "--job=42", "7.log"}},
		{"arguments without placeholders are kept verbatim", []string{"a b", "$HOME", "*"}, []string{"a b", "$HOME", "*"}},
		{"a placeholder inside a value is not expanded twice", []string{"{input}"}, []string{"{output}"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tk := task
			if tc.name == "a placeholder inside a value is not expanded twice" {
				tk.Input = "{output}"
			}
			if got := worker.Substitute(tc.argv, tk); !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("got %q want %q", got, tc.want)
			}
		})
	}
}

func execTask(dir string, timeout int64, argv ...string) pilotproto.Task {
	os.MkdirAll(filepath.Join(dir, "in"), 0o755)
	os.WriteFile(filepath.Join(dir, "in", "noint"), []byte("#!/nonexistent/interpreter\n"), 0o755)
	return pilotproto.Task{ID: 3, Attempt: 2, JobID: 9, Name: "e1", Input: filepath.Join(dir, "in"),
		Output: filepath.Join(dir, "out", "e1"), OutputDir: filepath.Join(dir, "out"), Command: argv, TimeoutS: timeout}
}

func TestExecRunner(t *testing.T) {
	cases := []struct {
		name       string
		argv       []string
		timeout    int64
		wantStatus string
		wantCode   int
		check      func(t *testing.T, dir string, o worker.Outcome)
	}{
		{
			name: "a successful command writes its output and logs under the job's output directory",
			argv: []string{"sh", "-c", `echo out; echo err >&2; pwd > "$1"`, "sh", "{output}"}, wantStatus: pilotproto.StatusDone,
			check: func(t *testing.T, dir string, o worker.Outcome) {
				b, _ := os.ReadFile(filepath.Join(dir, "out", ".harvest", "logs", "3.2.out"))
				if string(b) != "out\n" {
					t.Errorf("stdout log: %q", b)
				}
				b, _ = os.ReadFile(filepath.Join(dir, "out", ".harvest", "logs", "3.2.err"))
				if string(b) != "err\n" {
					t.Errorf("stderr log: %q", b)
				}
				b, _ = os.ReadFile(filepath.Join(dir, "out", "e1"))
				if strings.TrimSpace(string(b)) != filepath.Join(dir, "out") {
					t.Errorf("working directory: %q", b)
				}
				if o.ErrorTail != "" {
					t.Errorf("a successful task carries an error tail: %q", o.ErrorTail)
				}
			},
		},
		{
			name:       "a failing command reports its exit code and the last 2 KB of stderr",
			argv:       []string{"sh", "-c", `i=0; while [ $i -lt 500 ]; do echo "line $i" >&2; i=$((i+1)); done; exit 3`},
			wantStatus: pilotproto.StatusFailed, wantCode: 3,
			check: func(t *testing.T, dir string, o worker.Outcome) {
				if len(o.ErrorTail) != 2048 || !strings.HasSuffix(o.ErrorTail, "line 499\n") {
					t.Errorf("error tail of %d bytes ending %q", len(o.ErrorTail), o.ErrorTail[max(0, len(o.ErrorTail)-20):])
				}
			},
		},
		{
			name: "a missing program fails with 127 and says why", argv: []string{"/nonexistent/prog"},
			wantStatus: pilotproto.StatusFailed, wantCode: 127,
			check: func(t *testing.T, dir string, o worker.Outcome) {
				if !strings.Contains(o.ErrorTail, "/nonexistent/prog") {
					t.Errorf("error tail %q does not name the program", o.ErrorTail)
				}
			},
		},
		{
			// The program is found, but its exec fails (the script's
			// interpreter is missing): the error comes from the exec
			// itself, confined from the job's runner.
			name: "a program whose exec fails with ENOENT fails with 127 and says why",
			argv: []string{"{input}/noint"}, wantStatus: pilotproto.StatusFailed, wantCode: 127,
			check: func(t *testing.T, dir string, o worker.Outcome) {
				if !strings.Contains(o.ErrorTail, "noint") || !strings.Contains(o.ErrorTail, "no such file") {
					t.Errorf("error tail %q does not say why", o.ErrorTail)
				}
			},
		},
		{
			name: "a command past its timeout is killed and reported as a timeout",
			argv: []string{"sleep", "30"}, timeout: 1, wantStatus: pilotproto.StatusTimeout, wantCode: -1,
			check: func(t *testing.T, dir string, o worker.Outcome) {
				if o.Duration > 5*time.Second {
					t.Errorf("timeout took %s", o.Duration)
				}
			},
		},
	}
	for _, mode := range []confine.Mode{confine.ModeOff, confine.ModeRequire} {
		if sup := confine.Probe(); mode != confine.ModeOff && !sup.Confined(mode) {
			t.Logf("confined cases skipped: this kernel has no Landlock: %v", sup.Err)
			continue
		}
		for _, tc := range cases {
			t.Run(string(mode)+"/"+tc.name, func(t *testing.T) {
				dir := t.TempDir()
				r := worker.DefaultExecRunner()
				r.KillGrace = 200 * time.Millisecond
				if mode != confine.ModeOff {
					// Started by the job's runner (vfork, the task's own
					// Landlock domain): the same outcomes.
					exe, err := os.Executable()
					if err != nil {
						t.Fatal(err)
					}
					r.Roots, r.TempRoot, r.Jail = []string{dir}, dir, &confine.Launcher{Exe: exe, Mode: mode}
					defer r.Close()
				}
				o := r.Run(context.Background(), execTask(dir, tc.timeout, tc.argv...))
				if o.Status != tc.wantStatus || o.ExitCode != tc.wantCode {
					t.Fatalf("status %q code %d, want %q %d (tail %q)", o.Status, o.ExitCode, tc.wantStatus, tc.wantCode, o.ErrorTail)
				}
				tc.check(t, dir, o)
			})
		}
	}
}

func TestCancelKillsTheWholeProcessGroup(t *testing.T) {
	dir := t.TempDir()
	pidFile := filepath.Join(dir, "child.pid")
	r := worker.DefaultExecRunner()
	r.KillGrace = 200 * time.Millisecond
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan worker.Outcome)
	// The shell ignores SIGTERM, so only the group SIGKILL stops it.
	go func() {
		done <- r.Run(ctx, execTask(dir, 0, "sh", "-c", `trap "" TERM; sleep 30 & echo $! > `+pidFile+`; wait`))
	}()
	var pid int
	for i := 0; i < 100 && pid == 0; i++ {
		time.Sleep(20 * time.Millisecond)
		b, _ := os.ReadFile(pidFile)
		pid, _ = strconv.Atoi(strings.TrimSpace(string(b)))
	}
	if pid == 0 {
		t.Fatal("the task never started its child")
	}
	start := time.Now()
	cancel()
	<-done
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("stopping took %s", d)
	}
	// The group's SIGKILL was sent before Run returned; the child is gone
	// as soon as the kernel delivers it: its pidfd becomes readable when it
	// exits (it is not our child, so we cannot wait for it).
	fd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		return // already gone and reaped
	}
	defer unix.Close(fd)
	fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
	if n, err := unix.Poll(fds, 2000); (err != nil || n == 0) && !zombie(pid) {
		syscall.Kill(pid, syscall.SIGKILL)
		t.Fatalf("the task's child %d survived the kill (poll: %d, %v)", pid, n, err)
	}
}

// zombie reports whether pid is dead but not yet reaped (its parent died
// and the container's init may be slow to reap).
func zombie(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return true
	}
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
	return len(f) > 0 && f[0] == "Z"
}

// TestATaskGetsACleanEnvironment is issue 13 item 1: the task's
// environment was the pilot's (os.Environ), so `env` in a task printed the
// pilot token. A task gets only what is documented: PATH, HOME and TMPDIR
// (its own temporary directory), LANG, the HARVEST_* task variables and
// the job's own environment.
func TestATaskGetsACleanEnvironment(t *testing.T) {
	t.Setenv("HARVEST_PILOT_TOKEN", "secret-pilot-token")
	t.Setenv("HARVEST_QUEUE", "http://head:8080")
	t.Setenv("SLURM_JOB_ID", "42")
	dir := t.TempDir()
	os.MkdirAll(filepath.Join(dir, "out"), 0o755)
	task := execTask(dir, 0, "sh", "-c", `env > "$1"; [ -d "$TMPDIR" ] && [ -w "$TMPDIR" ] && [ "$HOME" = "$TMPDIR" ]`, "sh", "{output}")
	task.Env = []string{"HARVEST_JOB=9", "HARVEST_TASK=3", "OMP_NUM_THREADS=4"}
	r := worker.DefaultExecRunner()
	o := r.Run(context.Background(), task)
	if o.Status != pilotproto.StatusDone {
		t.Fatalf("status %s (%s): the task has no writable TMPDIR = HOME", o.Status, o.ErrorTail)
	}
	b, err := os.ReadFile(task.Output)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		k, v, _ := strings.Cut(line, "=")
		got[k] = v
	}
	if strings.Contains(string(b), "secret-pilot-token") {
		t.Fatalf("the pilot token reached the task:\n%s", b)
	}
	tmp := got["TMPDIR"]
	want := []string{"PATH", "HOME", "TMPDIR", "LANG", "HARVEST_TASK_ID", "HARVEST_JOB_ID", "HARVEST_ATTEMPT",
		"HARVEST_JOB", "HARVEST_TASK", "OMP_NUM_THREADS", "PWD"} // PWD: set by sh itself
	for _, k := range want {
		if _, ok := got[k]; !ok {
			t.Errorf("%s missing from the task's environment", k)
		}
		delete(got, k)
	}
	delete(got, "SHLVL") // set by some shells
	if len(got) > 0 {
		t.Errorf("undocumented variables in the task's environment: %v", got)
	}
	if _, err := os.Stat(tmp); err == nil {
		t.Errorf("the task's temporary directory %s outlived the task", tmp)
	}
}

// A pilot tells its tasks where they run, its site (HARVEST_SITE) and its
// id (HARVEST_PILOT_ID), and only when it knows: never from its own
// environment.
func TestATaskSeesItsSiteAndPilot(t *testing.T) {
	for _, v := range []struct {
		name string
		set  func(r *worker.ExecRunner, value string)
	}{
		{"HARVEST_SITE", func(r *worker.ExecRunner, s string) { r.Site = s }},
		{"HARVEST_PILOT_ID", func(r *worker.ExecRunner, s string) { r.Pilot = s }},
	} {
		t.Setenv(v.name, "from-the-pilot-environment")
		dir := t.TempDir()
		os.MkdirAll(filepath.Join(dir, "out"), 0o755)
		for _, value := range []string{"4711", ""} {
			task := execTask(dir, 0, "sh", "-c", `printf '%s' "${`+v.name+`-unset}" > "$1"`, "sh", "{output}")
			r := worker.DefaultExecRunner()
			v.set(r, value)
			if o := r.Run(context.Background(), task); o.Status != pilotproto.StatusDone {
				t.Fatalf("status %s (%s)", o.Status, o.ErrorTail)
			}
			b, _ := os.ReadFile(task.Output)
			want := value
			if value == "" {
				want = "unset"
			}
			if string(b) != want {
				t.Fatalf("with %q set in the runner the task saw %s=%q, want %q", value, v.name, b, want)
			}
		}
	}
}
