package store

import (
	"context"
	"database/sql"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/harvest-hpc/harvest/internal/thread"
)

const schedFIFO = 1 // SCHED_FIFO; 0 is SCHED_OTHER

func openCeilingStore(t *testing.T) *Store {
	t.Helper()
	s, err := Open(filepath.Join(t.TempDir(), "q.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// needCeiling skips where the process may not use SCHED_FIFO (CI runs as
// root, where it may).
func needCeiling(t *testing.T, s *Store) {
	t.Helper()
	if !s.LockCeilingOn() {
		t.Skipf("this process may not use SCHED_FIFO: %s", s.LockCeiling())
	}
}

// threadPolicy is the calling thread's policy and nice value (the
// goroutine must be locked to its thread).
func threadPolicy(t *testing.T) (pol, prio int) {
	t.Helper()
	pol, err := thread.Policy()
	if err != nil {
		t.Fatal(err)
	}
	prio, err = unix.Getpriority(unix.PRIO_PROCESS, 0)
	if err != nil {
		t.Fatal(err)
	}
	return pol, prio
}

func TestAWriteHoldsTheLockRealTimeAndGivesTheThreadBackAsItWas(t *testing.T) {
	s := openCeilingStore(t)
	needCeiling(t, s)
	runtime.LockOSThread() // write's own lock nests: after it, the same thread
	defer runtime.UnlockOSThread()
	// A niced thread must come back with its nice value.
	_, prio0 := threadPolicy(t)
	if err := unix.Setpriority(unix.PRIO_PROCESS, 0, 5); err != nil {
		t.Fatal(err)
	}
	defer unix.Setpriority(unix.PRIO_PROCESS, 0, 20-prio0) // Getpriority answers 20 - nice
	_, niced := threadPolicy(t)

	var inside int
	err := s.write(context.Background(), func(tx *sql.Tx) error {
		inside, _ = threadPolicy(t)
		_, err := tx.Exec(`INSERT INTO settings (key, value) VALUES ('ceiling-test', '1')`)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if inside != schedFIFO {
		t.Fatalf("policy inside the transaction: %d, want SCHED_FIFO (%d)", inside, schedFIFO)
	}
	if p, prio := threadPolicy(t); p != 0 || prio != niced {
		t.Fatalf("after the transaction: policy %d, getpriority %d; want SCHED_OTHER and the nice value the thread had (%d)", p, prio, niced)
	}

	// The replay's transaction, whose size a crash sets, runs without it.
	err = s.writeUnbounded(context.Background(), func(*sql.Tx) error {
		inside, _ = threadPolicy(t)
		return nil
	})
	if err != nil || inside != 0 {
		t.Fatalf("unbounded write: policy %d (%v), want SCHED_OTHER", inside, err)
	}
}

func TestARefusedCeilingLeavesWritesAtNormalPrioritySayingWhy(t *testing.T) {
	s := openCeilingStore(t)
	s.ceil.set = func() error { return unix.EPERM }
	state := s.SetLockCeiling(true)
	if s.LockCeilingOn() || !strings.Contains(state, "refused") || !strings.Contains(state, "LimitRTPRIO") {
		t.Fatalf("refused: on=%v, state %q; want off, with the reason and the remedy", s.LockCeilingOn(), state)
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	var inside int
	if err := s.write(context.Background(), func(*sql.Tx) error { inside, _ = threadPolicy(t); return nil }); err != nil || inside != 0 {
		t.Fatalf("write with the ceiling refused: policy %d, %v; want it written at SCHED_OTHER", inside, err)
	}
	if st := s.SetLockCeiling(false); st != "off (turned off)" || s.LockCeilingOn() {
		t.Fatalf("turned off: %q", st)
	}
}

func TestACeilingRefusedMidRunTurnsOffAndTheWriteStillCommits(t *testing.T) {
	s := openCeilingStore(t)
	needCeiling(t, s)
	s.ceil.set = func() error { return unix.EPERM } // e.g. the site lowered RLIMIT_RTPRIO
	err := s.write(context.Background(), func(tx *sql.Tx) error {
		_, err := tx.Exec(`INSERT INTO settings (key, value) VALUES ('ceiling-test', '1')`)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	var v string
	if err := s.w.QueryRow(`SELECT value FROM settings WHERE key = 'ceiling-test'`).Scan(&v); err != nil || v != "1" {
		t.Fatalf("the write: %q, %v", v, err)
	}
	if s.LockCeilingOn() || !strings.Contains(s.LockCeiling(), "refused") {
		t.Fatalf("after a refusal: on=%v, %q", s.LockCeilingOn(), s.LockCeiling())
	}
}

// A thread the store could not return to SCHED_OTHER must never run
// another goroutine: it stays locked to the one that wrote, and the Go
// runtime ends it with that goroutine. (The process's main thread is the
// exception: Go parks it for good instead, so the test tries again until
// the write lands on another thread.)
func TestAThreadLeftRealTimeEndsWithItsGoroutine(t *testing.T) {
	s := openCeilingStore(t)
	needCeiling(t, s)
	for attempt := 1; ; attempt++ {
		s.ceil.reset = thread.SetOther
		s.SetLockCeiling(true)
		s.ceil.reset = func() error { return errors.New("refused for the test") }
		tids := make(chan int, 1)
		done := make(chan error, 1)
		go func() {
			done <- s.write(context.Background(), func(*sql.Tx) error {
				tids <- unix.Gettid()
				return nil
			})
		}()
		tid := <-tids
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		if s.LockCeilingOn() || !strings.Contains(s.LockCeiling(), "could not return") {
			t.Fatalf("after a failed reset: on=%v, %q", s.LockCeilingOn(), s.LockCeiling())
		}
		if tid == os.Getpid() {
			if attempt == 20 {
				t.Skip("every write ran on the main thread")
			}
			continue
		}
		task := "/proc/self/task/" + strconv.Itoa(tid)
		for deadline := time.Now().Add(10 * time.Second); ; {
			if _, err := os.Stat(task); errors.Is(err, os.ErrNotExist) {
				return
			}
			if time.Now().After(deadline) {
				b, _ := os.ReadFile(task + "/sched")
				t.Fatalf("thread %d still runs 10 s after its goroutine ended:\n%s", tid, b)
			}
			runtime.Gosched()
		}
	}
}

func TestTheCeilingLeavesAProcessAlreadyRealTimeAlone(t *testing.T) {
	s := openCeilingStore(t)
	needCeiling(t, s)
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if err := setFIFO(); err != nil {
		t.Fatal(err)
	}
	defer thread.SetOther()
	state := s.SetLockCeiling(true) // probes on this, already real-time, thread
	if s.LockCeilingOn() || !strings.Contains(state, "does not run under SCHED_OTHER") {
		t.Fatalf("under chrt: on=%v, %q; want it off, the site's policy left alone", s.LockCeilingOn(), state)
	}
	if p, _ := threadPolicy(t); p != schedFIFO {
		t.Fatalf("the probe changed the thread's policy to %d", p)
	}
}
