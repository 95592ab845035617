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
	// A descriptor in place already (the runner's own stdin, /dev/null,
	// as a task's: serveRunner) is not dup'd: a system call fewer.
	if ((c->in != 0 && dup2(c->in, 0) < 0) || dup2(c->out, 1) < 0 || dup2(c->err, 2) < 0) {
		c->stage = 2; c->errnum = errno; _exit(126);
	}
	sigset_t none;
	sigemptyset(&none);
	sigprocmask(SIG_SETMASK, &none, NULL);
	execve(c->path, c->argv, c->envp);
	c->stage = 3; c->errnum = errno; _exit(127);
}

// harvest_stack is the stack of the task's process until its exec, made
// once: the runner starts one task at a time (from one goroutine), and waits
// (CLONE_VFORK) until the task has exec'd or exited.
static char *harvest_stack;
#define HARVEST_STACK (256 * 1024)

// harvest_spawn starts path with argv and envp, the descriptors in, out
// and err (all above 2) as its 0, 1 and 2, in a process group of its
// own, with SIGKILL as its parent-death signal (parent: the caller's pid,
// found once, not a getpid per task), and, if ruleset is not
// -1, in a Landlock domain of its own made from it (nested in the calling
// thread's). It returns the pid and the process's pidfd in *pidfd, or -1
// with *stage (1: the domain, 2: the descriptors, 3: the exec) and
// *errnum saying what failed.
//
// clone(CLONE_VM|CLONE_VFORK) as posix_spawn does it: the child borrows
// the parent's memory until it execs, on a stack of its own, so it only
// makes system calls, and writes its failure into the parent's variables;
// CLONE_PIDFD gives the pidfd the runner polls with the process, without
// a pidfd_open. The caller's handlers must be safe to run in the child
// (harvest_handlers leaves only SIG_DFL, SIG_IGN and harvest_stop, which
// does nothing): the child does not reset them, its exec does (a caught
// signal goes back to its default, an ignored one stays ignored). So no
// signal is blocked around the clone, as posix_spawn does to keep the
// parent's handlers out of the child (two rt_sigprocmask per task, each
// a microsecond and more here): a signal the child takes before its exec
// is one it took blocked before, delivered when it cleared its mask (a
// stop signal to harvest_stop, a default one as it would be), and the
// child clears its mask all the same (the thread's may not be empty).
static int harvest_spawn(const char *path, char *const argv[], char *const envp[],
                         int in, int out, int err, int ruleset, pid_t parent, int *pidfd, int *stage, int *errnum) {
	// The runner's no_new_privs, asked at its first task (it confined
	// itself before, and the flag is never cleared).
	static int nnp = -1;
	if (nnp < 0) nnp = prctl(PR_GET_NO_NEW_PRIVS, 0, 0, 0, 0) == 1;
	if (harvest_stack == NULL && (harvest_stack = malloc(HARVEST_STACK)) == NULL) {
		*stage = 0; *errnum = ENOMEM;
		return -1;
	}
	struct harvest_child c = {path, argv, envp, in, out, err, ruleset, nnp, parent, 0, 0};
	int fd = -1;
	// The stack grows down on every architecture Go's cgo supports here.
	pid_t pid = clone(harvest_child_run, harvest_stack + HARVEST_STACK, CLONE_VM | CLONE_VFORK | CLONE_PIDFD | SIGCHLD, &c, &fd);
	int verr = errno;
	if (pid < 0) {
		*stage = 0; *errnum = verr;
		return -1;
	}
	if (c.stage != 0) {
		int ws;
		while (waitpid(pid, &ws, 0) < 0 && errno == EINTR) {}
		close(fd);
		*stage = c.stage; *errnum = c.errnum;
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

// harvest_spawn_packed is harvest_spawn with the path, argv and envp in
// one buffer of n NUL-terminated strings: the path, nargv arguments, then
// the environment. The arrays point into buf, which is only read until
// the task's exec (CLONE_VFORK): the caller's, for the length of the call.
static int harvest_spawn_packed(char *buf, int n, int nargv,
                                int in, int out, int err, int ruleset, pid_t parent, int *pidfd, int *stage, int *errnum) {
	size_t need = (size_t)n + 1;
	if (need > harvest_veccap) {
		char **v = realloc(harvest_vec, need * sizeof(char *));
		if (v == NULL) {
			*stage = 0; *errnum = ENOMEM;
			return -1;
		}
		harvest_vec = v;
		harvest_veccap = need;
	}
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
	return harvest_spawn(path, argv, envp, in, out, err, ruleset, parent, pidfd, stage, errnum);
}
*/
import "C"

import (
	"fmt"
	"os"
	"strings"
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
// returns its pid and pidfd; the task's Landlock domain is nested in
// that thread's (each of the runner's threads has one of its own, with
// the same rules, unscoped: runnerRules), and its parent-death signal
// comes when that thread ends.
// ruleset -1: the task shares the thread's domain.
func spawn(buf *[]byte, path string, argv, env []string, fds [3]int, ruleset int) (pid, pidfd int, err error) {
	// (Its stdin may be the runner's own, 0: it stays in place.)
	for i, fd := range fds {
		if fd <= 2 && (i != 0 || fd != 0) {
			return 0, -1, fmt.Errorf("descriptor %d of the task's is a standard one", fd)
		}
	}
	// One call into C per task: the strings go packed in buf (kept for
	// the next task), not copied to C memory one by one (a cgo call per
	// allocation and per free: 11 calls per task).
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
	var cfd, stage, errnum C.int
	cpid := C.harvest_spawn_packed((*C.char)(unsafe.Pointer(&b[0])), C.int(1+len(argv)+len(env)), C.int(len(argv)),
		C.int(fds[0]), C.int(fds[1]), C.int(fds[2]), C.int(ruleset), selfPID, &cfd, &stage, &errnum)
	if cpid >= 0 {
		return int(cpid), int(cfd), nil
	}
	e := syscall.Errno(errnum)
	switch stage {
	case 0:
		return 0, -1, fmt.Errorf("clone: %w", e)
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
