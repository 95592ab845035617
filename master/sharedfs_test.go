package master_test

import (
	"database/sql"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/harvest-hpc/harvest/master"
	"github.com/harvest-hpc/harvest/worker"
)

// twoHosts mounts one directory twice with bindfs (FUSE), without lock
// forwarding: two views with their own kernel caches and no shared file
// locks, as two hosts see a cluster file system. It skips, saying why,
// where FUSE or bindfs is missing, or fails with HARVEST_REQUIRE_FUSE=1
// (scripts/test.sh: CI runs as root with /dev/fuse; scripts/deps.sh
// installs bindfs and fuse3).
func twoHosts(t *testing.T) (a, b string) {
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
func TestTwentyFailoversAcrossTwoHostsLoseNothing(t *testing.T) {
	hosts := [2]string{}
	hosts[0], hosts[1] = twoHosts(t)
	const ttl = time.Second
	const n = 5000
	e := startQueue(t, withTTL(ttl))
	job := e.submit(t, n, 4, nil)
	q := watch(e.Q)
	var ep endpoint
	for _, id := range []string{"w1", "w2", "w3"} {
		// A fixed prefetch, the automatic one's former cap (16 slots'
		// worth): the automatic one holds a round trip's worth of 2 ms
		// tasks, up to 128 slots' worth, and on a loaded machine (slow
		// round trips) the workers then ran hundreds of them through each
		// failover, ending the job before the last one; a prefetch of 4
		// made the last master too slow to finish within its minute there.
		c := fastWorkerConfig(id, 2, worker.SleepRunner{D: 2 * time.Millisecond})
		c.Prefetch = 32
		startWorker(t, c, ep.resolve)
	}
	const failovers = 20
	var last *runningMaster
	for i := 0; i <= failovers; i++ {
		dir := hosts[i%2]
		rm := startMaster(t, q, dir, fmt.Sprintf("p%d", i), nil, nil)
		ep.set(rm.srv.URL)
		if i == failovers {
			last = rm // it finishes the job
			break
		}
		waitFor(t, rm.m, "results through this master", 20*time.Second, func(s master.Stats) bool { return s.Reported >= 30 })
		if j := e.job(t, job.ID); final(j.State) {
			t.Fatalf("the job ended after %d failovers: the test proves less than it says", i)
		}
		partitioned := i%3 == 2
		if partitioned {
			rm.q.cut.Store(true) // the queue is out of reach; the workers still reach it
		} else {
			rm.crash()
		}
		// The queue grants the lease again once it ran out; by then the
		// deposed master has stopped writing on its own.
		select {
		case err := <-rm.done:
			rm.done <- err
			if !errors.Is(err, master.ErrLeaseLost) && !errors.Is(err, master.ErrFenced) {
				t.Fatalf("master %d (partitioned %v) ended with %v, want the lease lost", i, partitioned, err)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("master %d (partitioned %v) still runs 10 s after it lost the queue", i, partitioned)
		}
		e.Clock.Advance(ttl)
	}
	checkDone(t, waitJob(t, e, q, job.ID, 60*time.Second), n)
	if err := last.stop(); err != nil {
		t.Errorf("the last master: %v", err)
	}
	files, _ := filepath.Glob(filepath.Join(hosts[0], "master-*.db"))
	if len(files) != 1 || filepath.Base(files[0]) != master.FileName(int64(failovers+1)) {
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
