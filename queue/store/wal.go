package store

import "os"

// WALBytes is the WAL file's size now (0 on PostgreSQL). It stats the
// file, never opens it: closing a descriptor of the database drops
// SQLite's POSIX locks, and another process could delete the live WAL.
func (s *Store) WALBytes() int64 {
	fi, err := os.Stat(s.path + "-wal")
	if err != nil || s.d.pg {
		return 0
	}
	return fi.Size()
}

// private makes the database's files readable by the owner only, without
// opening them.
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
