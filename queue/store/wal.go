package store

import (
	"context"
	"fmt"
	"os"
)

// The WAL. The writer does not checkpoint (wal_autocheckpoint = 0): a
// checkpoint run by a committing writer copies pages and syncs the
// database file inside the commit, and every request waits behind it
// (under `harvest bench dispatch` at load 16 on 2 cores, SQLite's
// autocheckpoint on the writer cost 40% of the throughput and made 10% of
// the transactions longer than 5 ms). Checkpoint runs SQLite's PASSIVE
// checkpoint from a connection of its own instead, once a second (the
// queue's loop), which takes no lock the writer waits for; and when the
// WAL file has grown past walSizeLimit (a writer that commits every
// millisecond never lets SQLite start it over by itself) a TRUNCATE
// checkpoint, which waits for the writer between two transactions, copies
// what is left and empties the file. Both are PRAGMAs: nothing in the
// queue opens the database's files itself. A close of any descriptor of
// the file drops every POSIX lock the process holds on it, SQLite's
// included, and another process (an admin's sqlite3) would then take
// itself for the last connection and delete the live WAL (issue 35
// item 1).
const walSizeLimit = 64 << 20 // bytes; also SQLite's journal_size_limit

// Checkpoint copies the WAL into the database file (PASSIVE), and empties
// a WAL grown past walSizeLimit (TRUNCATE).
func (s *Store) Checkpoint(ctx context.Context) error {
	var busy, frames, copied int64
	if err := s.ck.QueryRowContext(ctx, "PRAGMA wal_checkpoint(PASSIVE)").Scan(&busy, &frames, &copied); err != nil {
		return fmt.Errorf("checkpoint: %w", err)
	}
	if s.WALStats().Bytes <= s.truncateAt {
		return nil
	}
	if err := s.ck.QueryRowContext(ctx, "PRAGMA wal_checkpoint(TRUNCATE)").Scan(&busy, &frames, &copied); err != nil {
		return fmt.Errorf("checkpoint: truncate the WAL: %w", err)
	}
	return nil
}

// WALStats describes the database's write-ahead log.
type WALStats struct {
	Bytes int64 // the WAL file's size (stat, not opened)
}

// WALStats returns the WAL's size now.
func (s *Store) WALStats() WALStats {
	fi, err := os.Stat(s.path + "-wal")
	if err != nil {
		return WALStats{}
	}
	return WALStats{Bytes: fi.Size()}
}

// private makes the database file (and its WAL and shared-memory files,
// if any) readable by the owner only, without opening them.
func private(path string) error {
	for _, p := range []string{path, path + "-wal", path + "-shm", path + "-journal"} {
		fi, err := os.Stat(p)
		if err != nil {
			continue
		}
		if fi.Mode().Perm()&0o077 != 0 {
			if err := os.Chmod(p, fi.Mode().Perm()&0o600); err != nil {
				return err
			}
		}
	}
	return nil
}
