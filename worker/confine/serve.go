package confine

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"syscall"
	"time"
	"unsafe"

	"github.com/harvest-hpc/harvest/internal/logcap"
	"golang.org/x/sys/unix"
)

// running is a task the runner started.
type running struct {
	seq       int64
	pid       int
	pidfd     int
	signalled bool // then what is left of its group is killed when it ends
	// Its files, when the runner made them ("run"): its logs' descriptors
	// and names, its temporary directory's name.
	out, err         int
	outName, errName string
	tmp              string
	// A queued task ("queue") holds one of the runner's slots; deadline:
	// its timeout; killAt: SIGKILL to its group, the grace after a stop.
	queued           bool
	timedOut         bool
	started          time.Time
	deadline, killAt time.Time
}

// server is the runner's state (serveRunner).
type server struct {
	sock  int
	scope int // the Landlock ruleset of each task's own domain (-1: none)
	// taskPolicy: the file rules of each task's own domain
	// (RunnerPolicy.Tasks; nil: its domain only scopes), on Landlock ABI
	// abi. Their paths are opened (rules) to make scope, closed, and
	// opened again at the first task that needs a ruleset of its own (a
	// linked entry): a plain task's process then inherits none of their
	// descriptors, 13-17 fewer that its clone copies and its exec closes.
	taskPolicy *Policy
	abi        int
	rules      *taskRules // nil: not open
	logs       int        // the log directory (O_PATH; -1: none)
	tmp        int        // the directory of the temporary directories (O_PATH; -1: none)
	tmpPath    string
	devnull    int
	eager      bool // the log directory's file system has no O_TMPFILE
	// spare are unnamed logs a task left empty, whose process group had
	// ended: the next tasks' logs, no file made or freed for them.
	spare  []int
	tasks  []*running
	events []byte // this turn's answer
	// logMax bounds the logs it makes (logcap.Cut every logcap.Interval
	// while their task runs, and when it ends); 0: no limit.
	logMax  int64
	lastCut time.Time
	// The queued tasks waiting for a slot, in order; slots: how many may
	// run at once (0: any number), inSlots: how many do; grace: SIGTERM
	// to SIGKILL when the runner stops a task.
	waiting []request
	slots   int
	inSlots int
	grace   time.Duration
	// heldSince: when the oldest of the events held back began waiting
	// (serve); zero: none is.
	heldSince time.Time
	hold      time.Duration
	// quiet are the log names of quiet tasks (empty logs, group ended)
	// whose former run's logs, if any, go before their events do
	// (dropFormerLogs); logsDir reads the log directory for them (-1:
	// not open), bigLogs: it holds too many entries to read each time.
	quiet    []string
	logsDir  int
	bigLogs  bool
	spawnBuf []byte // the strings of the task spawn starts, kept for the next
}

// serveRunner is the runner's side: confine, say ready, serve requests
// until the worker closes the socket (descriptor 3), then kill the tasks
// still running and return. It runs on the main goroutine, which starts
// every task (spawn: each task's Landlock domain is nested in the
// runner's, whichever of its threads starts it); it waits for the requests, and
// for the tasks' ends through their pidfds, in one poll(2), and sends the
// signals and reaps the tasks itself, so a pid is never reused under a
// signal. No goroutine, no thread per task. Each turn of its loop ends
// with at most one packet to the worker: every task that ended in it.
func serveRunner(spec string) (int, error) {
	s := &server{sock: 3, logs: -1, tmp: -1, devnull: -1, logsDir: -1}
	if err := unix.SetNonblock(s.sock, false); err != nil {
		return ExitCannotRun, fmt.Errorf("confine: runner socket: %w", err)
	}
	fail := func(err error) (int, error) {
		s.event(event{Err: err.Error()})
		s.send()
		return ExitCannotRun, err
	}
	var rp RunnerPolicy
	if err := json.Unmarshal([]byte(spec), &rp); err != nil {
		return fail(fmt.Errorf("confine: bad policy: %w", err))
	}
	p := rp.Policy
	// The directories it makes the tasks' files in, and /dev/null, opened
	// before it is confined (O_PATH is not subject to Landlock).
	var err error
	for _, d := range []struct {
		path string
		fd   *int
	}{{rp.Logs, &s.logs}, {rp.Tmp, &s.tmp}} {
		if d.path == "" {
			continue
		}
		if *d.fd, err = unix.Open(d.path, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0); err != nil {
			return fail(fmt.Errorf("confine: %s: %w", d.path, err))
		}
	}
	s.tmpPath, s.eager, s.logMax = rp.Tmp, rp.NamedLogs, rp.LogMax
	s.grace = time.Duration(rp.GraceMS) * time.Millisecond
	s.hold = holdEvents
	if rp.HoldMS > 0 {
		s.hold = time.Duration(rp.HoldMS) * time.Millisecond
	}
	if s.devnull, err = unix.Open(os.DevNull, unix.O_RDONLY|unix.O_CLOEXEC, 0); err != nil {
		return fail(fmt.Errorf("confine: %s: %w", os.DevNull, err))
	}
	if sameReadOnlyFile(0, s.devnull) {
		// The runner's stdin is /dev/null (StartRunner's): every task's
		// process inherits it as its own, not a dup2 each.
		unix.Close(s.devnull)
		s.devnull = 0
	}
	if p.Dir != "" {
		if err := os.Chdir(p.Dir); err != nil {
			return fail(fmt.Errorf("confine: working directory: %w", err))
		}
	}
	if p.Mode == ModeRequire {
		// The tasks' scoping is in their own domains (runnerRules).
		if abi := Probe().ABI; abi < RequiredABI() {
			return fail(fmt.Errorf("confine the tasks: missing kernel Landlock support: ABI %d, %d or later required", abi, RequiredABI()))
		}
	}
	if p.Mode != ModeOff {
		if err := restrictWith(p, runnerRules); err != nil {
			return fail(fmt.Errorf("confine the tasks: %w", err))
		}
	}
	if sup := Probe(); rp.Tasks != nil && p.Mode != ModeOff && sup.ABI > 0 {
		// Each task's own rules, nested in the runner's (and scoping).
		if s.rules, err = newTaskRules(*rp.Tasks, sup.ABI); err != nil {
			return fail(err)
		}
		if s.scope, err = s.rules.ruleset(nil); err != nil {
			return fail(err)
		}
		s.rules.close()
		s.rules, s.taskPolicy, s.abi = nil, rp.Tasks, sup.ABI
	} else {
		scope, err := scopeRuleset()
		if err != nil {
			return fail(err)
		}
		s.scope = scope.fd
	}
	// The descriptors the rules were made from are not the tasks'.
	cloexecFrom3()
	// The batch system's stop signal (scancel's SIGTERM, ...) reaches every
	// process of the pilot, this runner too. The runner must outlive it:
	// the worker decides whether its tasks were interrupted (no attempt
	// charged), and a runner dead first would report them failed. Caught
	// by a handler that does nothing, not ignored, and every other
	// handler the Go runtime set back to its default, once: a task's
	// vfork child then has no handler to reset, its exec puts the caught
	// ones back to their defaults (so the tasks still stop on them), and
	// the runner takes no SIGCHLD (its pidfds say when a task ended). The
	// worker ends the runner by closing the socket, or its death by
	// Pdeathsig.
	setHandlers()
	// Every thread of the runner is in its domain (the rules are applied
	// to all of them), so its loop may move between threads: a yield to
	// the Go scheduler (serve) is then a turn of the same thread's
	// scheduler, not a hand-over of the main thread's P to another thread
	// and back (two wakes and two sleeps each, 14% of a busy runner's CPU
	// at a yield every 5 ms: perf). A task's parent-death signal is its
	// thread's; the Go runtime ends no thread while the runner runs.
	runtime.UnlockOSThread()
	s.event(event{Flags: evReady})
	s.send()
	if err := s.serve(); err != nil {
		return ExitCannotRun, err
	}
	return 0, nil
}

// sameReadOnlyFile reports whether descriptors a and b are the same
// file, both open for reading only.
func sameReadOnlyFile(a, b int) bool {
	var sa, sb unix.Stat_t
	if unix.Fstat(a, &sa) != nil || unix.Fstat(b, &sb) != nil || sa.Dev != sb.Dev || sa.Ino != sb.Ino || sa.Rdev != sb.Rdev {
		return false
	}
	for _, fd := range []int{a, b} {
		if fl, err := unix.FcntlInt(uintptr(fd), unix.F_GETFL, 0); err != nil || fl&unix.O_ACCMODE != unix.O_RDONLY {
			return false
		}
	}
	return true
}

func (s *server) event(ev event) { s.events = appendEvent(s.events, ev) }

// send sends the events held, if any, in one packet.
func (s *server) send() {
	s.heldSince = time.Time{}
	if len(s.events) == 0 {
		return
	}
	s.dropFormerLogs()
	for {
		if err := unix.Sendmsg(s.sock, s.events, nil, nil, unix.MSG_NOSIGNAL); err != unix.EINTR {
			break
		}
	}
	s.events = s.events[:0]
}

func (s *server) serve() error {
	var polls []unix.PollFd
	buf, oob := make([]byte, maxPacket+fullPacket), make([]byte, unix.CmsgSpace(3*4))
	yielded := time.Now()
	for {
		if now := time.Now(); now.Sub(yielded) >= yieldEvery {
			// The runner's goroutine never blocks in the Go scheduler (its
			// poll is a raw system call), so the runtime's monitor takes it
			// for one running too long every 10 ms: it preempts it and
			// takes its P away if it is in a system call then (a spawn,
			// most of the time), and then wakes every 20 us again (with
			// GOMAXPROCS 2, 7% of the runner's CPU in its sleeps: perf, 4
			// runners at full speed). A yield of its own first is a turn of
			// its thread's scheduler (the goroutine is not locked to it).
			runtime.Gosched()
			yielded = now
		}
		polls = append(polls[:0], unix.PollFd{Fd: int32(s.sock), Events: unix.POLLIN})
		var next time.Time // the next deadline or kill, if any
		for _, t := range s.tasks {
			polls = append(polls, unix.PollFd{Fd: int32(t.pidfd), Events: unix.POLLIN})
			for _, d := range []time.Time{t.deadline, t.killAt} {
				if !d.IsZero() && (next.IsZero() || d.Before(next)) {
					next = d
				}
			}
		}
		wait := time.Duration(-1)
		if !next.IsZero() {
			wait = max(time.Until(next), 0)
		}
		if c := s.cutLogs(); c >= 0 && (wait < 0 || c < wait) {
			wait = c
		}
		if !s.heldSince.IsZero() {
			if h := max(time.Until(s.heldSince.Add(s.hold)), 0); wait < 0 || h < wait {
				wait = h
			}
		}
		if err := rawPoll(polls, wait); err != nil {
			if err == unix.EINTR {
				continue
			}
			return fmt.Errorf("confine: poll: %w", err)
		}
		// The tasks that ended, first: reaped here, after their group's
		// stragglers if they were signalled.
		kept := s.tasks[:0]
		for i, t := range s.tasks {
			if polls[i+1].Revents == 0 {
				kept = append(kept, t)
				continue
			}
			s.reap(t)
		}
		clear(s.tasks[len(kept):])
		s.tasks = kept
		if !next.IsZero() {
			s.expire(time.Now())
		}
		asked := polls[0].Revents != 0
		if asked {
			n, oobn, _, _, err := unix.Recvmsg(s.sock, buf, oob, unix.MSG_CMSG_CLOEXEC)
			if err != unix.EINTR {
				if err != nil || n == 0 {
					break
				}
				s.serveRequests(buf[:n], receivedFDs(oob[:oobn]))
			}
		}
		s.fill()
		// The tasks that ended while others of the job's groups wait for
		// their slots may wait s.hold (holdEvents) for the next ones to end: the
		// worker wakes once for several (at one slot, it woke per task,
		// and most of its CPU went to the wakes: perf), and has nothing
		// to do for them sooner (the slots they held are taken again, here,
		// and their results wait in the worker for the group's end
		// anyway: GroupResultDelay). Anything else goes at once: a
		// request's answer, a group's last tasks, a slot that comes free.
		switch {
		case len(s.events) == 0:
		case asked || len(s.waiting) == 0 || len(s.events) >= holdBytes ||
			(!s.heldSince.IsZero() && time.Since(s.heldSince) >= s.hold):
			s.send()
		case s.heldSince.IsZero():
			s.heldSince = time.Now()
		}
	}
	s.send()
	// The worker is gone or closed the runner: nothing is left to run.
	for _, t := range s.tasks {
		syscall.Kill(-t.pid, syscall.SIGKILL)
	}
	return nil
}

// serveRequests serves one packet's requests; fds, its descriptors, go
// to its "start" request (and are closed). The requests' strings are
// those of a copy of b (decodeRequests), which the queued ones keep.
func (s *server) serveRequests(b []byte, fds []int) {
	decodeRequests(bytes.Clone(b), func(q request) {
		switch q.Op {
		case "signal":
			for _, t := range s.tasks {
				if t.seq == q.Seq {
					t.signalled = true
					syscall.Kill(-t.pid, syscall.Signal(q.Sig))
				}
			}
		case "start":
			if len(fds) != 3 {
				s.event(event{Seq: q.Seq, Flags: evDone, Code: ExitCannotRun, Err: "confine: a start request without its 3 descriptors"})
				return
			}
			t := &running{seq: q.Seq, out: -1, err: -1}
			if err := s.spawn(t, q, [3]int{fds[0], fds[1], fds[2]}); err != nil {
				s.startFailed(q, err, 0)
			}
		case "run":
			s.run(q, false)
		case "queue":
			s.waiting = append(s.waiting, q)
		case "slots":
			s.slots = max(q.Sig, 0)
		case "stop":
			s.stop(q.Seq)
		}
	})
	for _, fd := range fds {
		unix.Close(fd)
	}
}

// fill starts waiting tasks while the runner has slots free.
func (s *server) fill() {
	n := 0
	for n < len(s.waiting) && (s.slots == 0 || s.inSlots < s.slots) {
		s.run(s.waiting[n], true)
		n++
	}
	if n > 0 {
		s.waiting = s.waiting[:copy(s.waiting, s.waiting[n:])]
	}
}

// stop stops task seq: a waiting one is not started (and ends at once),
// a running one gets SIGTERM, and SIGKILL after the grace if its group
// is still there.
func (s *server) stop(seq int64) {
	for i, q := range s.waiting {
		if q.Seq == seq {
			s.waiting = append(s.waiting[:i], s.waiting[i+1:]...)
			s.event(event{Seq: seq, Flags: evDone | evSkipped})
			return
		}
	}
	for _, t := range s.tasks {
		if t.seq == seq && t.killAt.IsZero() {
			s.terminate(t, time.Now())
		}
	}
}

// terminate sends SIGTERM to t's group and sets its SIGKILL.
func (s *server) terminate(t *running, now time.Time) {
	t.signalled, t.deadline = true, time.Time{}
	syscall.Kill(-t.pid, syscall.SIGTERM)
	t.killAt = now.Add(max(s.grace, time.Millisecond))
}

// expire stops the tasks past their timeout and kills the groups past
// their grace.
func (s *server) expire(now time.Time) {
	for _, t := range s.tasks {
		switch {
		case !t.deadline.IsZero() && !now.Before(t.deadline):
			t.timedOut = true
			s.terminate(t, now)
		case !t.killAt.IsZero() && !now.Before(t.killAt):
			t.killAt = time.Time{}
			syscall.Kill(-t.pid, syscall.SIGKILL)
		}
	}
}

// run makes a task's temporary directory and logs and starts it; queued:
// in one of the runner's slots, stopped at its timeout.
func (s *server) run(q request, queued bool) {
	t := &running{seq: q.Seq, out: -1, err: -1, outName: q.Out, errName: q.Err, queued: queued}
	if err := s.files(t, q.Tmp); err != nil {
		s.closeFiles(t)
		s.removeTmp(t)
		s.startFailed(q, err, evFiles)
		return
	}
	if err := s.spawn(t, q, [3]int{s.devnull, t.out, t.err}); err != nil {
		s.closeFiles(t)
		s.removeTmp(t)
		s.startFailed(q, err, 0)
		return
	}
	if queued {
		s.inSlots++
		t.started = time.Now()
		if q.TimeoutMS > 0 {
			t.deadline = time.Now().Add(time.Duration(q.TimeoutMS) * time.Millisecond)
		}
	}
}

// files makes t's temporary directory and opens its logs: unnamed files
// in the log directory (O_TMPFILE), named when the task ends if it wrote
// to them; or, where the file system has no O_TMPFILE, files created now
// (a link in their place refused).
func (s *server) files(t *running, tmp string) error {
	if s.logs < 0 || s.tmp < 0 || !plainName(t.outName) || !plainName(t.errName) || !plainName(tmp) {
		return errors.New("confine: this runner makes no files, or a name is not plain")
	}
	err := unix.Mkdirat(s.tmp, tmp, 0o700)
	if err == unix.EEXIST {
		// A former run's of this very task, in the job's private
		// directory: removed.
		os.RemoveAll(filepath.Join(s.tmpPath, tmp))
		err = unix.Mkdirat(s.tmp, tmp, 0o700)
	}
	if err != nil {
		return fmt.Errorf("temporary directory: %w", err)
	}
	t.tmp = tmp
	for _, l := range []struct {
		fd   *int
		name string
	}{{&t.out, t.outName}, {&t.err, t.errName}} {
		if n := len(s.spare); n > 0 && !s.eager {
			*l.fd, s.spare = s.spare[n-1], s.spare[:n-1]
			continue
		}
		if !s.eager {
			*l.fd, err = unix.Openat(s.logs, ".", unix.O_TMPFILE|unix.O_RDWR|unix.O_CLOEXEC, 0o644) // read: logcap keeps the end of a cut log
			if err == unix.EOPNOTSUPP || err == unix.EISDIR || err == unix.EINVAL {
				s.eager = true
			}
		}
		if s.eager {
			*l.fd, err = unix.Openat(s.logs, l.name, unix.O_RDWR|unix.O_CREAT|unix.O_TRUNC|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o644)
		}
		if err != nil {
			*l.fd = -1
			return fmt.Errorf("log %s: %w", l.name, err)
		}
	}
	if s.eager {
		t.outName, t.errName = "", "" // made already
	}
	return nil
}

// spawn starts q as t with the descriptors fds.
func (s *server) spawn(t *running, q request, fds [3]int) error {
	ruleset := s.scope
	if len(q.Read) > 0 && s.taskPolicy != nil {
		// A task that may read more than its job's rules say: a ruleset
		// of its own. (O_PATH opens are not Landlock's to refuse: the
		// runner, confined, opens its rules' paths again.)
		if s.rules == nil {
			rules, err := newTaskRules(*s.taskPolicy, s.abi)
			if err != nil {
				return err
			}
			s.rules = rules
		}
		fd, err := s.rules.ruleset(q.Read)
		if err != nil {
			return err
		}
		defer unix.Close(fd)
		ruleset = fd
	}
	pid, pidfd, err := spawn(&s.spawnBuf, q.Path, q.Argv, q.Env, fds, ruleset)
	if err != nil {
		return err
	}
	t.pid, t.pidfd = pid, pidfd
	s.tasks = append(s.tasks, t)
	return nil
}

func (s *server) startFailed(q request, err error, flags byte) {
	code := ExitCannotRun
	if errors.Is(err, syscall.ENOENT) && flags&evFiles == 0 {
		code = ExitNotFound
	}
	if flags&evFiles != 0 {
		code = -1
	}
	s.event(event{Seq: q.Seq, Flags: evDone | flags, Code: code, Err: fmt.Sprintf("start %s: %v", q.Path, err)})
}

// reap reaps an ended task, names its logs, removes its temporary
// directory and adds its event.
func (s *server) reap(t *running) {
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
	// Nothing of the task's may write to an empty log the next task gets:
	// only a task whose whole group has ended gives its logs back.
	alone := syscall.Kill(-t.pid, 0) == syscall.ESRCH
	s.endLog(&t.out, t.outName, alone)
	s.endLog(&t.err, t.errName, alone)
	s.closeFiles(t)
	flags := byte(evDone)
	if !s.removeTmp(t) {
		flags |= evTmpLeft
	}
	if t.timedOut {
		flags |= evTimedOut
	}
	if t.queued {
		s.inSlots--
	}
	ev := event{Seq: t.seq, Flags: flags, Status: int(ws)}
	if t.queued {
		ev.Micros = time.Since(t.started).Microseconds()
	}
	s.event(ev)
}

// endLog cuts an ended task's log *fd at logMax and links it as name
// in the log directory if the task wrote to it, or if something of the
// task's is left that may (alone false: its group outlived it),
// replacing what had that name (a former run's log, a link: never
// followed). An empty log of a task alone gets no file (a former one of
// that name goes) and is kept for the next task (*fd is then -1).
//
// Its size is one lseek to its end when the task is alone (nothing
// writes at the shared offset any more, and an empty log's stays 0,
// ready for the next task): not an fstat, and a seek for the cut and
// another for the spare, per log and task.
func (s *server) endLog(fd *int, name string, alone bool) {
	if *fd < 0 {
		return
	}
	size := int64(-1)
	if alone {
		if n, err := unix.Seek(*fd, 0, io.SeekEnd); err == nil {
			size = n
		}
	} else if st := (unix.Stat_t{}); unix.Fstat(*fd, &st) == nil {
		size = st.Size
	}
	if s.logMax > 0 && (size < 0 || size > s.logMax) {
		logcap.Cut(*fd, s.logMax)
	}
	if name == "" {
		return
	}
	if size == 0 && alone {
		s.quiet = append(s.quiet, name)
		if len(s.spare) < maxSpareLogs {
			s.spare = append(s.spare, *fd)
			*fd = -1
		}
		return
	}
	// (Not a name a quiet run of the same task left for dropFormerLogs:
	// the worker runs a task again only once told of its end, after it.)
	s.quiet = slices.DeleteFunc(s.quiet, func(q string) bool { return q == name })
	proc := "/proc/self/fd/" + strconv.Itoa(*fd)
	err := unix.Linkat(unix.AT_FDCWD, proc, s.logs, name, unix.AT_SYMLINK_FOLLOW)
	if err == unix.EEXIST && unix.Unlinkat(s.logs, name, 0) == nil {
		unix.Linkat(unix.AT_FDCWD, proc, s.logs, name, unix.AT_SYMLINK_FOLLOW)
	}
}

// maxSpareLogs bounds the empty logs kept for the next tasks.
const maxSpareLogs = 64

// dropFormerLogs removes the logs a former run of the same task and
// attempt may have left under the names of quiet tasks' empty logs (an
// interrupted task runs again under the same attempt, maybe on another
// node; the new run's empty log leaves no file), before the tasks'
// events go. Most such names were never used: an unlink of each fails,
// two system calls per quiet task. One read of the log directory tells
// which exist, for every quiet task of the packet (a rewind and two
// getdents), while the directory is small (maxLogsRead entries; a job
// whose tasks write logs fills it, and its runner goes back to an unlink
// per name). A log linked after the read stays, as one linked after an
// unlink did.
func (s *server) dropFormerLogs() {
	if len(s.quiet) == 0 {
		return
	}
	names := s.quiet
	s.quiet = s.quiet[:0]
	if len(names) > 2 && !s.bigLogs {
		if there, ok := s.readLogs(); ok {
			for _, name := range names {
				if _, ok := there[name]; ok {
					unix.Unlinkat(s.logs, name, 0)
				}
			}
			clear(names)
			return
		}
	}
	for _, name := range names {
		unix.Unlinkat(s.logs, name, 0)
	}
	clear(names)
}

// maxLogsRead is how many entries the log directory may hold for
// dropFormerLogs to read it.
const maxLogsRead = 256

// readLogs returns the names in the log directory, or false if it
// cannot be read or holds more than maxLogsRead entries (then bigLogs).
func (s *server) readLogs() (map[string]struct{}, bool) {
	if s.logsDir < 0 {
		fd, err := unix.Openat(s.logs, ".", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err != nil {
			s.bigLogs = true
			return nil, false
		}
		s.logsDir = fd
	} else if _, err := unix.Seek(s.logsDir, 0, io.SeekStart); err != nil {
		return nil, false
	}
	var buf [16 << 10]byte
	there := map[string]struct{}{}
	var names []string
	for {
		n, err := unix.Getdents(s.logsDir, buf[:])
		if err != nil {
			return nil, false
		}
		if n == 0 {
			return there, true
		}
		_, _, names = unix.ParseDirent(buf[:n], -1, names[:0])
		for _, name := range names {
			there[name] = struct{}{}
		}
		if len(there) > maxLogsRead {
			s.bigLogs = true
			return nil, false
		}
	}
}

func (s *server) closeFiles(t *running) {
	for _, fd := range []*int{&t.out, &t.err} {
		if *fd >= 0 {
			unix.Close(*fd)
			*fd = -1
		}
	}
}

// removeTmp removes t's temporary directory if empty (most tasks leave
// nothing); false: it is not, and the worker removes it, off this loop.
func (s *server) removeTmp(t *running) bool {
	if t.tmp == "" {
		return true
	}
	err := unix.Unlinkat(s.tmp, t.tmp, unix.AT_REMOVEDIR)
	return err == nil || err == unix.ENOENT
}

// rawPoll waits for polls, at first without telling the Go runtime it is
// in a system call: the runner's one goroutine is all it runs, and a
// runtime told would have its monitor thread take the goroutine's P away
// and wake again every 20 us while the poll waits (futex and nanosleep
// calls, measured: 3-4% of the runner's CPU). But a garbage collection
// (the runtime forces one every 2 minutes) waits, its threads spinning,
// for a goroutine that does not return to Go: so the raw poll waits at
// most rawWait, and a longer wait (an idle runner, long tasks) goes on
// in a poll the runtime knows of. wait < 0: no timeout.
func rawPoll(polls []unix.PollFd, wait time.Duration) error {
	first := rawWait
	if wait >= 0 && wait < first {
		first = wait
	}
	t := unix.NsecToTimespec(int64(first))
	n, _, e := unix.RawSyscall6(unix.SYS_PPOLL, uintptr(unsafe.Pointer(&polls[0])), uintptr(len(polls)), uintptr(unsafe.Pointer(&t)), 0, 0, 0)
	if e != 0 {
		return e
	}
	if n > 0 || (wait >= 0 && wait <= first) {
		return nil
	}
	var rest *unix.Timespec
	if wait >= 0 {
		r := unix.NsecToTimespec(int64(wait - first))
		rest = &r
	}
	_, err := unix.Ppoll(polls, rest, nil)
	return err
}

// yieldEvery is how often the runner's loop yields to the Go scheduler:
// within the runtime's 10 ms preemption bound (serve), with 2 ms for the
// turn that follows. (While the goroutine was locked to the main thread,
// each yield handed its P to another thread and back: two wakes, two
// sleeps, 13-14% of a busy runner's CPU at 5 ms.)
const yieldEvery = 8 * time.Millisecond

// holdEvents is how long the events of tasks that ended may wait for
// others' by default (serve, RunnerPolicy.HoldMS), holdBytes how many
// bytes of them at most.
const (
	holdEvents = 10 * time.Millisecond
	holdBytes  = 16 << 10
)

// rawWait bounds a poll the Go runtime does not know of.
const rawWait = 20 * time.Millisecond

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

// cutLogs cuts the running tasks' logs at logMax if logcap.Interval
// passed since it last did, and returns how long the loop's poll may
// wait before it is due again (-1: no limit, or no log to watch).
func (s *server) cutLogs() time.Duration {
	if s.logMax <= 0 || len(s.tasks) == 0 {
		return -1
	}
	now := time.Now()
	if since := now.Sub(s.lastCut); since < logcap.Interval {
		return logcap.Interval - since
	}
	s.lastCut = now
	for _, t := range s.tasks {
		for _, fd := range []int{t.out, t.err} {
			if fd >= 0 {
				logcap.Cut(fd, s.logMax)
			}
		}
	}
	return logcap.Interval
}
