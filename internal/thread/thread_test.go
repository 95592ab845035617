package thread

import (
	"errors"
	"runtime"
	"syscall"
	"testing"
	"time"
)

func TestUsageCountsTheThreadsOwnCPUTime(t *testing.T) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	u0 := Usage()
	for deadline := time.Now().Add(20 * time.Millisecond); time.Now().Before(deadline); {
	}
	busy := Usage().Since(u0)
	// Blocked (on a channel, so the thread sleeps in the kernel) while
	// another thread computes 20 ms of its own CPU time: waits on that
	// event, not on a clock.
	done := make(chan struct{})
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		for c0 := Usage().CPU; Usage().CPU-c0 < 20*time.Millisecond; {
		}
		close(done)
	}()
	u1 := Usage()
	<-done
	idle := Usage().Since(u1)
	if busy.CPU < 5*time.Millisecond || busy.CPU > time.Second {
		t.Errorf("20 ms of spinning: %s of the thread's CPU", busy.CPU)
	}
	// Blocking costs the thread next to nothing of its CPU clock.
	if idle.CPU > 5*time.Millisecond {
		t.Errorf("blocked while another thread computed 20 ms: %s of this thread's CPU", idle.CPU)
	}
}

func TestSetFIFOAndBack(t *testing.T) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if p, err := Policy(); err != nil || p != 0 {
		t.Skipf("thread policy %d, %v: not SCHED_OTHER", p, err)
	}
	if err := SetFIFO(1); err != nil {
		if errors.Is(err, syscall.EPERM) {
			t.Skip("SCHED_FIFO refused: no CAP_SYS_NICE")
		}
		t.Fatal(err)
	}
	if p, err := Policy(); err != nil || p != 1 /* SCHED_FIFO */ {
		t.Errorf("after SetFIFO: policy %d, %v", p, err)
	}
	if err := SetOther(); err != nil {
		runtime.LockOSThread() // stays real-time: ends with the goroutine
		t.Fatal(err)
	}
	if p, err := Policy(); err != nil || p != 0 {
		t.Errorf("after SetOther: policy %d, %v", p, err)
	}
}
