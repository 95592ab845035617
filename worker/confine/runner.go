package confine

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
)

// RunnerArg is the first argument that makes the binary a job's task
// runner (`harvest __harvest-runner SPEC`).
const RunnerArg = "__harvest-runner"

// A Runner is a small process a worker starts for a job: confined once
// with the job's Policy, it starts each of the job's tasks with fork and
// exec, the tasks inheriting its sandbox, each in a Landlock domain nested
// in the runner's (so a task can signal neither the runner's main thread,
// nor the worker, nor its sibling tasks). The worker opens each task's
// files (stdin, stdout, stderr) and passes them with the request over a
// socket pair; the runner reports the task's pid and its wait status.
// Tasks it started are killed (their process groups) when the worker
// closes the runner or dies.
type Runner struct {
	conn *net.UnixConn
	cmd  *exec.Cmd

	mu      sync.Mutex
	seq     int64
	pending map[int64]*Task
	err     error // why the runner ended; nil while it runs
	ended   chan struct{}
	buf     [4096]byte // an event (read by one goroutine at a time)
}

// A Task is a task a Runner started.
type Task struct {
	r       *Runner
	seq     int64
	started chan struct{}
	done    chan struct{}
	pid     int
	status  syscall.WaitStatus
	err     error // the task could not start, or the runner ended
	code    int   // with err: the exit code a shell would give
}

// request goes worker -> runner, event runner -> worker, one per packet.
type request struct {
	Op   string   `json:"op"` // "start" (with 3 descriptors: stdin, stdout, stderr) or "signal"
	Seq  int64    `json:"seq"`
	Path string   `json:"path,omitempty"`
	Argv []string `json:"argv,omitempty"`
	Env  []string `json:"env,omitempty"`
	Sig  int      `json:"sig,omitempty"`
}

type event struct {
	Seq    int64  `json:"seq"`
	Ready  bool   `json:"ready,omitempty"`
	Pid    int    `json:"pid,omitempty"`
	Done   bool   `json:"done,omitempty"`
	Status int    `json:"status,omitempty"` // wait status
	Code   int    `json:"code,omitempty"`   // could not start: the shell's code
	Err    string `json:"err,omitempty"`
}

// RunnerFile names, in a Policy for StartRunner, the i-th of its files.
func RunnerFile(i int) string { return fmt.Sprintf("/proc/self/fd/%d", 4+i) }

// maxPacket bounds a request (a task's command line and environment).
const maxPacket = 1 << 20

// StartRunner starts l's binary as a runner confined by p under l.Mode;
// it inherits files (p names them with RunnerFile). It returns once the
// runner is confined, or why it could not be.
func StartRunner(l *Launcher, p Policy, files []*os.File) (*Runner, error) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("confine: runner socket: %w", err)
	}
	mine, theirs := os.NewFile(uintptr(fds[0]), "runner"), os.NewFile(uintptr(fds[1]), "runner")
	defer theirs.Close()
	p.Mode = l.Mode
	spec, err := json.Marshal(p)
	if err != nil {
		mine.Close()
		return nil, err
	}
	cmd := exec.Command(l.Exe, RunnerArg, string(spec))
	cmd.ExtraFiles = append([]*os.File{theirs}, files...)
	cmd.Env = []string{} // nothing of the worker's (its token)
	cmd.Stderr = os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		mine.Close()
		return nil, fmt.Errorf("confine: start the task runner: %w", err)
	}
	c, err := net.FileConn(mine)
	mine.Close()
	if err != nil {
		cmd.Process.Kill()
		cmd.Wait()
		return nil, err
	}
	r := &Runner{conn: c.(*net.UnixConn), cmd: cmd, pending: map[int64]*Task{}, ended: make(chan struct{})}
	var ev event
	if err := r.receive(&ev); err != nil || !ev.Ready {
		c.Close()
		cmd.Wait()
		if ev.Err != "" {
			return nil, errors.New(ev.Err)
		}
		return nil, fmt.Errorf("confine: the task runner did not start: %v", err)
	}
	go r.read()
	return r, nil
}

func (r *Runner) receive(ev *event) error {
	buf := r.buf[:]
	n, _, _, _, err := r.conn.ReadMsgUnix(buf, nil)
	if err != nil {
		return err
	}
	if n == 0 {
		return io.EOF
	}
	return json.Unmarshal(buf[:n], ev)
}

// read dispatches the runner's events until it ends.
func (r *Runner) read() {
	var err error
	for {
		var ev event
		if err = r.receive(&ev); err != nil {
			break
		}
		r.mu.Lock()
		t := r.pending[ev.Seq]
		switch {
		case t == nil:
		case ev.Done:
			delete(r.pending, ev.Seq)
			t.status = syscall.WaitStatus(ev.Status)
			if ev.Err != "" {
				t.err, t.code = errors.New(ev.Err), ev.Code
			}
			select {
			case <-t.started:
			default:
				close(t.started)
			}
			close(t.done)
		default:
			t.pid = ev.Pid
			close(t.started)
		}
		r.mu.Unlock()
	}
	r.conn.Close()
	werr := r.cmd.Wait()
	r.mu.Lock()
	r.err = fmt.Errorf("the job's task runner ended (%v, %v)", err, werr)
	for seq, t := range r.pending {
		delete(r.pending, seq)
		t.err, t.code = r.err, -1
		select {
		case <-t.started:
		default:
			close(t.started)
		}
		close(t.done)
	}
	r.mu.Unlock()
	close(r.ended)
}

// Ended reports whether the runner is gone (its tasks with it).
func (r *Runner) Ended() bool {
	select {
	case <-r.ended:
		return true
	default:
		return false
	}
}

// Start starts path with argv and env and the files as its descriptors
// 0, 1, 2, and waits until it runs. The error says why it could not,
// with the exit code a shell would give (StartError).
func (r *Runner) Start(path string, argv, env []string, stdin, stdout, stderr *os.File) (*Task, error) {
	r.mu.Lock()
	if r.err != nil {
		r.mu.Unlock()
		return nil, &StartError{Code: -1, Err: r.err}
	}
	r.seq++
	t := &Task{r: r, seq: r.seq, started: make(chan struct{}), done: make(chan struct{})}
	r.pending[t.seq] = t
	r.mu.Unlock()
	b, err := json.Marshal(request{Op: "start", Seq: t.seq, Path: path, Argv: argv, Env: env})
	if err == nil && len(b) > maxPacket {
		err = fmt.Errorf("command line and environment of %d bytes, over %d", len(b), maxPacket)
	}
	if err == nil {
		rights := unix.UnixRights(int(stdin.Fd()), int(stdout.Fd()), int(stderr.Fd()))
		_, _, err = r.conn.WriteMsgUnix(b, rights, nil)
	}
	if err != nil {
		r.mu.Lock()
		delete(r.pending, t.seq)
		r.mu.Unlock()
		return nil, &StartError{Code: -1, Err: err}
	}
	<-t.started
	select {
	case <-t.done:
		if t.err != nil {
			return nil, &StartError{Code: t.code, Err: t.err}
		}
	default:
	}
	return t, nil
}

// StartError is a task that could not start; Code as a shell's.
type StartError struct {
	Code int
	Err  error
}

func (e *StartError) Error() string { return e.Err.Error() }
func (e *StartError) Unwrap() error { return e.Err }

// Done is closed when the task has ended.
func (t *Task) Done() <-chan struct{} { return t.done }

// Wait returns the task's wait status once it ended, or why it is
// unknown (the runner ended).
func (t *Task) Wait() (syscall.WaitStatus, error) {
	<-t.done
	return t.status, t.err
}

// Signal sends sig to the task's process group (the runner does, which
// knows whether the task was reaped: never a reused pid). After a signal,
// the runner kills what is left of the group when the task ends.
func (t *Task) Signal(sig syscall.Signal) {
	b, _ := json.Marshal(request{Op: "signal", Seq: t.seq, Sig: int(sig)})
	t.r.conn.WriteMsgUnix(b, nil, nil)
}

// Close ends the runner: the tasks it still runs are killed.
func (r *Runner) Close() {
	r.conn.CloseWrite()
	<-r.ended
}

// serveRunner is the runner's side: confine, say ready, serve requests
// until the worker closes the socket (descriptor 3), then kill the tasks
// still running and return.
func serveRunner(spec string) (int, error) {
	sock := os.NewFile(3, "worker")
	c, err := net.FileConn(sock)
	sock.Close()
	if err != nil {
		return ExitCannotRun, fmt.Errorf("confine: runner socket: %w", err)
	}
	conn := c.(*net.UnixConn)
	send := func(ev event) {
		b, _ := json.Marshal(ev)
		conn.WriteMsgUnix(b, nil, nil)
	}
	fail := func(err error) (int, error) {
		send(event{Err: err.Error()})
		return ExitCannotRun, err
	}
	var p Policy
	if err := json.Unmarshal([]byte(spec), &p); err != nil {
		return fail(fmt.Errorf("confine: bad policy: %w", err))
	}
	if p.Dir != "" {
		if err := os.Chdir(p.Dir); err != nil {
			return fail(fmt.Errorf("confine: working directory: %w", err))
		}
	}
	if p.Mode != ModeOff {
		if err := restrict(p); err != nil {
			return fail(fmt.Errorf("confine the tasks: %w", err))
		}
	}
	scope, err := scopeRuleset()
	if err != nil {
		return fail(err)
	}
	// The descriptors the rules were made from are not the tasks'.
	for fd := 3; fd < 1024; fd++ {
		unix.CloseOnExec(fd)
	}
	// The tasks' stop signals, by request: sent from the thread that
	// started the task (where the kernel has no Landlock TSYNC, each
	// thread of the runner has a domain of its own, and only that
	// thread's is an ancestor of the task's).
	var mu sync.Mutex
	running := map[int64]chan syscall.Signal{}
	// The batch system's stop signal (scancel's SIGTERM, ...) reaches every
	// process of the pilot, this runner too. The runner must outlive it:
	// the worker decides whether its tasks were interrupted (no attempt
	// charged), and a runner dead first would report them failed. Caught,
	// not ignored: a caught signal is reset to its default at exec, so the
	// tasks still stop on it. The worker ends the runner by closing the
	// socket, or its death by Pdeathsig.
	stops := make(chan os.Signal, 8)
	signal.Notify(stops, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP, syscall.SIGUSR1, syscall.SIGUSR2, syscall.SIGXCPU)
	go func() {
		for range stops {
		}
	}()
	send(event{Ready: true})
	buf, oob := make([]byte, maxPacket), make([]byte, unix.CmsgSpace(3*4))
	for {
		n, oobn, _, _, err := conn.ReadMsgUnix(buf, oob)
		if err != nil || n == 0 {
			break
		}
		var req request
		jerr := json.Unmarshal(buf[:n], &req)
		files := receivedFiles(oob[:oobn])
		switch {
		case jerr != nil:
			closeAll(files)
		case req.Op == "signal":
			mu.Lock()
			if sigs, ok := running[req.Seq]; ok {
				select {
				case sigs <- syscall.Signal(req.Sig):
				default:
				}
			}
			mu.Unlock()
		case req.Op == "start" && len(files) == 3:
			sigs := make(chan syscall.Signal, 4)
			mu.Lock()
			running[req.Seq] = sigs
			mu.Unlock()
			var pid int
			err := scope.Start(func() error {
				var err error
				pid, err = syscall.ForkExec(req.Path, req.Argv, &syscall.ProcAttr{Env: req.Env,
					Files: []uintptr{files[0].Fd(), files[1].Fd(), files[2].Fd()},
					Sys:   &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}})
				if err == nil {
					send(event{Seq: req.Seq, Pid: pid})
				}
				return err
			}, func() {
				ws := watch(pid, sigs)
				mu.Lock()
				delete(running, req.Seq)
				mu.Unlock()
				send(event{Seq: req.Seq, Done: true, Status: int(ws)})
			})
			closeAll(files)
			if err != nil {
				mu.Lock()
				delete(running, req.Seq)
				mu.Unlock()
				code := ExitCannotRun
				if errors.Is(err, syscall.ENOENT) {
					code = ExitNotFound
				}
				send(event{Seq: req.Seq, Done: true, Code: code, Err: fmt.Sprintf("start %s: %v", req.Path, err)})
			}
		default:
			closeAll(files)
		}
	}
	// The worker is gone or closed the runner: nothing is left to run.
	mu.Lock()
	for _, sigs := range running {
		select {
		case sigs <- syscall.SIGKILL:
		default:
		}
	}
	mu.Unlock()
	return 0, nil
}

// watch runs on the thread that started the task: it sends the task's
// process group the signals asked for until the task exits, then, if any
// was, kills what is left of the group while the task's pid is not yet
// free, and reaps it.
func watch(pid int, sigs <-chan syscall.Signal) syscall.WaitStatus {
	exited := make(chan struct{})
	go func() {
		waitExit(pid)
		close(exited)
	}()
	signalled := false
	for {
		select {
		case sig := <-sigs:
			signalled = true
			syscall.Kill(-pid, sig)
			continue
		case <-exited:
		}
		break
	}
	if signalled {
		syscall.Kill(-pid, syscall.SIGKILL)
	}
	var ws syscall.WaitStatus
	for {
		if _, err := syscall.Wait4(pid, &ws, 0, nil); err != syscall.EINTR {
			return ws
		}
	}
}

// waitExit blocks until pid has exited, without reaping it.
func waitExit(pid int) {
	var info unix.Siginfo
	for {
		err := unix.Waitid(unix.P_PID, pid, &info, unix.WEXITED|unix.WNOWAIT, nil)
		if err != unix.EINTR {
			return
		}
	}
}

func receivedFiles(oob []byte) []*os.File {
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return nil
	}
	var files []*os.File
	for _, m := range msgs {
		fds, err := unix.ParseUnixRights(&m)
		if err != nil {
			continue
		}
		for _, fd := range fds {
			unix.CloseOnExec(fd)
			files = append(files, os.NewFile(uintptr(fd), "task"))
		}
	}
	return files
}

func closeAll(files []*os.File) {
	for _, f := range files {
		f.Close()
	}
}
