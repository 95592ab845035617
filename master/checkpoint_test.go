package master_test

import (
	"bufio"
	"database/sql"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/harvest-hpc/harvest/capacity"
	"github.com/harvest-hpc/harvest/internal/tinyfs"
	"github.com/harvest-hpc/harvest/master"
	"github.com/harvest-hpc/harvest/master/core"
	"github.com/harvest-hpc/harvest/pilotproto"
)

func addOp(id int64) core.Op {
	return core.Op{Kind: core.OpAdd, Ref: pilotproto.TaskRef{TaskID: id, Attempt: 1}, Task: &pilotproto.Task{ID: id, JobID: 7, Attempt: 1, BatchSize: 2}}
}

// The checkpoint and its rollback journal (kept between commits in
// TRUNCATE mode, and left behind by a kill -9) hold users' commands and
// entries: neither is readable by other users, whatever the umask.
func TestCheckpointAndJournalAreOwnerOnly(t *testing.T) {
	old := syscall.Umask(0o022)
	defer syscall.Umask(old)
	dir := t.TempDir()
	c, _, err := master.OpenCheckpoint(dir, 1, master.DefaultJournal)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.Commit([]core.Op{addOp(1)}); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"master-1.db", "master-1.db-journal"} {
		fi, err := os.Stat(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err) // TRUNCATE, the default, keeps the journal
		}
		if fi.Mode().Perm() != 0o600 {
			t.Errorf("%s has mode %v, want 0600", name, fi.Mode().Perm())
		}
	}
}

// TestEachEpochWritesItsOwnFile: epoch 2 copies epoch 1's file into its
// own and removes 1's; epoch 1, still running, is fenced at its next
// commit, and nothing of it reaches epoch 2's file.
func TestEachEpochWritesItsOwnFile(t *testing.T) {
	dir := t.TempDir()
	one, _, err := master.OpenCheckpoint(dir, 1, master.DefaultJournal)
	if err != nil {
		t.Fatal(err)
	}
	defer one.Close()
	if err := one.Commit([]core.Op{addOp(1), addOp(2)}); err != nil {
		t.Fatal(err)
	}
	two, info, err := master.OpenCheckpoint(dir, 2, master.DefaultJournal)
	if err != nil {
		t.Fatal(err)
	}
	defer two.Close()
	if info.From != filepath.Join(dir, "master-1.db") || len(info.Removed) == 0 {
		t.Fatalf("restored %+v, want from master-1.db and it removed", info)
	}
	if _, err := os.Stat(filepath.Join(dir, "master-1.db")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the superseded file is still there: %v", err)
	}
	// The deposed master goes on (a partitioned host): its next commit
	// finds its file superseded and writes nothing.
	if err := one.Commit([]core.Op{addOp(3)}); !errors.Is(err, master.ErrFenced) {
		t.Fatalf("commit of the deposed epoch 1: %v, want ErrFenced", err)
	}
	rows, _, err := two.Load()
	if err != nil || len(rows) != 2 || rows[0].Task.ID != 1 || rows[1].Task.ID != 2 {
		t.Fatalf("epoch 2 holds %+v %v, want tasks 1 and 2 only", rows, err)
	}
	// A master of an older epoch that starts late finds a newer file.
	if _, _, err := master.OpenCheckpoint(dir, 1, master.DefaultJournal); !errors.Is(err, master.ErrFenced) {
		t.Fatalf("open of epoch 1 after 2: %v, want ErrFenced", err)
	}
}

// TestAMasterStopsWritingWhenItsLeaseMayBeOver: after HoldUntil's time
// nothing is written.
func TestAMasterStopsWritingWhenItsLeaseMayBeOver(t *testing.T) {
	dir := t.TempDir()
	c, _, err := master.OpenCheckpoint(dir, 1, master.DefaultJournal)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.HoldUntil(time.Now().Add(time.Hour))
	if err := c.Commit([]core.Op{addOp(1)}); err != nil {
		t.Fatal(err)
	}
	c2, _, err := master.OpenCheckpoint(t.TempDir(), 1, master.DefaultJournal)
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	c2.HoldUntil(time.Now().Add(-time.Millisecond))
	if err := c2.Commit([]core.Op{addOp(1)}); !errors.Is(err, master.ErrLeaseLost) {
		t.Fatalf("commit after the hold: %v, want ErrLeaseLost", err)
	}
	if rows, _, _ := c2.Load(); len(rows) != 0 {
		t.Fatalf("written after the hold: %+v", rows)
	}
}

// TestWALIsRefused: the shared directory takes a rollback journal only.
func TestWALIsRefused(t *testing.T) {
	_, _, err := master.OpenCheckpoint(t.TempDir(), 1, "WAL")
	if err == nil || !strings.Contains(err.Error(), "shared memory") {
		t.Fatalf("WAL: %v, want a refusal that says why", err)
	}
}

// TestAHotJournalOfTheDeadMasterIsRolledBack: a master killed inside a
// commit leaves a hot journal; its successor reads the file as it was
// before that commit, not half of it (immutable alone would ignore the
// journal). The killed writer is a child process, killed with SIGKILL
// while its transaction has spilled pages into the file.
func TestAHotJournalOfTheDeadMasterIsRolledBack(t *testing.T) {
	if path := os.Getenv("HARVEST_TEST_HOT_JOURNAL"); path != "" {
		halfCommit(path) // the child: never returns
	}
	dir := t.TempDir()
	one, _, err := master.OpenCheckpoint(dir, 1, "DELETE")
	if err != nil {
		t.Fatal(err)
	}
	if err := one.Commit([]core.Op{addOp(1)}); err != nil {
		t.Fatal(err)
	}
	one.Close()
	path := filepath.Join(dir, "master-1.db")
	child := exec.Command(os.Args[0], "-test.run=^TestAHotJournalOfTheDeadMasterIsRolledBack$")
	child.Env = append(os.Environ(), "HARVEST_TEST_HOT_JOURNAL="+path)
	out, err := child.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil || line != "spilled\n" {
		child.Process.Kill()
		child.Wait()
		t.Fatalf("the writer did not get inside its commit: %q %v", line, err)
	}
	child.Process.Signal(syscall.SIGKILL)
	child.Wait()
	if fi, err := os.Stat(path + "-journal"); err != nil || fi.Size() == 0 {
		t.Fatalf("no hot journal after the kill: %v", err)
	}
	two, info, err := master.OpenCheckpoint(dir, 2, master.DefaultJournal)
	if err != nil {
		t.Fatal(err)
	}
	defer two.Close()
	if !info.Journal {
		t.Fatalf("restore %+v: the hot journal was not rolled back", info)
	}
	rows, _, err := two.Load()
	if err != nil || len(rows) != 1 || rows[0].Task.ID != 1 {
		t.Fatalf("epoch 2 holds %d rows %v, want task 1 only", len(rows), err)
	}
}

// halfCommit writes a transaction too large for a one-page cache (SQLite
// spills its pages into the file before the commit, the journal holding
// the pages before), says so, and waits to be killed.
func halfCommit(path string) {
	db, err := sql.Open("sqlite3", "file:"+path+"?_journal_mode=DELETE&_cache_size=1")
	if err != nil {
		panic(err)
	}
	db.SetMaxOpenConns(1)
	tx, err := db.Begin()
	if err != nil {
		panic(err)
	}
	big := strings.Repeat("x", 4000)
	for i := 0; i < 500; i++ {
		if _, err := tx.Exec(`INSERT INTO grants (id, job_id, attempt, first, body) VALUES (?, 1, 1, ?, ?)`, 100+i, 100+i, `{"id":1000,"name":"`+big+`"}`); err != nil {
			panic(err)
		}
	}
	os.Stdout.WriteString("spilled\n")
	select {}
}

// v99 is a checkpoint file of a newer harvest.
const v99 = `CREATE TABLE meta (k TEXT PRIMARY KEY, v INTEGER NOT NULL); PRAGMA user_version = 99;`

func TestACheckpointOfANewerHarvestIsRefusedAndLeftAlone(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "master-1.db")
	db, err := sql.Open("sqlite3", path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(v99); err != nil {
		t.Fatal(err)
	}
	db.Close()
	if _, _, err := master.OpenCheckpoint(dir, 2, master.DefaultJournal); !errors.Is(err, master.ErrCheckpointVersion) {
		t.Fatalf("open after a version-99 checkpoint: got %v, want ErrCheckpointVersion", err)
	}
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("the refused checkpoint is gone: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "master-2.db")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a file for epoch 2 was made from a refused one: %v", err)
	}
}

func TestEstimatesAndCapacityCarryOverToTheNextEpoch(t *testing.T) {
	dir := t.TempDir()
	c, _, err := master.OpenCheckpoint(dir, 1, master.DefaultJournal)
	if err != nil {
		t.Fatal(err)
	}
	e := core.Estimator{}
	e.Observe(3e9)
	ctl := capacity.New(capacity.DefaultConfig())
	ctl.Step([]capacity.Sample{{Job: 1, Size: 4, Duration: 1e10}, {Job: 1, Size: 4, Duration: 1e10}, {Job: 1, Size: 4, Duration: 1e10},
		{Job: 1, Size: 4, Duration: 1e10}, {Job: 1, Size: 4, Duration: 1e10}})
	st := ctl.State()
	if err := c.Commit([]core.Op{{Kind: core.OpEstimate, Job: 7, Est: &e}, {Kind: core.OpCapacity, Capacity: &st}}); err != nil {
		t.Fatal(err)
	}
	c.Close()
	c, _, err = master.OpenCheckpoint(dir, 5, master.DefaultJournal)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, est, _ := c.Load(); est[7] != e {
		t.Fatalf("estimate stored %+v, read back %+v", e, est[7])
	}
	got, err := c.LoadCapacity()
	if err != nil || got == nil || got.Good != 4 || got.Phase != capacity.Grow || got.Baseline[1] != 10 {
		t.Fatalf("capacity state read back %+v %v", got, err)
	}
}

// TestAPartitionedMasterStopsWritingBeforeItsLeaseCanBeGranted: a master
// cut off from the queue (its host partitioned) keeps serving its
// workers, but ends with ErrLeaseLost within the hold (3/4 of the TTL
// after its last renewal's request), before the queue can grant the
// lease to a successor that would read its file.
func TestAPartitionedMasterStopsWritingBeforeItsLeaseCanBeGranted(t *testing.T) {
	const ttl = time.Second
	e := startQueue(t, withTTL(ttl))
	e.submit(t, 50, 5, nil)
	rm := startMaster(t, watch(e.Q), t.TempDir(), "pA", nil, nil)
	waitFor(t, rm.m, "a renewal", 5*time.Second, func(s master.Stats) bool { return s.Pending > 0 })
	cut := time.Now()
	rm.q.cut.Store(true)
	select {
	case err := <-rm.done:
		rm.done <- err
		if !errors.Is(err, master.ErrLeaseLost) {
			t.Fatalf("the partitioned master ended with %v, want ErrLeaseLost", err)
		}
		t.Logf("stopped %s after the cut (hold: 3/4 of the %s TTL after the last renewal's request)", time.Since(cut).Round(time.Millisecond), ttl)
	case <-time.After(10 * time.Second):
		t.Fatal("the partitioned master still runs 10 s after the cut")
	}
}

// TestAFullStateDirectoryFailsTheOpenCleanly (found by the audit): a master
// whose state directory was full left master-N.db and its journal behind
// at every try, a file the next epoch then took for the newest checkpoint,
// and said nothing about the disk. The open says the state directory is
// full or read-only (ErrStateDir, the directory, the errno), leaves no
// file of its epoch, and a later epoch restores from the last good one.
func TestAFullStateDirectoryFailsTheOpenCleanly(t *testing.T) {
	dir := tinyfs.Mount(t, "512k")
	one, _, err := master.OpenCheckpoint(dir, 1, master.DefaultJournal)
	if err != nil {
		t.Fatal(err)
	}
	if err := one.Commit([]core.Op{addOp(1), addOp(2)}); err != nil {
		t.Fatal(err)
	}
	one.Close()
	files := func() []string {
		ents, _ := os.ReadDir(dir)
		var names []string
		for _, e := range ents {
			if e.Name() != "filler" {
				names = append(names, e.Name())
			}
		}
		return names
	}
	free := tinyfs.Fill(t, dir)
	for _, epoch := range []int64{2, 3} {
		_, _, err := master.OpenCheckpoint(dir, epoch, master.DefaultJournal)
		if !errors.Is(err, master.ErrStateDir) || !strings.Contains(err.Error(), dir) || !strings.Contains(err.Error(), syscall.ENOSPC.Error()) {
			t.Fatalf("open of epoch %d in a full directory: %v, want ErrStateDir naming %s and %q", epoch, err, dir, syscall.ENOSPC.Error())
		}
		for _, name := range files() {
			if !strings.HasPrefix(name, "master-1.db") {
				t.Fatalf("after the failed open of epoch %d the directory holds %v, want epoch 1's files only", epoch, files())
			}
		}
	}
	free()
	four, info, err := master.OpenCheckpoint(dir, 4, master.DefaultJournal)
	if err != nil {
		t.Fatal(err)
	}
	defer four.Close()
	rows, _, err := four.Load()
	if info.From != filepath.Join(dir, "master-1.db") || err != nil || len(rows) != 2 {
		t.Fatalf("epoch 4 restored from %s: %d tasks, %v; want master-1.db's 2", info.From, len(rows), err)
	}
	four.Close()
	// Unwritable after start: the file system went read-only.
	tinyfs.ReadOnly(t, dir)
	if _, _, err := master.OpenCheckpoint(dir, 5, master.DefaultJournal); !errors.Is(err, master.ErrStateDir) || !strings.Contains(err.Error(), syscall.EROFS.Error()) {
		t.Fatalf("open of epoch 5 in a read-only directory: %v, want ErrStateDir and %q", err, syscall.EROFS.Error())
	}
}

// A fresh state directory that is full keeps no file of the failed epoch.
func TestAFullEmptyStateDirectoryKeepsNoFile(t *testing.T) {
	dir := tinyfs.Mount(t, "64k")
	tinyfs.Fill(t, dir)
	_, _, err := master.OpenCheckpoint(dir, 1, master.DefaultJournal)
	if !errors.Is(err, master.ErrStateDir) || !strings.Contains(err.Error(), syscall.ENOSPC.Error()) {
		t.Fatalf("open in a full directory: %v, want ErrStateDir and %q", err, syscall.ENOSPC.Error())
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 1 {
		t.Fatalf("the directory holds %v, want the filler only", ents)
	}
}
