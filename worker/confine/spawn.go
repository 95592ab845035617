package confine

/*
#define _GNU_SOURCE
#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sched.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <pthread.h>

#ifndef CLONE_PIDFD
#define CLONE_PIDFD 0x00001000
#endif
#ifndef SYS_landlock_restrict_self
#define SYS_landlock_restrict_self 446
#endif

// harvest_child is what a task's process runs before its exec, on the
// spawn stack (harvest_spawn): it shares the runner's memory until then.
struct harvest_child {
	const char *path;
	char *const *argv, *const *envp;
	int in, out, err, ruleset, nnp;
	pid_t parent;
	volatile int stage, errnum;
};

static int harvest_child_run(void *arg) {
	struct harvest_child *c = arg;
	if (setpgid(0, 0) != 0 || prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0) != 0 || getppid() != c->parent) {
		c->stage = 3; c->errnum = errno ? errno : ESRCH; _exit(127);
	}
	// no_new_privs is inherited: set already when the runner confined
	// itself (nnp), the common case, it costs the task no call.
	if (c->ruleset >= 0 && ((!c->nnp && prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) ||
	                        syscall(SYS_landlock_restrict_self, c->ruleset, 0) != 0)) {
		c->stage = 1; c->errnum = errno; _exit(126);
	}
	if (dup2(c->in, 0) < 0 || dup2(c->out, 1) < 0 || dup2(c->err, 2) < 0) {
		c->stage = 2; c->errnum = errno; _exit(126);
	}
	sigset_t none;
	sigemptyset(&none);
	sigprocmask(SIG_SETMASK, &none, NULL);
	execve(c->path, c->argv, c->envp);
	c->stage = 3; c->errnum = errno; _exit(127);
}

// harvest_stack is the stack of the task's process until its exec, made
// once, and harvest_cur what it runs: the runner starts one task at a
// time (from one goroutine), and starts the next only once the former
// has exec'd or exited (harvest_started).
static char *harvest_stack;
#define HARVEST_STACK (256 * 1024)
struct harvest_child harvest_cur;

// harvest_ctid is 1 while the task's process runs on harvest_stack: the
// kernel clears it, and wakes its futex, when the process execs or exits
// (CLONE_CHILD_CLEARTID: the release of the memory it shared with the
// runner, as a vfork parent is woken).
volatile int harvest_ctid;

// harvest_spawn starts path with argv and envp, the descriptors in, out
// and err (all above 2) as its 0, 1 and 2, in a process group of its
// own, with SIGKILL as its parent-death signal (parent: the caller's pid,
// found once, not a getpid per task), and, if ruleset is not
// -1, in a Landlock domain of its own made from it (nested in the calling
// thread's). It returns the pid and the process's pidfd in *pidfd, or -1
// with *errnum saying why clone failed. The process may still run on
// harvest_stack, from argv and envp: the caller waits for harvest_ctid to
// be 0 before it reads harvest_cur.stage (1: the domain, 2: the
// descriptors, 3: the exec failed: the process exited) and before it
// starts the next.
//
// clone(CLONE_VM) as posix_spawn does it, but without CLONE_VFORK: the
// child borrows the parent's memory until it execs, on a stack of its
// own, so it only makes system calls, and writes its failure into
// harvest_cur; the caller returns from C at once and waits for the exec
// in Go (harvest_ctid), so the Go runtime does not see it in a system
// call for the length of the child's setup and exec (with one P, its
// monitor took the P from every long one and polled every 20 us).
// CLONE_PIDFD gives the pidfd the runner polls with the process, without a
// pidfd_open. Every signal is blocked around it. The caller's handlers must be safe
// to run in the child (harvest_handlers leaves only SIG_DFL, SIG_IGN and
// harvest_stop, which does nothing): the child does not reset them, its
// exec does (a caught signal goes back to its default, an ignored one
// stays ignored).
static int harvest_spawn(const char *path, char *const argv[], char *const envp[],
                         int in, int out, int err, int ruleset, pid_t parent, int *pidfd, int *errnum) {
	// The runner's no_new_privs, asked at its first task (it confined
	// itself before, and the flag is never cleared).
	static int nnp = -1;
	if (nnp < 0) nnp = prctl(PR_GET_NO_NEW_PRIVS, 0, 0, 0, 0) == 1;
	if (harvest_stack == NULL && (harvest_stack = malloc(HARVEST_STACK)) == NULL) {
		*errnum = ENOMEM;
		return -1;
	}
	struct harvest_child c = {path, argv, envp, in, out, err, ruleset, nnp, parent, 0, 0};
	harvest_cur = c;
	harvest_ctid = 1;
	sigset_t all, old;
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	int fd = -1;
	// The stack grows down on every architecture Go's cgo supports here.
	pid_t pid = clone(harvest_child_run, harvest_stack + HARVEST_STACK,
	                  CLONE_VM | CLONE_PIDFD | CLONE_CHILD_CLEARTID | SIGCHLD, &harvest_cur, &fd, NULL, &harvest_ctid);
	int verr = errno;
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (pid < 0) {
		harvest_ctid = 0;
		*errnum = verr;
		return -1;
	}
	*pidfd = fd;
	return pid;
}

// harvest_stop is the runner's handler of the batch system's stop
// signals: it does nothing, so the runner outlives them (serveRunner), and
// may run in a vfork child before its exec.
static void harvest_stop(int sig) { (void)sig; }

// harvest_handlers replaces the Go runtime's signal handlers: the batch
// system's stop signals get harvest_stop, every other handled signal its
// default (SIGCHLD among them: its default leaves the tasks for waitpid;
// SIGURG, the runtime's preemption, with it: the runner runs with
// asyncpreemptoff). Ignored signals stay ignored.
static void harvest_handlers(void) {
	static const int stops[] = {SIGTERM, SIGINT, SIGHUP, SIGUSR1, SIGUSR2, SIGXCPU};
	for (int s = 1; s < _NSIG; s++) {
		struct sigaction cur, na;
		if (s == SIGKILL || s == SIGSTOP || sigaction(s, NULL, &cur) != 0) continue;
		int stop = 0;
		for (size_t i = 0; i < sizeof stops / sizeof stops[0]; i++) stop |= s == stops[i];
		// Ignored stays ignored (the runner outlives it, its tasks inherit
		// it, as a nohup'd pilot's always did).
		if (!(cur.sa_flags & SA_SIGINFO) && (cur.sa_handler == SIG_IGN || (!stop && cur.sa_handler == SIG_DFL))) continue;
		memset(&na, 0, sizeof na);
		na.sa_handler = SIG_DFL;
		if (stop) {
			na.sa_handler = harvest_stop;
			na.sa_flags = SA_RESTART;
		}
		sigaction(s, &na, NULL);
	}
}

// harvest_vec holds the argv and envp arrays of the spawn in progress
// (harvest_spawn_packed), grown as needed and kept: the runner starts
// one task at a time.
static char **harvest_vec;
static size_t harvest_veccap;

// harvest_strings holds the strings of the spawn in progress, in C memory
// (the task's process reads them after harvest_spawn returned, until its
// exec): grown as needed (harvest_strings_hold) and kept.
char *harvest_strings;
size_t harvest_strcap;

// harvest_strings_hold makes harvest_strings hold at least n bytes; NULL:
// out of memory.
static char *harvest_strings_hold(size_t n) {
	if (n > harvest_strcap) {
		char *b = realloc(harvest_strings, n);
		if (b == NULL) return NULL;
		harvest_strings = b;
		harvest_strcap = n;
	}
	return harvest_strings;
}

// harvest_spawn_packed is harvest_spawn with the path, argv and envp in
// harvest_strings, n NUL-terminated strings: the path, nargv arguments,
// then the environment. The arrays point into it.
static int harvest_spawn_packed(int n, int nargv,
                                int in, int out, int err, int ruleset, pid_t parent, int *pidfd, int *errnum) {
	size_t need = (size_t)n + 1;
	if (need > harvest_veccap) {
		char **v = realloc(harvest_vec, need * sizeof(char *));
		if (v == NULL) {
			*errnum = ENOMEM;
			return -1;
		}
		harvest_vec = v;
		harvest_veccap = need;
	}
	char *buf = harvest_strings;
	char *path = buf;
	char *p = buf + strlen(buf) + 1;
	char **argv = harvest_vec, **envp = harvest_vec + nargv + 1;
	for (int i = 0; i < nargv; i++) {
		argv[i] = p;
		p += strlen(p) + 1;
	}
	argv[nargv] = NULL;
	for (int i = 0; i < n - 1 - nargv; i++) {
		envp[i] = p;
		p += strlen(p) + 1;
	}
	envp[n - 1 - nargv] = NULL;
	return harvest_spawn(path, argv, envp, in, out, err, ruleset, parent, pidfd, errnum);
}
*/
import "C"

import (
	"fmt"
	"os"
	"strings"
	"sync/atomic"
	"syscall"
	"unsafe"
)

// setHandlers replaces the Go runtime's signal handlers in the runner,
// once, before it starts any task (harvest_handlers): no Go handler runs
// in the runner from then on, and none in a task's process before its
// exec.
func setHandlers() { C.harvest_handlers() }

// packStrings appends ss to b, each NUL-terminated (harvest_spawn_packed).
func packStrings(b []byte, ss ...string) ([]byte, error) {
	for _, s := range ss {
		if strings.IndexByte(s, 0) >= 0 {
			return b, fmt.Errorf("argument or variable %q holds a NUL byte", s)
		}
		b = append(append(b, s...), 0)
	}
	return b, nil
}

// selfPID is this process's pid (a Go process does not fork without
// exec: it does not change).
var selfPID = C.pid_t(os.Getpid())

// spawn starts a task from the calling thread (see harvest_spawn) and
// returns its pid and pidfd once it has exec'd; the task's Landlock domain
// is nested in that thread's (each of the runner's threads has one of its
// own, with the same rules, unscoped: runnerRules), and its parent-death
// signal comes when that thread ends.
// ruleset -1: the task shares the thread's domain.
func spawn(buf *[]byte, path string, argv, env []string, fds [3]int, ruleset int) (pid, pidfd int, err error) {
	for _, fd := range fds {
		if fd <= 2 {
			return 0, -1, fmt.Errorf("descriptor %d of the task's is a standard one", fd)
		}
	}
	// One call into C per task: the strings go packed in buf (kept for
	// the next task), then to C memory in one copy, not copied to C memory
	// one by one (a cgo call per allocation and per free: 11 calls per task).
	b, err := packStrings((*buf)[:0], path)
	if err == nil {
		b, err = packStrings(b, argv...)
	}
	if err == nil {
		b, err = packStrings(b, env...)
	}
	*buf = b
	if err != nil {
		return 0, -1, err
	}
	cb := unsafe.Pointer(C.harvest_strings)
	if uintptr(len(b)) > uintptr(C.harvest_strcap) {
		if cb = unsafe.Pointer(C.harvest_strings_hold(C.size_t(len(b)))); cb == nil {
			return 0, -1, fmt.Errorf("clone: %w", syscall.ENOMEM)
		}
	}
	copy(unsafe.Slice((*byte)(cb), len(b)), b)
	var cfd, errnum C.int
	cpid := C.harvest_spawn_packed(C.int(1+len(argv)+len(env)), C.int(len(argv)),
		C.int(fds[0]), C.int(fds[1]), C.int(fds[2]), C.int(ruleset), selfPID, &cfd, &errnum)
	if cpid < 0 {
		return 0, -1, fmt.Errorf("clone: %w", syscall.Errno(errnum))
	}
	waitExec()
	if C.harvest_cur.stage == 0 {
		return int(cpid), int(cfd), nil
	}
	// The process exited: reaped here, its failure said.
	var ws syscall.WaitStatus
	for {
		if _, _, e := syscall.RawSyscall6(syscall.SYS_WAIT4, uintptr(cpid), uintptr(unsafe.Pointer(&ws)), 0, 0, 0, 0); e != syscall.EINTR {
			break
		}
	}
	syscall.RawSyscall(syscall.SYS_CLOSE, uintptr(cfd), 0, 0)
	e := syscall.Errno(C.harvest_cur.errnum)
	switch C.harvest_cur.stage {
	case 1:
		if e == syscall.E2BIG {
			return 0, -1, fmt.Errorf("confine: too many stacked Landlock domains: %w", e)
		}
		return 0, -1, fmt.Errorf("confine: landlock_restrict_self: %w", e)
	case 2:
		return 0, -1, fmt.Errorf("the task's descriptors: %w", e)
	}
	return 0, -1, e
}

// waitExec waits until the task's process harvest_spawn started has
// exec'd or exited (harvest_ctid is 0), in a futex wait the Go runtime is
// not told of: the runner's one goroutine is all it runs (rawPoll), and
// the wait is as long as the child's setup and exec, no longer.
// The kernel's wake is a shared futex's (CLONE_CHILD_CLEARTID), so the
// wait is too (no FUTEX_PRIVATE_FLAG).
func waitExec() {
	addr := (*int32)(unsafe.Pointer(&C.harvest_ctid))
	for atomic.LoadInt32(addr) != 0 {
		syscall.RawSyscall6(syscall.SYS_FUTEX, uintptr(unsafe.Pointer(addr)), futexWait, 1, 0, 0, 0)
	}
}

// futexWait is FUTEX_WAIT.
const futexWait = 0
