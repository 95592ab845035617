package store

import (
	"context"
	"database/sql/driver"
	"errors"
	"fmt"
	"os"
	"runtime"
	"time"

	"golang.org/x/sys/unix"
)

// The WAL's size. SQLite starts the WAL over from its beginning only when
// a write transaction begins with every frame already copied into the
// database file (its read snapshot then needs no frame). The queue's
// writer commits every millisecond or two, faster than a checkpoint
// copies, so under steady load that moment never comes: every PASSIVE
// checkpoint completed, and the WAL still grew by ~16 MB/s in `harvest
// bench dispatch` (90 MB after 5 s), without bound. Past walRestartBytes,
// Checkpoint therefore ends the WAL with a RESTART checkpoint, after
// PASSIVE rounds have copied all but the last few frames.
//
// The RESTART holds the write lock while it copies those frames and
// syncs the WAL and the database file. With the database file synced by
// the checkpointer after every round (syncDB), that is 0.8-3.7 ms on the
// shared 2-core machine under full load (8-56 ms before, when the fsync
// wrote every page copied since the last restart). The bound is large
// rather than tight all the same: at the bench's full load the WAL is
// started over about every 8 s, and at a site's usual load SQLite starts
// it over by itself in the first pause of the writer.
const (
	walRestartBytes = 128 << 20
	// walSettledFrames: PASSIVE rounds repeat until fewer frames than
	// this were committed during the last one, so that the RESTART
	// copies little.
	walSettledFrames = 512
	walMaxRounds     = 4
	// walBusyTries bounds the tries of a PASSIVE round that cannot run
	// (passiveRound), walBusyPause spaces them.
	walBusyTries = 5
	walBusyPause = time.Millisecond
	// walSizeLimit is SQLite's journal_size_limit: after a restart the
	// first commit truncates a WAL file larger than this (a burst's).
	// Twice the bound: a WAL started over at walRestartBytes is reused in
	// place (its blocks allocated), not truncated at every restart.
	walSizeLimit = 2 * walRestartBytes
	// walRestartReaderWait is how long a RESTART waits for readers of
	// old frames to finish, with the write lock held; past it the WAL is
	// started over at a later checkpoint.
	walRestartReaderWait = 2 * time.Millisecond
	// walFrameHeader is the bytes a WAL frame adds to its page.
	walFrameHeader = 24
)

// WALStats says how large the WAL was at the last checkpoint and how
// often Checkpoint started it over.
type WALStats struct {
	Frames      int64 // frames in the WAL at the last checkpoint
	Bytes       int64 // the same in bytes
	Restarts    int64 // RESTART checkpoints that let the WAL start over
	Allocated   int64 // bytes the WAL file was last allocated to (allocateWAL)
	Checkpoints int64
	// Busy counts the checkpoints that could not run a round (passiveRound
	// tried walBusyTries times); the figures above are from the last one
	// that could.
	Busy int64
	// DBSyncs counts the checkpointer's syncs of the database file
	// (syncDB), DBSyncTime their time: neither holds the write lock.
	DBSyncs    int64
	DBSyncTime time.Duration
}

// CheckpointResult says what a Checkpoint did.
type CheckpointResult struct {
	Frames    int64 // frames in the WAL when the last round began
	Copied    int64 // of those, copied into the database file
	Rounds    int   // PASSIVE rounds
	Restarted bool  // a RESTART let the next write start the WAL over
}

// Checkpoint copies the WAL into the database file from a connection of
// its own (PASSIVE: no write lock); a WAL of walRestartBytes or more is
// then started over (see walRestartBytes).
func (s *Store) Checkpoint(ctx context.Context) error {
	r, err := s.checkpoint(ctx, walRestartBytes/(s.pageSize+walFrameHeader))
	if err != nil {
		return err
	}
	if r.Frames < 0 {
		// No round could run: the figures stay the last known ones (a
		// WAL of -1 frames would be a negative size, and the readahead
		// would start before the file); the next checkpoint tries again.
		s.wal.mu.Lock()
		s.wal.s.Busy++
		s.wal.mu.Unlock()
		return nil
	}
	bytes := r.Frames * (s.pageSize + walFrameHeader)
	next := bytes
	if r.Restarted {
		next = 0 // the next write starts the WAL over, from the file's start
	}
	s.allocateWAL(bytes, next)
	s.wal.mu.Lock()
	defer s.wal.mu.Unlock()
	s.wal.s.Checkpoints++
	s.wal.s.Frames, s.wal.s.Bytes = r.Frames, bytes
	if r.Restarted {
		s.wal.s.Restarts++
	}
	return nil
}

// The checkpoint's pace. A checkpoint that copies the whole WAL lets the
// next commit start it over, and that commit syncs the new WAL's header
// (SQLite does, at any synchronous setting but OFF, so that frames written
// after it cannot be taken for the old WAL's after a crash) with the write
// lock held. At a site's usual load, a checkpoint a second copied
// everything every second: in two 10,000-task CLI runs on the
// mini-cluster, 252 such fsyncs under the lock, most 0.1 ms, the longest
// 4.7 and 5.3 ms, and those two made 2 of the runs' 5 transactions over
// 5 ms (perf, sched_switch of the ceiling's priority). CheckpointTick
// therefore passes over ticks while the WAL grows slowly: after a
// checkpoint that found F frames written over g ticks, it waits until
// about walQuietFrames would have been written, at most walMaxSkips
// ticks. Under full load the WAL grows past walQuietFrames every tick and
// nothing changes.
const (
	walQuietFrames = 8192
	walMaxSkips    = 4
)

// CheckpointTick is the queue's checkpoint loop's call, every
// Config.CheckpointInterval: Checkpoint, or nothing while the WAL is
// growing slowly (see walQuietFrames).
func (s *Store) CheckpointTick(ctx context.Context) error {
	s.wal.mu.Lock()
	s.wal.gap++
	if s.wal.skip > 0 {
		s.wal.skip--
		s.wal.mu.Unlock()
		return nil
	}
	before := s.wal.s.Checkpoints
	s.wal.mu.Unlock()
	if err := s.Checkpoint(ctx); err != nil {
		return err
	}
	s.wal.mu.Lock()
	defer s.wal.mu.Unlock()
	if s.wal.s.Checkpoints > before { // a round ran: pace by what it found
		s.wal.skip, s.wal.gap = checkpointSkips(s.wal.s.Frames, s.wal.gap), 0
	}
	return nil
}

// checkpointSkips is how many ticks to pass over after a checkpoint that
// found frames frames in the WAL, gap ticks after the last one (the WAL
// started over since, unless that one left frames uncopied: then frames
// counts those too, and the pace is faster, never slower).
func checkpointSkips(frames int64, gap int) int {
	if frames <= 0 {
		return walMaxSkips
	}
	k := walQuietFrames*int64(gap)/frames - 1
	return int(min(max(k, 0), walMaxSkips))
}

// WALStats returns the WAL's figures as of the last Checkpoint.
func (s *Store) WALStats() WALStats {
	s.wal.mu.Lock()
	defer s.wal.mu.Unlock()
	return s.wal.s
}

func (s *Store) checkpoint(ctx context.Context, restartAt int64) (CheckpointResult, error) {
	var r CheckpointResult
	prev := int64(-1)
	for tries := 1; ; {
		var err error
		if _, r.Frames, r.Copied, err = s.wal.passive(ctx); err != nil {
			return r, fmt.Errorf("checkpoint: %w", err)
		}
		if r.Frames < 0 {
			// The round could not run (SQLite reports -1 frames): another
			// connection held the checkpoint lock, or a commit was writing
			// the WAL index's header as the round read it, and re-reading
			// it needs the write lock, which PASSIVE does not wait for
			// (seen in CI under a writer committing every 0.1 ms). A
			// commit takes about a millisecond: try again shortly.
			if tries++; tries > walBusyTries {
				return r, nil // nothing known: Checkpoint keeps its figures
			}
			select {
			case <-ctx.Done():
				return r, ctx.Err()
			case <-time.After(walBusyPause):
			}
			continue
		}
		r.Rounds++
		if err := s.syncDB(r); err != nil {
			return r, err
		}
		if r.Frames < restartAt || r.Frames-r.Copied >= walSettledFrames {
			// small enough; or readers of old frames are in the way (a
			// few frames left behind are the open write transaction's
			// neighbours: the RESTART copies them)
			return r, nil
		}
		if prev >= 0 && r.Frames-prev < walSettledFrames || r.Rounds == walMaxRounds {
			break
		}
		prev = r.Frames
	}
	ok, err := s.restartWAL(ctx)
	r.Restarted = ok
	return r, err
}

// passiveRound runs one PASSIVE checkpoint round on the checkpoint
// connection; frames and copied are -1 when it could not run.
func (s *Store) passiveRound(ctx context.Context) (busy, frames, copied int64, err error) {
	err = s.ck.QueryRowContext(ctx, "PRAGMA wal_checkpoint(PASSIVE)").Scan(&busy, &frames, &copied)
	return busy, frames, copied, err
}

// restartWAL runs a RESTART checkpoint on the writer's connection: no
// write can come between it and the next write, which then starts the WAL
// over. It holds the write lock (it copies what the last PASSIVE round
// left, then waits up to walRestartReaderWait for readers of old frames),
// so it goes through holding like a write transaction: under the priority
// ceiling, counted in WriteStats. It reports whether readers let it
// finish.
func (s *Store) restartWAL(ctx context.Context) (bool, error) {
	c, err := s.w.Conn(ctx)
	if err != nil {
		return false, fmt.Errorf("restart the WAL: %w", err)
	}
	defer c.Close()
	ictx := inline(ctx)
	if _, err := c.ExecContext(ictx, fmt.Sprintf("PRAGMA busy_timeout = %d", walRestartReaderWait.Milliseconds())); err != nil {
		return false, fmt.Errorf("restart the WAL: %w", err)
	}
	var busy, frames, copied int64
	runtime.LockOSThread()
	_, err = s.holding(ctx, true, func() error {
		return c.QueryRowContext(ictx, "PRAGMA wal_checkpoint(RESTART)").Scan(&busy, &frames, &copied)
	})
	runtime.UnlockOSThread()
	if _, rerr := c.ExecContext(ictx, fmt.Sprintf("PRAGMA busy_timeout = %d", busyTimeout.Milliseconds())); rerr != nil {
		// A writer left with a 2 ms busy timeout would fail writes that
		// a reader delays: drop the connection; the pool opens a new one
		// from the DSN (busy timeout included).
		c.Raw(func(any) error { return driver.ErrBadConn })
		return false, errors.Join(err, fmt.Errorf("restart the WAL: restore the busy timeout: %w", rerr))
	}
	if err != nil {
		return false, fmt.Errorf("restart the WAL: %w", err)
	}
	return busy == 0, nil
}

// syncDB flushes the database file's pages to disk, from the
// checkpointer's goroutine, without the write lock. A PASSIVE checkpoint
// syncs the database file only when it has copied the whole WAL; under
// steady load commits arrive while it copies, so it never does, and the
// pages it copied (a whole WAL's worth, tens of MB, between two WAL
// restarts) waited, dirty, for the RESTART's fsync, which wrote them all
// with the write lock held: 8-56 ms in a sustained `harvest bench
// dispatch --tasks 300000`. Synced after every round that copied frames,
// the RESTART's fsync only writes the few frames it copies itself.
// fdatasync: SQLite trusts it on Linux too (the file's size, when it
// changed, is written with it).
func (s *Store) syncDB(r CheckpointResult) error {
	s.wal.mu.Lock()
	last := s.wal.synced
	s.wal.mu.Unlock()
	if r.Copied == 0 || [2]int64{r.Frames, r.Copied} == last {
		return nil // nothing copied since the last sync (an idle queue)
	}
	start := time.Now()
	f, err := os.Open(s.path)
	if err == nil {
		err = unix.Fdatasync(int(f.Fd()))
		f.Close()
	}
	if err != nil {
		return fmt.Errorf("checkpoint: sync %s: %w", s.path, err)
	}
	d := time.Since(start)
	s.wal.mu.Lock()
	defer s.wal.mu.Unlock()
	s.wal.synced = [2]int64{r.Frames, r.Copied}
	s.wal.s.DBSyncs++
	s.wal.s.DBSyncTime += d
	return nil
}

// walHeadroom is how far past its frames the WAL file is kept allocated.
// A commit that appends past the end of the file makes ext4 reserve
// blocks (delayed allocation) and raise the inode's size, both under the
// inode's i_data_sem, which writeback of the same file holds: the
// writer slept on it for 14-17 ms with the write lock held (perf,
// sched_switch of the ceiling's priority). Inside the file's size and in
// allocated (unwritten) blocks, a write takes neither. At ~16 MB/s of WAL
// under full load and a checkpoint a second, 32 MiB stays ahead.
const walHeadroom = 32 << 20

// walReadahead is the span of one readahead request: the kernel reads at
// most the device's readahead window per request (8 MiB on this VM's
// disk, 128 KiB by default), and drops the rest of a longer one.
const walReadahead = 128 << 10

// allocateWAL readies the WAL file for the next walHeadroom bytes of
// frames, which go from used on (0 after a RESTART), from the
// checkpointer's goroutine, so that commits find it ready; held is the
// bytes of frames the WAL holds:
//
//   - It makes the file at least used+walHeadroom bytes long (up to
//     walSizeLimit), in allocated blocks: fallocate takes the inode's
//     locks here, not in a commit. SQLite reads a WAL only up to its last
//     valid frame, so zeros past it are as good as the old frames a
//     restarted WAL leaves.
//   - It asks the kernel to read that range of the file, where it holds
//     old frames, into the page cache (readahead). A frame does not fill
//     the 4 KiB pages it straddles, so a commit writing into a page the
//     kernel had evicted first read it from disk, write lock held: 36-62
//     such waits in a sustained `harvest bench dispatch --tasks 300000`
//     (perf on the writer's switches), where a restarted WAL overwrote
//     old frames that the kernel (here DAMON's pageout) had dropped; none
//     with readahead.
//
// Best effort: a file system without fallocate keeps the appends as they
// were; a failed readahead leaves the reads to the commits.
func (s *Store) allocateWAL(held, used int64) {
	want := min(used+walHeadroom, walSizeLimit)
	f, err := os.OpenFile(s.path+"-wal", os.O_RDWR, 0)
	if err != nil {
		return // no WAL yet
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return
	}
	// Only old frames (below the most the WAL has held): past them the
	// file is allocated but unwritten, and reading it would fill the page
	// cache with zeros every second for nothing.
	s.wal.mu.Lock()
	s.wal.high = max(s.wal.high, held)
	old := min(s.wal.high, fi.Size())
	s.wal.mu.Unlock()
	for off, end := used, min(used+walHeadroom, old); off < end; off += walReadahead {
		unix.Fadvise(int(f.Fd()), off, min(walReadahead, end-off), unix.FADV_WILLNEED)
	}
	if fi.Size() >= want {
		return
	}
	if err := unix.Fallocate(int(f.Fd()), 0, 0, want); err == nil {
		s.wal.mu.Lock()
		s.wal.s.Allocated = want
		s.wal.mu.Unlock()
	}
}
