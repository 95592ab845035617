package worker

import (
	"testing"
	"time"
)

// The job cache closed a job's files (its runner's Close waits for the
// runner to end; its temporary root is removed whole) with its lock held,
// so one job's end held up every other job's tasks at acquire. Each path
// that lets a job go (a stale job's last release, eviction, closeAll) must
// close it with the lock free, and exactly once.
func TestTheJobCacheClosesJobsWithItsLockFree(t *testing.T) {
	c := &jobCache{m: map[string]*jobFiles{}}
	closed := map[*jobFiles]int{}
	old := closeJob
	t.Cleanup(func() { closeJob = old })
	closeJob = func(j *jobFiles) {
		if !c.mu.TryLock() {
			t.Errorf("job %s closed with the cache's lock held", j.key)
			return
		}
		c.mu.Unlock()
		closed[j]++
	}
	long := time.Now().Add(-2 * jobIdle)
	stale := &jobFiles{key: "stale", refs: 1}
	idle := &jobFiles{key: "idle", idle: long}
	busy := &jobFiles{key: "busy", refs: 1}
	kept := &jobFiles{key: "kept", refs: 1}
	for _, j := range []*jobFiles{stale, idle, busy, kept} {
		c.m[j.key] = j
	}
	// The stale job's last release closes it, and evicts the idle one.
	c.release(stale, true)
	if closed[stale] != 1 || closed[idle] != 1 {
		t.Fatalf("after the stale job's release: closed %d and %d times, want 1 and 1", closed[stale], closed[idle])
	}
	if _, ok := c.m["idle"]; ok {
		t.Error("the idle job is still handed out")
	}
	// closeAll closes what no task uses; a busy job closes at its release.
	c.release(kept, false)
	c.closeAll()
	if closed[kept] != 1 || closed[busy] != 0 {
		t.Fatalf("closeAll: the released job closed %d times, the busy one %d; want 1 and 0", closed[kept], closed[busy])
	}
	c.release(busy, false)
	if closed[busy] != 1 || closed[stale] != 1 || closed[idle] != 1 {
		t.Errorf("closes: busy %d, stale %d, idle %d; want each once", closed[busy], closed[stale], closed[idle])
	}
}
