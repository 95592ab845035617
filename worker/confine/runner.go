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
	"strings"
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
// socket pair; the runner answers once, when the task has ended, with its
// wait status (or why it could not start).
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
	r      *Runner
	seq    int64
	done   chan struct{}
	status syscall.WaitStatus
	err    error // the task could not start (*StartError), or the runner ended
}

// request goes worker -> runner, event runner -> worker, one per packet
// (encoded in wire.go).
type request struct {
	Op   string // "start" (with 3 descriptors: stdin, stdout, stderr) or "signal"
	Seq  int64
	Path string
	Argv []string
	Env  []string
	Sig  int
}

type event struct {
	Seq    int64
	Ready  bool
	Done   bool
	Status int // wait status
	Code   int // could not start: the shell's code
	Err    string
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
	return decodeEvent(buf[:n], ev)
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
		if t := r.pending[ev.Seq]; t != nil && ev.Done {
			delete(r.pending, ev.Seq)
			t.status = syscall.WaitStatus(ev.Status)
			if ev.Err != "" {
				t.err = &StartError{Code: ev.Code, Err: errors.New(ev.Err)}
			}
			close(t.done)
		}
		r.mu.Unlock()
	}
	r.conn.Close()
	werr := r.cmd.Wait()
	r.mu.Lock()
	r.err = fmt.Errorf("the job's task runner ended (%v, %v)", err, werr)
	for seq, t := range r.pending {
		delete(r.pending, seq)
		t.err = r.err
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

// Start asks the runner to start path with argv and env and the files as
// its descriptors 0, 1, 2, and returns without waiting for it: a task
// that could not start ends at once, and Wait says why, with the exit
// code a shell would give (StartError). The requests are served in
// order, so a Signal after Start reaches the task if it runs. Start's
// own error is a request that could not be sent (StartError too).
func (r *Runner) Start(path string, argv, env []string, stdin, stdout, stderr *os.File) (*Task, error) {
	r.mu.Lock()
	if r.err != nil {
		r.mu.Unlock()
		return nil, &StartError{Code: -1, Err: r.err}
	}
	r.seq++
	t := &Task{r: r, seq: r.seq, done: make(chan struct{})}
	r.pending[t.seq] = t
	r.mu.Unlock()
	var err error
	for _, s := range append(append([]string{path}, argv...), env...) {
		if strings.IndexByte(s, 0) >= 0 {
			err = fmt.Errorf("argument or variable %q holds a NUL byte", s)
		}
	}
	b := encodeRequest(request{Op: "start", Seq: t.seq, Path: path, Argv: argv, Env: env})
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
// unknown: it could not start (*StartError), or the runner ended.
func (t *Task) Wait() (syscall.WaitStatus, error) {
	<-t.done
	return t.status, t.err
}

// Signal sends sig to the task's process group (the runner does, which
// knows whether the task was reaped: never a reused pid). After a signal,
// the runner kills what is left of the group when the task ends.
func (t *Task) Signal(sig syscall.Signal) {
	b := encodeRequest(request{Op: "signal", Seq: t.seq, Sig: int(sig)})
	t.r.conn.WriteMsgUnix(b, nil, nil)
}

// Close ends the runner: the tasks it still runs are killed.
func (r *Runner) Close() {
	r.conn.CloseWrite()
	<-r.ended
}

// serveRunner is the runner's side: confine, say ready, serve requests
// until the worker closes the socket (descriptor 3), then kill the tasks
// still running and return. It runs on the main goroutine, locked to the
// main thread (init in ruleset.go), and never leaves it: it starts every
// task from it (spawn), so each task's Landlock domain is nested in that
// thread's and the thread may signal it; it waits for the requests, and
// for the tasks' ends through their pidfds, in one poll(2), and sends the
// signals and reaps the tasks itself, so a pid is never reused under a
// signal. No goroutine, no thread per task.
func serveRunner(spec string) (int, error) {
	const sock = 3
	if err := unix.SetNonblock(sock, false); err != nil {
		return ExitCannotRun, fmt.Errorf("confine: runner socket: %w", err)
	}
	send := func(ev event) {
		b := encodeEvent(ev)
		for {
			if err := unix.Sendmsg(sock, b, nil, nil, 0); err != unix.EINTR {
				return
			}
		}
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
	// The batch system's stop signal (scancel's SIGTERM, ...) reaches every
	// process of the pilot, this runner too. The runner must outlive it:
	// the worker decides whether its tasks were interrupted (no attempt
	// charged), and a runner dead first would report them failed. Caught,
	// not ignored: the tasks start with every handler reset to its
	// default (spawn), so they still stop on it. The worker ends the
	// runner by closing the socket, or its death by Pdeathsig.
	stops := make(chan os.Signal, 8)
	signal.Notify(stops, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP, syscall.SIGUSR1, syscall.SIGUSR2, syscall.SIGXCPU)
	go func() {
		for range stops {
		}
	}()
	send(event{Ready: true})
	type running struct {
		seq       int64
		pid       int
		pidfd     int
		signalled bool // then what is left of its group is killed when it ends
	}
	var tasks []*running
	var polls []unix.PollFd
	buf, oob := make([]byte, maxPacket), make([]byte, unix.CmsgSpace(3*4))
	for {
		polls = append(polls[:0], unix.PollFd{Fd: sock, Events: unix.POLLIN})
		for _, t := range tasks {
			polls = append(polls, unix.PollFd{Fd: int32(t.pidfd), Events: unix.POLLIN})
		}
		if _, err := unix.Poll(polls, -1); err != nil {
			if err == unix.EINTR {
				continue
			}
			return ExitCannotRun, fmt.Errorf("confine: poll: %w", err)
		}
		// The tasks that ended, first: reaped here, after their group's
		// stragglers if they were signalled.
		kept := tasks[:0]
		for i, t := range tasks {
			if polls[i+1].Revents == 0 {
				kept = append(kept, t)
				continue
			}
			if t.signalled {
				syscall.Kill(-t.pid, syscall.SIGKILL)
			}
			var ws syscall.WaitStatus
			for {
				if _, err := syscall.Wait4(t.pid, &ws, 0, nil); err != syscall.EINTR {
					break
				}
			}
			unix.Close(t.pidfd)
			send(event{Seq: t.seq, Done: true, Status: int(ws)})
		}
		clear(tasks[len(kept):])
		tasks = kept
		if polls[0].Revents == 0 {
			continue
		}
		n, oobn, _, _, err := unix.Recvmsg(sock, buf, oob, unix.MSG_CMSG_CLOEXEC)
		if err == unix.EINTR {
			continue
		}
		if err != nil || n == 0 {
			break
		}
		req, jerr := decodeRequest(buf[:n])
		fds := receivedFDs(oob[:oobn])
		switch {
		case jerr != nil:
		case req.Op == "signal":
			for _, t := range tasks {
				if t.seq == req.Seq {
					t.signalled = true
					syscall.Kill(-t.pid, syscall.Signal(req.Sig))
				}
			}
		case req.Op == "start" && len(fds) == 3:
			pid, err := spawn(req.Path, req.Argv, req.Env, [3]int{fds[0], fds[1], fds[2]}, scope.fd)
			pidfd := -1
			if err == nil {
				if pidfd, err = unix.PidfdOpen(pid, 0); err != nil {
					syscall.Kill(-pid, syscall.SIGKILL)
					syscall.Wait4(pid, nil, 0, nil)
					err = fmt.Errorf("pidfd_open: %w", err)
				}
			}
			if err != nil {
				code := ExitCannotRun
				if errors.Is(err, syscall.ENOENT) {
					code = ExitNotFound
				}
				send(event{Seq: req.Seq, Done: true, Code: code, Err: fmt.Sprintf("start %s: %v", req.Path, err)})
				break
			}
			tasks = append(tasks, &running{seq: req.Seq, pid: pid, pidfd: pidfd})
		}
		for _, fd := range fds {
			unix.Close(fd)
		}
	}
	// The worker is gone or closed the runner: nothing is left to run.
	for _, t := range tasks {
		syscall.Kill(-t.pid, syscall.SIGKILL)
	}
	return 0, nil
}

// receivedFDs returns the descriptors passed with a request.
func receivedFDs(oob []byte) []int {
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return nil
	}
	var all []int
	for _, m := range msgs {
		fds, err := unix.ParseUnixRights(&m)
		if err != nil {
			continue
		}
		all = append(all, fds...)
	}
	return all
}
