package store

import "os"

// WALBytes is the WAL file's size now (SQLite; 0 on PostgreSQL, whose WAL
// is the server's). It stats the file, never opens it: closing any
// descriptor of the database drops SQLite's POSIX locks, and another
// process could then delete the live WAL (issue 35 item 1).
func (s *Store) WALBytes() int64 {
	fi, err := os.Stat(s.path + "-wal")
	if err != nil || s.d.pg {
		return 0
	}
	return fi.Size()
}

// private makes the database's files (the WAL and shared-memory files
// too, if any) readable by the owner only, without opening them.
func private(path string) error {
	for _, p := range []string{path, path + "-wal", path + "-shm", path + "-journal"} {
		if fi, err := os.Stat(p); err == nil && fi.Mode().Perm()&0o077 != 0 {
			if err := os.Chmod(p, fi.Mode().Perm()&0o600); err != nil {
				return err
			}
		}
	}
	return nil
}
