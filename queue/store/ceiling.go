package store

import (
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"

	"github.com/harvest-hpc/harvest/internal/thread"
)

// The write lock's priority ceiling.
//
// Every request of the hot path waits for SQLite's one write lock, so the
// thread that holds it stalls them all when the kernel preempts it: on a
// head node with more runnable threads than cores that is a scheduler
// slice (5-13 ms measured on 2 cores, where it was 45 of the 56
// transactions over 5 ms). That is a priority inversion, and the store
// answers it with the priority ceiling protocol: from BEGIN to COMMIT the
// writer thread runs under SCHED_FIFO at priority 1, the lowest real-time
// priority, so no ordinary thread preempts it while it holds the lock,
// and it is back under its own policy (nice value untouched) before the
// thread runs anything else. Every transaction the store runs is bounded
// (a batch, a fold chunk, InsertChunk or WriteChunk rows: milliseconds),
// so the real-time thread holds a core for milliseconds at most; the
// journal's replay at Open, whose size is whatever a crash left, runs
// without it.
//
// It needs CAP_SYS_NICE or an RLIMIT_RTPRIO of at least 1 (systemd:
// LimitRTPRIO=1, see deploy/harvest-agent.service). Without either the
// store runs the transactions as before and says why in LockCeiling.

// CeilingPriority is the SCHED_FIFO priority of a thread holding the
// write lock (harvest bench host probes the machine at it).
const CeilingPriority = 1

// ceiling is the state of the write lock's priority ceiling.
type ceiling struct {
	on    atomic.Bool
	mu    sync.Mutex
	state string // what LockCeiling reports
	// set and reset change the calling thread's policy; tests replace
	// them to see a refusal.
	set, reset func() error
}

func newCeiling() *ceiling {
	return &ceiling{set: setFIFO, reset: thread.SetOther, state: "off"}
}

func setFIFO() error { return thread.SetFIFO(CeilingPriority) }

// enable turns the ceiling on if this process may use it, or leaves it
// off and records why; it returns the state.
func (c *ceiling) enable(want bool) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.on.Store(false)
	if !want {
		c.state = "off (turned off)"
		return c.state
	}
	// Try it once on this thread, so the state says at once whether it
	// works; a thread already real-time (the agent started under chrt)
	// is left as the site set it.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if p, err := thread.Policy(); err != nil || p != 0 {
		c.state = fmt.Sprintf("off: the process does not run under SCHED_OTHER (policy %d, %v); the store leaves its threads' policy alone", p, err)
		return c.state
	}
	if err := c.set(); err != nil {
		c.state = fmt.Sprintf("off: SCHED_FIFO refused (%v): give the agent CAP_SYS_NICE or RLIMIT_RTPRIO >= 1 (systemd: LimitRTPRIO=1)", err)
		return c.state
	}
	if err := c.reset(); err != nil {
		runtime.LockOSThread() // this thread stays real-time: it ends with this goroutine
		c.state = fmt.Sprintf("off: could not return a thread to SCHED_OTHER (%v)", err)
		return c.state
	}
	c.state = fmt.Sprintf("SCHED_FIFO %d from BEGIN to COMMIT", CeilingPriority)
	c.on.Store(true)
	return c.state
}

// raise puts the calling (locked) thread under the ceiling; false when
// the ceiling is off or the kernel refused (then it turns off).
func (c *ceiling) raise() bool {
	if !c.on.Load() {
		return false
	}
	if err := c.set(); err != nil {
		c.off(fmt.Sprintf("off: SCHED_FIFO refused (%v)", err))
		return false
	}
	return true
}

// lower ends raise. If the kernel refuses, the thread must not run
// anything else: it stays locked to the calling goroutine (one more
// LockOSThread than UnlockOSThread), and the Go runtime ends it with the
// goroutine.
func (c *ceiling) lower() {
	if err := c.reset(); err != nil {
		runtime.LockOSThread()
		c.off(fmt.Sprintf("off: could not return a thread to SCHED_OTHER (%v)", err))
	}
}

func (c *ceiling) off(why string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.on.Store(false)
	c.state = why
}

func (c *ceiling) String() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.state
}

// SetLockCeiling turns the write lock's priority ceiling on (the
// default, when the process may use it) or off, and returns its state
// as LockCeiling reports it.
func (s *Store) SetLockCeiling(on bool) string { return s.ceil.enable(on) }

// LockCeilingOn reports whether write transactions run under the
// priority ceiling.
func (s *Store) LockCeilingOn() bool { return s.ceil.on.Load() }

// LockCeiling says whether write transactions run under the priority
// ceiling, and if not why.
func (s *Store) LockCeiling() string { return s.ceil.String() }
