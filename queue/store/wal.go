package store

import (
	"os"
)

// WALStats describes the database's write-ahead log.
type WALStats struct {
	Bytes int64 // SQLite: the WAL file's size (stat, not opened); PostgreSQL: 0 (its WAL is the server's)
}

// WALStats returns the WAL's size now. Nothing in the queue opens the
// database's files itself: a close of any descriptor of the file drops
// every POSIX lock the process holds on it, SQLite's included, and
// another process (an admin's sqlite3) would then take itself for the
// last connection and delete the live WAL (issue 35 item 1).
func (s *Store) WALStats() WALStats {
	if s.d.pg {
		return WALStats{}
	}
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
