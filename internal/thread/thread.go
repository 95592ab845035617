// Package thread changes and reads the calling thread's scheduling: its
// policy, and what it used over an interval. The queue's write lock
// (queue/store: its priority ceiling, its own-work figures) and the host
// probe that measures what the machine does to a thread under that
// ceiling (pilot/bench) use the same calls. The caller has locked its
// goroutine to its thread (runtime.LockOSThread): all of it is the
// thread's.
package thread

import (
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// sched_param of sched_setscheduler(2).
type schedParam struct{ priority int32 }

// SetFIFO puts the calling thread under SCHED_FIFO at priority prio. It
// needs CAP_SYS_NICE or an RLIMIT_RTPRIO of at least prio.
func SetFIFO(prio int) error {
	p := schedParam{int32(prio)}
	if _, _, e := unix.RawSyscall(unix.SYS_SCHED_SETSCHEDULER, 0, unix.SCHED_FIFO, uintptr(unsafe.Pointer(&p))); e != 0 {
		return e
	}
	return nil
}

// SetOther puts the calling thread back under SCHED_OTHER. Unlike
// sched_setattr it keeps the thread's nice value; dropping real-time
// priority is always permitted.
func SetOther() error {
	p := schedParam{0}
	if _, _, e := unix.RawSyscall(unix.SYS_SCHED_SETSCHEDULER, 0, 0 /* SCHED_OTHER */, uintptr(unsafe.Pointer(&p))); e != 0 {
		return e
	}
	return nil
}

// Policy is the calling thread's scheduling policy (0: SCHED_OTHER).
func Policy() (int, error) {
	r, _, e := unix.RawSyscall(unix.SYS_SCHED_GETSCHEDULER, 0, 0, 0)
	if e != 0 {
		return 0, e
	}
	return int(r), nil
}

// Use is what a thread did over an interval: its CPU time, how often it
// left its core involuntarily (preempted) and voluntarily (it slept),
// and its page faults.
type Use struct {
	CPU                      time.Duration
	Preempted, Slept, Faults int64
}

// Usage is the calling thread's use so far. The CPU time is the thread's
// CPU clock: getrusage's is adjusted from ticks and can stand still for
// a millisecond.
func Usage() Use {
	var u Use
	var ts unix.Timespec
	if unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &ts) == nil {
		u.CPU = time.Duration(ts.Nano())
	}
	var ru unix.Rusage
	if unix.Getrusage(unix.RUSAGE_THREAD, &ru) == nil {
		u.Preempted, u.Slept, u.Faults = ru.Nivcsw, ru.Nvcsw, ru.Minflt+ru.Majflt
	}
	return u
}

// Since is the use between u0 and u.
func (u Use) Since(u0 Use) Use {
	return Use{CPU: u.CPU - u0.CPU, Preempted: u.Preempted - u0.Preempted, Slept: u.Slept - u0.Slept, Faults: u.Faults - u0.Faults}
}
