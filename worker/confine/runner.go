package confine

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// RunnerArg is the first argument that makes the binary a job's task
// runner (`harvest __harvest-runner SPEC`).
const RunnerArg = "__harvest-runner"

// A Runner is a small process a worker starts for a job: confined once
// with the job's Policy, it starts each of the job's tasks with fork and
// exec, the tasks inheriting its sandbox, each in a Landlock domain nested
// in the runner's (so a task can signal neither the runner's main thread,
// nor the worker, nor its sibling tasks). A task's files are the
// runner's to make (StartSpec: its logs, made lazily, and its temporary
// directory), or the worker's, passed with the request (Start). The
// worker's requests go in as few packets as it has turns to write (the
// requests of every goroutine that came while one wrote go in its next
// packet); the runner answers once per turn of its loop, with every task
// that ended then.
// Tasks it started are killed (their process groups) when the worker
// closes the runner or dies.
type Runner struct {
	conn *net.UnixConn
	cmd  *exec.Cmd

	mu      sync.Mutex
	seq     int64
	pending map[int64]*Task
	err     error // why the runner ended; nil while it runs
	slots   int   // the last SetSlots (0: none yet, all run)
	ended   chan struct{}
	// Requests not yet written (under mu), each record's end and the task
	// it starts (0: none); wmu is held by the one goroutine writing them.
	out    []byte
	outRec []outRecord
	wmu    sync.Mutex
	packet []byte      // under wmu
	recs   []outRecord // under wmu
}

type outRecord struct {
	end int
	seq int64
}

// A Task is a task a Runner started.
type Task struct {
	r      *Runner
	seq    int64
	done   chan struct{}
	status syscall.WaitStatus
	err    error // the task could not start (*StartError), or the runner ended
	// TmpLeft: the task left files in its temporary directory, which the
	// runner did not remove (the worker does, off the runner's loop).
	tmpLeft bool
	// Of a queued task (Queue): the runner stopped it at its timeout, or
	// before it started; tag, its caller's; wave, told when it ends.
	timedOut, skipped bool
	ran               time.Duration
	tag               int
	wave              *wave
}

// A wave is whom a Queue's tasks are told to when they end.
type wave struct{ ended func([]*Task) }

// request goes worker -> runner, event runner -> worker, several per
// packet (encoded in wire.go).
type request struct {
	Op        string // "start" (with 3 descriptors: stdin, stdout, stderr), "run" or "signal"
	Seq       int64
	Path      string
	Argv, Env []string
	Out, Err  string   // "run": the names of the task's logs in the runner's log directory
	Tmp       string   // "run": the name of its temporary directory in the runner's
	Read      []string // more paths the task alone may read (RunnerPolicy.Tasks)
	Sig       int
	TimeoutMS int64 // "queue": stopped after this long (0: never)
}

type event struct {
	Seq    int64
	Flags  byte  // ev*
	Status int   // wait status
	Code   int   // could not start: the shell's code
	Micros int64 // a queued task's run time, from its start to its reaping
	Err    string
}

// RunnerFile names, in a Policy for StartRunner, the i-th of its files.
func RunnerFile(i int) string { return fmt.Sprintf("/proc/self/fd/%d", 4+i) }

// maxPacket bounds a request (a task's command line and environment);
// fullPacket is where the worker stops adding requests to a packet.
const (
	maxPacket  = 1 << 20
	fullPacket = 64 << 10
)

// RunnerPolicy is a runner's Policy and where it makes its StartSpec
// tasks' files ("": it makes none): Logs, a directory (a path or a
// RunnerFile) opened before the runner is confined; Tmp, the directory
// of the tasks' temporary directories, which the Policy lets it write.
// NamedLogs: the logs are made when each task starts, as where the log
// directory's file system has no O_TMPFILE (which the runner finds out
// by itself: NFS).
//
// Tasks, if set, are the file rules of each task's own Landlock domain
// (Read and Write; the rest of it unused), nested in the runner's: a
// task may then reach only what both allow, and a task's request may add
// paths that task alone may read (Spec.Read). Without it, a task's domain
// only scopes signals and sockets, and the task reaches what the runner
// may.
type RunnerPolicy struct {
	Policy
	Tasks     *Policy `json:"tasks,omitempty"`
	Logs      string  `json:"logs,omitempty"`
	Tmp       string  `json:"tmp,omitempty"`
	NamedLogs bool    `json:"named_logs,omitempty"`
	// LogMax bounds each log the runner makes (internal/logcap); 0: no limit.
	LogMax int64 `json:"log_max,omitempty"`
	// GraceMS is how long a task stopped by the runner (Stop, its
	// timeout) has after SIGTERM before SIGKILL.
	GraceMS int64 `json:"grace_ms,omitempty"`
	// HoldMS is how long the events of queued tasks that ended may wait
	// for others' while more of the tasks wait for a slot (0: 10 ms; the
	// worker leaves it so): one packet, one wake of the worker, for several.
	HoldMS int64 `json:"hold_ms,omitempty"`
}

// StartRunner starts l's binary as a runner confined by p under l.Mode;
// it inherits files (p names them with RunnerFile). It returns once the
// runner is confined, or why it could not be.
func StartRunner(l *Launcher, p RunnerPolicy, files []*os.File) (*Runner, error) {
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
	// Nothing of the worker's (its token). No asynchronous preemption:
	// the runner replaces the Go runtime's signal handlers (serveRunner).
	cmd.Env = []string{"GODEBUG=asyncpreemptoff=1"}
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
	var ready event
	buf := make([]byte, 64<<10)
	err = r.receive(buf, false, func(ev event) { ready = ev })
	if err != nil || ready.Flags&evReady == 0 {
		c.Close()
		cmd.Wait()
		if ready.Err != "" {
			return nil, errors.New(ready.Err)
		}
		return nil, fmt.Errorf("confine: the task runner did not start: %v", err)
	}
	go r.read(buf)
	return r, nil
}

// receive reads a packet and calls f with each of its events, with mu
// held if lock (once per packet, not per event).
func (r *Runner) receive(buf []byte, lock bool, f func(event)) error {
	n, err := r.recv(buf)
	if err != nil {
		return err
	}
	if n == 0 {
		return io.EOF
	}
	if lock {
		r.mu.Lock()
		defer r.mu.Unlock()
	}
	return decodeEvents(buf[:n], f)
}

// recv reads one packet of the runner's into buf, waiting for it in the
// network poller. The read itself is a raw system call (it does not
// block): one the Go runtime is told of wakes the runtime's monitor
// thread from its sleep when the worker was idle, that is at about every
// packet of the runner's (perf: the worker's most frequent futex wake).
func (r *Runner) recv(buf []byte) (int, error) {
	rc, err := r.conn.SyscallConn()
	if err != nil {
		return 0, err
	}
	var n int
	var rerr error
	err = rc.Read(func(fd uintptr) bool {
		for {
			m, _, e := unix.RawSyscall6(unix.SYS_RECVFROM, fd, uintptr(unsafe.Pointer(&buf[0])), uintptr(len(buf)), unix.MSG_DONTWAIT, 0, 0)
			switch e {
			case unix.EINTR:
				continue
			case unix.EAGAIN:
				return false
			case 0:
				n = int(m)
			default:
				rerr = e
			}
			return true
		}
	})
	if err == nil {
		err = rerr
	}
	return n, err
}

// read dispatches the runner's events until it ends: a packet's queued
// tasks are told to their Queue's callers together, once per packet.
func (r *Runner) read(buf []byte) {
	var err error
	var ended []*Task
	for {
		ended = ended[:0]
		err = r.receive(buf, true, func(ev event) {
			if t := r.pending[ev.Seq]; t != nil && ev.Flags&evDone != 0 {
				delete(r.pending, ev.Seq)
				t.status = syscall.WaitStatus(ev.Status)
				t.tmpLeft = ev.Flags&evTmpLeft != 0
				t.timedOut, t.skipped = ev.Flags&evTimedOut != 0, ev.Flags&evSkipped != 0
				t.ran = time.Duration(ev.Micros) * time.Microsecond
				if ev.Err != "" {
					t.err = &StartError{Code: ev.Code, Err: errors.New(ev.Err), Files: ev.Flags&evFiles != 0}
				}
				close(t.done)
				if t.wave != nil {
					ended = append(ended, t)
				}
			}
		})
		tellWaves(ended)
		if err != nil {
			break
		}
	}
	r.conn.Close()
	werr := r.cmd.Wait()
	r.mu.Lock()
	r.err = fmt.Errorf("the job's task runner ended (%v, %v)", err, werr)
	ended = ended[:0]
	for seq, t := range r.pending {
		delete(r.pending, seq)
		t.err = r.err
		close(t.done)
		if t.wave != nil {
			ended = append(ended, t)
		}
	}
	r.mu.Unlock()
	close(r.ended)
	tellWaves(ended)
}

// tellWaves tells each Queue's caller which of its tasks in ended ended
// (in one call per caller; no lock held).
func tellWaves(ended []*Task) {
	for len(ended) > 0 {
		w := ended[0].wave
		mine := make([]*Task, 0, len(ended))
		rest := ended[:0]
		for _, t := range ended {
			if t.wave == w {
				mine = append(mine, t)
			} else {
				rest = append(rest, t)
			}
		}
		w.ended(mine)
		ended = rest
	}
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

// A Spec is a task whose files its runner makes (StartSpec): it runs
// Path with Argv and Env, its stdin /dev/null, its stdout and stderr the
// logs Out and Err in the runner's log directory (plain names: made as
// files of their own when the task ends, and only if it wrote to them; a
// link in their place is replaced, never followed; a former log of that
// name is removed), in its temporary directory Tmp, made in the runner's
// (mode 0700) and removed when the task ends.
//
// Read are more paths the task may read, resolved (no link on the way,
// or it is left out), when the runner's tasks have rules of their own
// (RunnerPolicy.Tasks): a linked dataset entry's target, say.
type Spec struct {
	Path      string
	Argv, Env []string
	Out, Err  string
	Tmp       string
	Read      []string
}

// StartSpec starts s without waiting for it: a task that could not
// start ends at once, and Wait says why (StartError; Files: its files
// could not be made). The requests are served in order, so a Signal
// after StartSpec reaches the task if it runs. StartSpec's own error is
// a request that cannot be sent (StartError too).
func (r *Runner) StartSpec(s Spec) (*Task, error) {
	for _, name := range []string{s.Out, s.Err, s.Tmp} {
		if !plainName(name) {
			return nil, &StartError{Code: -1, Err: fmt.Errorf("confine: %q is not a plain file name", name)}
		}
	}
	return r.start(request{Op: "run", Path: s.Path, Argv: s.Argv, Env: s.Env, Out: s.Out, Err: s.Err, Tmp: s.Tmp, Read: s.Read}, nil)
}

// Start is StartSpec with the task's descriptors 0, 1 and 2 the worker's
// files (its working directory and files are the worker's to make); of
// s, only Path, Argv, Env and Read are used.
func (r *Runner) Start(s Spec, stdin, stdout, stderr *os.File) (*Task, error) {
	rights := unix.UnixRights(int(stdin.Fd()), int(stdout.Fd()), int(stderr.Fd()))
	return r.start(request{Op: "start", Path: s.Path, Argv: s.Argv, Env: s.Env, Read: s.Read}, rights)
}

// Queue hands the runner specs to run in its slots (SetSlots: how many
// at once; all, until set), in order, each stopped after timeout (0:
// never) with SIGTERM, then SIGKILL after the runner's grace; ended is
// called, from the runner's reader and with no lock held, with the tasks
// that ended, in one call per packet of the runner's: its waves. A spec
// that cannot be sent fails them all (nothing is queued); a task whose
// request could not be written, or whose runner ended, ends with the
// error (Wait), told to ended as well (then from a goroutine of its
// own). The i-th task's Tag is tags[i].
func (r *Runner) Queue(specs []Spec, tags []int, timeout time.Duration, ended func([]*Task)) ([]*Task, error) {
	w := &wave{ended: ended}
	ms := int64(0)
	if timeout > 0 {
		ms = max(timeout.Milliseconds(), 1)
	}
	ts := make([]*Task, len(specs))
	r.mu.Lock()
	if r.err != nil {
		r.mu.Unlock()
		return nil, &StartError{Code: -1, Err: r.err}
	}
	n0, recs0 := len(r.out), len(r.outRec)
	for i, sp := range specs {
		var err error
		for _, name := range []string{sp.Out, sp.Err, sp.Tmp} {
			if !plainName(name) {
				err = fmt.Errorf("confine: %q is not a plain file name", name)
			}
		}
		n := len(r.out)
		if err == nil {
			r.out, err = appendRequest(r.out, request{Op: "queue", Seq: r.seq + 1, TimeoutMS: ms, Path: sp.Path, Argv: sp.Argv, Env: sp.Env,
				Out: sp.Out, Err: sp.Err, Tmp: sp.Tmp, Read: sp.Read})
		}
		if err == nil && len(r.out)-n > maxPacket {
			err = fmt.Errorf("command line and environment of %d bytes, over %d", len(r.out)-n, maxPacket)
		}
		if err != nil {
			for _, t := range ts[:i] {
				delete(r.pending, t.seq)
			}
			r.out, r.outRec = r.out[:n0], r.outRec[:recs0]
			r.mu.Unlock()
			return nil, &StartError{Code: -1, Err: err}
		}
		r.seq++
		t := &Task{r: r, seq: r.seq, done: make(chan struct{}), tag: tags[i], wave: w}
		ts[i] = t
		r.pending[t.seq] = t
		r.outRec = append(r.outRec, outRecord{end: len(r.out), seq: t.seq})
	}
	r.mu.Unlock()
	r.wmu.Lock()
	r.flushLocked()
	r.wmu.Unlock()
	return ts, nil
}

// SetSlots sets how many of its queued tasks the runner runs at once.
// The figure it has already is not sent again (the worker tells it after
// every wave, and it seldom changes).
func (r *Runner) SetSlots(n int) {
	r.mu.Lock()
	if r.slots == n {
		r.mu.Unlock()
		return
	}
	r.slots = n
	r.appendLocked(request{Op: "slots", Sig: n})
	r.mu.Unlock()
	r.wmu.Lock()
	r.flushLocked()
	r.wmu.Unlock()
}

// Stop stops the queued tasks ts (one packet): those not started never
// start (Skipped), the others get SIGTERM and, after the runner's grace,
// SIGKILL (their groups).
func (r *Runner) Stop(ts ...*Task) {
	qs := make([]request, len(ts))
	for i, t := range ts {
		qs[i] = request{Op: "stop", Seq: t.seq}
	}
	r.send(qs...)
}

// appendLocked adds requests that start no task to those to write; mu
// held.
func (r *Runner) appendLocked(qs ...request) {
	for _, q := range qs {
		out, err := appendRequest(r.out, q)
		if err == nil {
			r.out = out
			r.outRec = append(r.outRec, outRecord{end: len(r.out)})
		}
	}
}

// send writes requests that start no task.
func (r *Runner) send(qs ...request) {
	r.mu.Lock()
	r.appendLocked(qs...)
	r.mu.Unlock()
	r.wmu.Lock()
	r.flushLocked()
	r.wmu.Unlock()
}

// Ran is, once a queued task ended, how long it ran (0: it did not).
func (t *Task) Ran() time.Duration { <-t.done; return t.ran }

// Tag is the tag Queue gave the task.
func (t *Task) Tag() int { return t.tag }

// TimedOut reports, once a queued task ended, whether its timeout stopped it.
func (t *Task) TimedOut() bool { <-t.done; return t.timedOut }

// Skipped reports, once a queued task ended, whether it was stopped
// before it started (it never ran).
func (t *Task) Skipped() bool { <-t.done; return t.skipped }

func plainName(s string) bool {
	return s != "" && s != "." && s != ".." && !strings.ContainsAny(s, "/\x00")
}

func (r *Runner) start(q request, rights []byte) (*Task, error) {
	if rights != nil {
		// Its descriptors go with its own packet, after the requests
		// before it.
		r.wmu.Lock()
		defer r.wmu.Unlock()
		r.flushLocked()
	}
	r.mu.Lock()
	if r.err != nil {
		r.mu.Unlock()
		return nil, &StartError{Code: -1, Err: r.err}
	}
	r.seq++
	t := &Task{r: r, seq: r.seq, done: make(chan struct{})}
	q.Seq = t.seq
	n0 := len(r.out)
	var err error
	if r.out, err = appendRequest(r.out, q); err == nil && len(r.out)-n0 > maxPacket {
		err = fmt.Errorf("command line and environment of %d bytes, over %d", len(r.out)-n0, maxPacket)
		r.out = r.out[:n0]
	}
	if err != nil {
		r.mu.Unlock()
		return nil, &StartError{Code: -1, Err: err}
	}
	r.pending[t.seq] = t
	r.outRec = append(r.outRec, outRecord{end: len(r.out), seq: t.seq})
	r.mu.Unlock()
	if rights != nil {
		r.write(rights)
		return t, nil
	}
	r.wmu.Lock()
	r.flushLocked()
	r.wmu.Unlock()
	return t, nil
}

// flushLocked writes the requests not yet written, as few packets as
// fit; wmu held. Requests added meanwhile by other goroutines go too: a
// goroutine that finds the requests it added written has nothing to do.
func (r *Runner) flushLocked() {
	for r.write(nil) {
	}
}

// write writes one packet of the requests not yet written, with rights
// if not nil (then every request not yet written, which the caller made
// sure is its own); it reports whether it wrote. A task whose request
// could not be written ends with the error. wmu held.
func (r *Runner) write(rights []byte) bool {
	r.mu.Lock()
	n := 0 // records in this packet
	for n < len(r.outRec) && (n == 0 || rights != nil || r.outRec[n].end <= fullPacket) {
		n++
	}
	if n == 0 {
		r.mu.Unlock()
		return false
	}
	end := r.outRec[n-1].end
	r.packet = append(r.packet[:0], r.out[:end]...)
	r.recs = append(r.recs[:0], r.outRec[:n]...)
	r.out = r.out[:copy(r.out, r.out[end:])]
	r.outRec = r.outRec[:copy(r.outRec, r.outRec[n:])]
	for i := range r.outRec {
		r.outRec[i].end -= end
	}
	r.mu.Unlock()
	if _, _, err := r.conn.WriteMsgUnix(r.packet, rights, nil); err != nil {
		var ended []*Task
		r.mu.Lock()
		for _, rec := range r.recs {
			if t := r.pending[rec.seq]; t != nil {
				delete(r.pending, rec.seq)
				t.err = &StartError{Code: -1, Err: err}
				close(t.done)
				if t.wave != nil {
					ended = append(ended, t)
				}
			}
		}
		r.mu.Unlock()
		if len(ended) > 0 {
			// Not from the writer's goroutine: its caller may hold the
			// lock the callback takes.
			go tellWaves(ended)
		}
	}
	return true
}

// StartError is a task that could not start; Code as a shell's. Files:
// the runner could not make its logs or temporary directory (its job's
// output directory removed or replaced, say).
type StartError struct {
	Code  int
	Err   error
	Files bool
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

// TmpLeft reports, once the task ended, whether it left files in its
// temporary directory (StartSpec), which is then the caller's to remove.
func (t *Task) TmpLeft() bool {
	<-t.done
	return t.tmpLeft
}

// Signal sends sig to the task's process group (the runner does, which
// knows whether the task was reaped: never a reused pid). After a signal,
// the runner kills what is left of the group when the task ends.
func (t *Task) Signal(sig syscall.Signal) {
	t.r.send(request{Op: "signal", Seq: t.seq, Sig: int(sig)})
}

// Close ends the runner: the tasks it still runs are killed.
func (r *Runner) Close() {
	r.conn.CloseWrite()
	<-r.ended
}
