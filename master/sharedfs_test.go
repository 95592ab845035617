package master_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/harvest-hpc/harvest/master"
	"github.com/harvest-hpc/harvest/pilotproto"
	"github.com/harvest-hpc/harvest/worker"
)

// twoHosts mounts one directory twice with bindfs (FUSE), without lock
// forwarding: two views with their own kernel caches and no shared file
// locks, as two hosts see a cluster file system. It skips, saying why,
// where FUSE or bindfs is missing, or fails with HARVEST_REQUIRE_FUSE=1
// (scripts/test.sh: CI runs as root with /dev/fuse; scripts/deps.sh
// installs bindfs and fuse3).
func twoHosts(t testing.TB) (a, b string) {
	t.Helper()
	if testing.Short() {
		t.Skip("mounts FUSE file systems")
	}
	skip := t.Skipf
	if os.Getenv("HARVEST_REQUIRE_FUSE") == "1" { // CI: a missing FUSE is a failure, not a skip
		skip = t.Fatalf
	}
	if _, err := os.Stat("/dev/fuse"); err != nil {
		skip("no FUSE here (%v): the two-host checkpoint tests need /dev/fuse and bindfs", err)
	}
	bindfs, err := exec.LookPath("bindfs")
	if err != nil {
		skip("bindfs is not installed (apt-get install bindfs fuse3, or scripts/deps.sh): the two-host checkpoint tests need it")
	}
	back := t.TempDir()
	var mnts []string
	for range 2 {
		m := t.TempDir()
		if out, err := exec.Command(bindfs, "--no-allow-other", back, m).CombinedOutput(); err != nil {
			skip("cannot mount FUSE here (bindfs: %v: %s): the two-host checkpoint tests need it", err, out)
		}
		t.Cleanup(func() {
			if out, err := exec.Command("umount", m).CombinedOutput(); err != nil {
				t.Errorf("umount %s: %v %s", m, err, out)
			}
		})
		mnts = append(mnts, m)
	}
	// The mounts must be views of one directory.
	if err := os.WriteFile(filepath.Join(mnts[0], "probe"), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(mnts[1], "probe")); err != nil {
		t.Fatalf("the second mount does not see the first's file: %v", err)
	}
	os.Remove(filepath.Join(mnts[0], "probe"))
	return mnts[0], mnts[1]
}

// TestTwentyFailoversAcrossTwoHostsLoseNothing is issue 31's two-mount
// test: 20 masters in turn, each on the other mount from its predecessor
// (another host), each deposed mid-run: killed (unreachable at once) or
// partitioned from the queue while it goes on serving its workers. The
// deposed master stops writing when its lease may be over (it cannot
// renew), which is when the queue grants the lease again; its successor
// copies its file through the other mount, without a lock, and removes
// it. The job ends with every task done once, every checkpoint file left
// passes SQLite's integrity check, and a deposed master never ends
// cleanly (it learnt it lost its lease).
//
// Nothing in it races the machine's speed:
//   - How far the job gets under each master is set by the test: the
//     workers start tasks from a budget it hands out, a share per master,
//     and every share before the last master's adds up to less than the
//     job. (The workers ran as fast as they could, and on a loaded machine
//     ran the 5,000 tasks through fewer than 20 failovers; the prefetch
//     tuned against that left the last master too little time.)
//   - A master that stops on its own before the test deposes it (on a
//     loaded machine no renewal may answer within the 1 s lease's hold,
//     and it must stop writing then) is one more failover, not a failure:
//     it must have stopped for its lease, and a successor takes over as
//     for a deposed one: at most maxSelfStops times before the last
//     master (each gets a share), and after, as long as the job moves
//     (maxIdleStops masters in a row that report nothing fail the test).
func TestTwentyFailoversAcrossTwoHostsLoseNothing(t *testing.T) {
	hosts := [2]string{}
	hosts[0], hosts[1] = twoHosts(t)
	const ttl = time.Second
	const n = 5000
	e := startQueue(t, withTTL(ttl))
	job := e.submit(t, n, 4, nil)
	q := watch(e.Q)
	var ep endpoint
	starts := newBudget()
	for _, id := range []string{"w1", "w2", "w3"} {
		c := fastWorkerConfig(id, 2, gatedRunner{starts, worker.SleepRunner{D: 2 * time.Millisecond}})
		c.Prefetch = 32
		startWorker(t, c, ep.resolve)
	}
	const failovers = 20
	const maxSelfStops = 10
	const maxIdleStops = 5
	// Each master's share of task starts: enough for its 30 results; all
	// the shares before the last master's are less than the job.
	const share = 100
	if (failovers+maxSelfStops)*share >= n {
		t.Fatalf("the shares before the last master (%d) would cover the job (%d)", (failovers+maxSelfStops)*share, n)
	}
	deposed, selfStops, lastStops, idleStops := 0, 0, 0, 0
	var last *runningMaster
	var epoch int64
	for last == nil {
		epoch++ // the queue grants epochs 1, 2, ...
		rm := startMaster(t, q, hosts[epoch%2], fmt.Sprintf("p%d", epoch), nil, nil)
		ep.set(rm.srv.URL)
		var err error
		if deposed == failovers {
			starts.unlimit()
			if _, ok := waitJobOrStop(t, e, q, rm.m.Done(), job.ID, 3*time.Minute); ok {
				last = rm // it finished the job
				break
			}
			err = master.ErrStopped
		} else {
			starts.add(share)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			err = rm.m.WaitFor(ctx, func(s master.Stats) bool { return s.Reported >= 30 })
			cancel()
		}
		if err != nil {
			if !errors.Is(err, master.ErrStopped) {
				t.Fatalf("master %d: %v", epoch, err)
			}
			// It stopped on its own: for its lease, and nothing is lost.
			if err := <-rm.done; !errors.Is(err, master.ErrLeaseLost) && !errors.Is(err, master.ErrFenced) {
				t.Fatalf("master %d stopped on its own with %v, want the lease lost", epoch, err)
			}
			rm.done <- err
			switch {
			case deposed < failovers:
				if selfStops++; selfStops > maxSelfStops {
					t.Fatalf("%d masters stopped on their own for their lease: this machine cannot renew a %s lease", selfStops, ttl)
				}
			case rm.m.Stats().Reported == 0:
				lastStops++
				if idleStops++; idleStops >= maxIdleStops {
					t.Fatalf("%d masters in a row stopped for their lease without reporting a result: the job does not move", idleStops)
				}
			default:
				lastStops++
				idleStops = 0
			}
			t.Logf("master %d stopped on its own (lease not renewed in time): one more failover", epoch)
			e.Clock.Advance(ttl)
			continue
		}
		if j := e.job(t, job.ID); final(j.State) {
			t.Fatalf("the job ended after %d failovers: the test proves less than it says", deposed)
		}
		partitioned := deposed%3 == 2
		if partitioned {
			rm.q.cut.Store(true) // the queue is out of reach; the workers still reach it
		} else {
			rm.crash()
		}
		deposed++
		// The queue grants the lease again once it ran out; by then the
		// deposed master has stopped writing on its own.
		select {
		case err := <-rm.done:
			rm.done <- err
			if !errors.Is(err, master.ErrLeaseLost) && !errors.Is(err, master.ErrFenced) {
				t.Fatalf("master %d (partitioned %v) ended with %v, want the lease lost", epoch, partitioned, err)
			}
		case <-time.After(30 * time.Second):
			t.Fatalf("master %d (partitioned %v) still runs 30 s after it lost the queue", epoch, partitioned)
		}
		e.Clock.Advance(ttl)
	}
	checkDone(t, e.job(t, job.ID), n)
	if err := last.stop(); err != nil {
		t.Errorf("the last master: %v", err)
	}
	t.Logf("%d masters deposed, %d stopped on their own before the last, %d after", deposed, selfStops, lastStops)
	files, _ := filepath.Glob(filepath.Join(hosts[0], "master-*.db"))
	if len(files) != 1 || filepath.Base(files[0]) != master.FileName(epoch) {
		t.Errorf("checkpoint files left: %v, want the last epoch's only", files)
	}
	for _, f := range files {
		db, err := sql.Open("sqlite3", "file:"+f+"?mode=ro&immutable=1")
		if err != nil {
			t.Fatal(err)
		}
		var ok string
		if err := db.QueryRow(`PRAGMA integrity_check`).Scan(&ok); err != nil || ok != "ok" {
			t.Errorf("%s: integrity check %q %v", f, ok, err)
		}
		db.Close()
	}
}

// budget is how many tasks the workers may start: a test hands out
// shares of it, so how far a job gets is its choice, not the machine's
// speed.
type budget struct {
	mu        sync.Mutex
	left      int
	unlimited bool
	more      chan struct{} // closed when left grows
}

func newBudget() *budget { return &budget{more: make(chan struct{})} }

func (b *budget) add(n int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.left += n
	close(b.more)
	b.more = make(chan struct{})
}

// unlimit lets every task start from now on.
func (b *budget) unlimit() {
	b.mu.Lock()
	b.unlimited = true
	b.mu.Unlock()
	b.add(0)
}

// take waits for a start (false: ctx ended first).
func (b *budget) take(ctx context.Context) bool {
	for {
		b.mu.Lock()
		if b.unlimited || b.left > 0 {
			if !b.unlimited {
				b.left--
			}
			b.mu.Unlock()
			return true
		}
		more := b.more
		b.mu.Unlock()
		select {
		case <-more:
		case <-ctx.Done():
			return false
		}
	}
}

// gatedRunner runs a task once its budget lets it start; until then the
// task is held by its worker as running, through any failover.
type gatedRunner struct {
	starts *budget
	r      worker.Runner
}

func (g gatedRunner) Run(ctx context.Context, t pilotproto.Task) worker.Outcome {
	start := time.Now()
	if !g.starts.take(ctx) {
		return worker.Outcome{Status: pilotproto.StatusFailed, ExitCode: -1, StartedAt: start, Duration: time.Since(start)}
	}
	return g.r.Run(ctx, t)
}
