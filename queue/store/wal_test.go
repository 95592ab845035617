package store

import (
	"context"
	"database/sql"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// Under a writer that never pauses, the WAL never starts over by itself:
// every PASSIVE checkpoint completes, yet each write transaction begins
// with frames not yet copied, and SQLite restarts the WAL only from a
// write that begins with none. Checkpoint's RESTART starts it over.
func TestCheckpointStartsOverAWALThatABusyWriterKeepsGrowing(t *testing.T) {
	s, _ := openWithFiller(t, 0)
	ctx := context.Background()
	commits, stopWriter := busyWriter(t, s)

	// Without the RESTART (a bound no WAL reaches) the WAL only grows.
	const grow = 4000
	var last CheckpointResult
	for deadline := time.Now().Add(30 * time.Second); last.Frames < grow; {
		r, err := s.checkpoint(ctx, 1<<62)
		if err != nil {
			t.Fatal(err)
		}
		if r.Frames < last.Frames {
			t.Skipf("the WAL started over by itself (%d frames after %d): the writer paused; nothing to show", r.Frames, last.Frames)
		}
		if r.Restarted {
			t.Fatalf("a RESTART under a bound of 2^62 frames: %+v", r)
		}
		last = r
		if time.Now().After(deadline) {
			t.Fatalf("the WAL grew to %d frames only in 30 s (writer: %d commits)", last.Frames, commits.Load())
		}
	}

	// With a bound below it, the checkpoint ends with a RESTART, and the
	// writer's next commit starts the WAL over.
	r, err := s.checkpoint(ctx, grow/2)
	if err != nil {
		t.Fatal(err)
	}
	if !r.Restarted {
		t.Fatalf("no RESTART of a WAL of %d frames over a bound of %d: %+v", r.Frames, grow/2, r)
	}
	c0 := commits.Load()
	stopWriter()
	// The writer may have stopped before its next commit: one more write,
	// the next after the RESTART, starts the WAL over.
	err = s.write(ctx, func(tx *sql.Tx) error {
		_, err := tx.Exec(`INSERT OR REPLACE INTO filler (id, b) VALUES (0, zeroblob(3000))`)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	// The RESTART waited for readers 2 ms at most; the writer's
	// connection has its own busy timeout back.
	var bt int64
	if err := s.w.QueryRow("PRAGMA busy_timeout").Scan(&bt); err != nil || bt != busyTimeout.Milliseconds() {
		t.Fatalf("the writer's busy timeout after a RESTART: %d ms, %v; want %d", bt, err, busyTimeout.Milliseconds())
	}
	after, err := s.checkpoint(ctx, 1<<62)
	if err != nil {
		t.Fatal(err)
	}
	if after.Frames >= r.Frames/2 {
		t.Fatalf("the WAL has %d frames after the RESTART, %d more commits of the writer and one write; it had %d: it did not start over",
			after.Frames, commits.Load()-c0, r.Frames)
	}
	// WALStats reports the last Checkpoint (the WAL under its bound).
	if err := s.Checkpoint(ctx); err != nil {
		t.Fatal(err)
	}
	if ws := s.WALStats(); ws.Checkpoints != 1 || ws.Frames != after.Frames || ws.Bytes != after.Frames*(s.pageSize+walFrameHeader) || ws.Restarts != 0 {
		t.Fatalf("WAL stats %+v after a checkpoint of a WAL of %d frames of %d-byte pages", ws, after.Frames, s.pageSize)
	}
	// The RESTART held the write lock: WriteStats counts it.
	if ws := s.WriteStats(false); ws.Transactions < commits.Load()+2 {
		t.Fatalf("write stats count %d transactions for %d commits and a RESTART", ws.Transactions, commits.Load())
	}
}

// Checkpoint keeps the WAL file allocated walHeadroom past its frames, so
// that commits write inside the file's size, into allocated blocks.
func TestCheckpointKeepsTheWALFileAllocatedAheadOfItsFrames(t *testing.T) {
	s, path := openWithFiller(t, 200)
	ctx := context.Background()
	if err := s.Checkpoint(ctx); err != nil {
		t.Fatal(err)
	}
	ws := s.WALStats()
	if ws.Frames == 0 {
		t.Fatal("no frames in the WAL after 200 commits")
	}
	var st unix.Stat_t
	if err := unix.Stat(path+"-wal", &st); err != nil {
		t.Fatal(err)
	}
	want := ws.Bytes + walHeadroom
	if st.Size < want {
		t.Fatalf("WAL file %d bytes for %d bytes of frames: want at least %d", st.Size, ws.Bytes, want)
	}
	if allocated := st.Blocks * 512; allocated < want {
		t.Fatalf("WAL file %d bytes long but %d allocated (sparse): want %d allocated", st.Size, allocated, want)
	}
	if ws.Allocated != want {
		t.Fatalf("WAL stats say %d allocated, want %d", ws.Allocated, want)
	}
	// The zeros past the frames are not frames: the database reopens
	// with every row.
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s2, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	var n int
	if err := s2.w.QueryRow(`SELECT count(*) FROM filler`).Scan(&n); err != nil || n != 200 {
		t.Fatalf("after reopening: %d rows, %v; want 200", n, err)
	}
}

// busyWriter commits a few pages after another, without a pause, until
// the returned stop (also run at the test's end).
func busyWriter(t *testing.T, s *Store) (*atomic.Int64, func()) {
	t.Helper()
	ctx := context.Background()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var commits atomic.Int64
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			err := s.write(ctx, func(tx *sql.Tx) error {
				_, err := tx.Exec(`INSERT OR REPLACE INTO filler (id, b) VALUES (?, zeroblob(3000))`, i%500)
				return err
			})
			if err != nil {
				t.Error(err)
				return
			}
			commits.Add(1)
		}
	}()
	var once sync.Once
	stopWriter := func() { once.Do(func() { close(stop); wg.Wait() }) }
	t.Cleanup(stopWriter)
	return &commits, stopWriter
}

// pageCache is what the page cache holds of [off, off+n) of the file
// (n 0: to its end), by cachestat(2); the test skips on a kernel without
// it (Linux < 6.5).
func pageCache(t *testing.T, path string, off, n int64) unix.Cachestat_t {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var st unix.Cachestat_t
	if err := unix.Cachestat(uint(f.Fd()), &unix.CachestatRange{Off: uint64(off), Len: uint64(n)}, &st, 0); err != nil {
		if errors.Is(err, unix.ENOSYS) {
			t.Skip("no cachestat(2) on this kernel: the page cache cannot be read")
		}
		t.Fatal(err)
	}
	return st
}

// A restarted WAL's next frames overwrite the old ones from the start of
// the file, and a frame fills no 4 KiB page of it whole: a page the
// kernel had evicted was read from disk inside the commit, write lock
// held. The checkpointer reads the range the next commits write into the
// page cache beforehand.
func TestCheckpointReadsTheWALRangeTheNextCommitsWriteIntoTheCache(t *testing.T) {
	s, path := openWithFiller(t, 0)
	ctx := context.Background()
	// ~13 MB of frames: more than the kernel reads for one readahead
	// request on this VM's disk (8 MiB).
	for i := range 250 {
		err := s.write(ctx, func(tx *sql.Tx) error {
			_, err := tx.Exec(`WITH RECURSIVE n(v) AS (SELECT ?1 UNION ALL SELECT v + 1 FROM n WHERE v < ?1 + 15)
				INSERT INTO filler (id, b) SELECT v, zeroblob(3000) FROM n`, i*16)
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	wal := path + "-wal"
	f, err := os.Open(wal)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		t.Fatal(err)
	}
	size := fi.Size()
	if size < 12<<20 {
		t.Fatalf("a WAL of %d bytes: the test needs one past the kernel's readahead window", size)
	}
	pages := uint64((min(size, walHeadroom) + int64(os.Getpagesize()) - 1) / int64(os.Getpagesize()))
	// Evict the file's pages, as the kernel may (clean ones only: sync
	// first).
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	if err := unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED); err != nil {
		t.Fatal(err)
	}
	if n := pageCache(t, wal, 0, size).Cache; n > pages/10 {
		t.Skipf("the kernel kept %d of the WAL's %d pages in its cache: no eviction to undo", n, pages)
	}

	// A growing WAL: its frames end the file, then the allocation (no old
	// frames to read, only unwritten blocks, which read as zeros).
	s.allocateWAL(size, size)
	s.allocateWAL(size, size)
	if n := pageCache(t, wal, size, walHeadroom).Cache; n > pages/10 {
		t.Fatalf("%d pages of the WAL's allocated, unwritten tail were read into the page cache", n)
	}
	// Then a restarted one: the next frames go from its start on.
	s.allocateWAL(size, 0)
	deadline := time.Now().Add(10 * time.Second) // readahead is started, not awaited
	for {
		n := pageCache(t, wal, 0, min(size, walHeadroom)).Cache
		if n >= pages*9/10 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of the %d pages the next commits write into are in the page cache", n, pages)
		}
		runtime.Gosched()
	}
}

// A PASSIVE checkpoint syncs the database file only when it has copied
// the whole WAL, which a busy writer never lets it do: the pages it copied
// stayed dirty until the RESTART's fsync wrote them all with the write
// lock held. Checkpoint syncs the file after every round that copied
// frames, outside the lock; an idle queue's checkpoints sync nothing.
func TestCheckpointSyncsTheDatabaseFileItWroteUnderABusyWriter(t *testing.T) {
	s, path := openWithFiller(t, 0)
	ctx := context.Background()
	_, stopWriter := busyWriter(t, s)
	for round := 0; round < 20; round++ {
		r, err := s.checkpoint(ctx, 1<<62)
		if err != nil {
			t.Fatal(err)
		}
		// Only checkpoints write the database file (the writer appends
		// to the WAL), and none runs now.
		if d := pageCache(t, path, 0, 0).Dirty; r.Copied > 0 && d > 0 {
			t.Fatalf("round %d copied %d frames and left %d pages of the database file dirty", round, r.Copied, d)
		}
	}
	stopWriter()
	syncs := s.WALStats().DBSyncs
	if syncs == 0 {
		t.Fatal("20 checkpoint rounds under a busy writer never synced the database file")
	}
	// The last frames, then nothing new: no more syncs.
	if _, err := s.checkpoint(ctx, 1<<62); err != nil {
		t.Fatal(err)
	}
	syncs = s.WALStats().DBSyncs
	for range 3 {
		if _, err := s.checkpoint(ctx, 1<<62); err != nil {
			t.Fatal(err)
		}
	}
	if n := s.WALStats().DBSyncs; n != syncs {
		t.Fatalf("checkpoints of a WAL with nothing new synced the database file %d more times", n-syncs)
	}
}

// openWithFiller opens a store in a temporary directory, closed when t
// ends, with a table "filler" (id, b) to write pages into, and rows rows
// of 3,000 bytes already written, one commit each.
func openWithFiller(t *testing.T, rows int) (*Store, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "q.db")
	s, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	if _, err := s.w.Exec(`CREATE TABLE filler (id INTEGER PRIMARY KEY, b BLOB)`); err != nil {
		t.Fatal(err)
	}
	for i := range rows { // a commit each: frames in the WAL
		if _, err := s.w.Exec(`INSERT INTO filler (id, b) VALUES (?, zeroblob(3000))`, i); err != nil {
			t.Fatal(err)
		}
	}
	return s, path
}

// A PASSIVE round that cannot run reports -1 frames (another connection
// holds the checkpoint lock, or a commit was writing the WAL index's
// header). The checkpoint tries it again; when no try runs, Checkpoint
// keeps the last figures instead of a WAL of -1 frames.
func TestCheckpointTriesAgainARoundThatCannotRun(t *testing.T) {
	s, _ := openWithFiller(t, 50)
	ctx := context.Background()
	real := s.wal.passive
	var calls, failing int
	s.wal.passive = func(ctx context.Context) (int64, int64, int64, error) {
		calls++
		if calls <= failing {
			return 1, -1, -1, nil
		}
		return real(ctx)
	}

	// Two rounds that cannot run, then one that does.
	failing = 2
	if err := s.Checkpoint(ctx); err != nil {
		t.Fatal(err)
	}
	ws := s.WALStats()
	if calls != 3 || ws.Frames <= 0 || ws.Bytes != ws.Frames*(s.pageSize+walFrameHeader) || ws.Checkpoints != 1 || ws.Busy != 0 {
		t.Fatalf("after 2 busy tries and a round: %d calls, stats %+v", calls, ws)
	}

	// No try runs: the figures stay those of the last checkpoint.
	calls, failing = 0, walBusyTries
	if err := s.Checkpoint(ctx); err != nil {
		t.Fatal(err)
	}
	after := s.WALStats()
	if calls != walBusyTries || after.Busy != 1 || after.Frames != ws.Frames || after.Bytes != ws.Bytes || after.Checkpoints != ws.Checkpoints {
		t.Fatalf("after %d busy tries: %d calls, stats %+v (before: %+v)", walBusyTries, calls, after, ws)
	}
	calls = 0
	r, err := s.checkpoint(ctx, 1)
	if err != nil || r.Restarted || r.Rounds != 0 {
		t.Fatalf("checkpoint with every try busy: %+v, %v; want no round and no RESTART", r, err)
	}
}

// checkpointSkips waits until about walQuietFrames would have been
// written, never past walMaxSkips ticks, and not at all under load.
func TestCheckpointSkipsFollowTheWALsGrowth(t *testing.T) {
	for _, c := range []struct {
		frames int64
		gap    int
		want   int
	}{
		{0, 1, walMaxSkips},              // idle
		{1000, 1, walMaxSkips},           // 8 ticks to fill: capped
		{walQuietFrames / 2, 1, 1},       // 2 ticks to fill
		{walQuietFrames, 1, 0},           // one tick fills it
		{20 * walQuietFrames, 1, 0},      // full load
		{walQuietFrames, 5, walMaxSkips}, // 5 ticks per quiet WAL: 4 skipped
		{3 * walQuietFrames / 2, 3, 1},   // 2 ticks per quiet WAL
		{-1, 1, walMaxSkips},             // no figure
	} {
		if got := checkpointSkips(c.frames, c.gap); got != c.want {
			t.Errorf("checkpointSkips(%d frames, %d ticks) = %d, want %d", c.frames, c.gap, got, c.want)
		}
	}
}

// CheckpointTick passes over ticks while the WAL grows slowly, checkpoints
// every tick under load, and tries again at the next tick a checkpoint
// whose round could not run.
func TestCheckpointTickPacesByTheWALsGrowth(t *testing.T) {
	s, _ := openWithFiller(t, 0)
	ctx := context.Background()
	var calls int
	var frames int64
	s.wal.passive = func(ctx context.Context) (int64, int64, int64, error) {
		calls++
		return 0, frames, frames, nil
	}
	tick := func() {
		t.Helper()
		if err := s.CheckpointTick(ctx); err != nil {
			t.Fatal(err)
		}
	}
	frames = 1000 // a slow WAL: the next walMaxSkips ticks pass
	tick()
	for range walMaxSkips {
		tick()
	}
	if calls != 1 {
		t.Fatalf("%d rounds over 1 + %d ticks of a slow WAL, want 1", calls, walMaxSkips)
	}
	frames = 4 * walQuietFrames // the next tick checkpoints, and every one after (under walRestartBytes: one round each)
	tick()
	tick()
	tick()
	if calls != 4 || s.WALStats().Checkpoints != 4 {
		t.Fatalf("%d rounds (%d checkpoints), want 4: one per tick under load", calls, s.WALStats().Checkpoints)
	}
	frames = -1 // the round cannot run: no pace learnt from it, the next tick tries again
	tick()
	if calls != 4+walBusyTries {
		t.Fatalf("%d rounds after a busy checkpoint, want %d", calls, 4+walBusyTries)
	}
	frames = walQuietFrames
	tick()
	if calls != 5+walBusyTries {
		t.Fatalf("%d rounds, want %d: a busy checkpoint does not pace the next tick", calls, 5+walBusyTries)
	}
}
