package queue

import (
	"fmt"
	"path/filepath"

	sys "golang.org/x/sys/unix"

	"github.com/harvest-hpc/harvest/queue/store"
)

// minFreeToOpen is the room below which a failure to open the database is
// put down to a full file system. SQLite, in WAL mode, cannot even read
// the database without making its shared-memory index (32 KiB) and
// write-ahead log beside it: a queue on a full disk failed at start with
// "disk I/O error", which told the admin nothing.
const minFreeToOpen = 1 << 20

// diskFullError explains err, a failure to open the queue database at
// path, when the file system holding it is full (no blocks or no inodes
// left for the queue's account): what is full, how much is free, and
// what to free. Otherwise err is returned as is.
func diskFullError(path string, err error) error {
	if err == nil || store.IsURL(path) {
		return err
	}
	dir := filepath.Dir(path)
	var fs sys.Statfs_t
	if sys.Statfs(dir, &fs) != nil {
		return err
	}
	free := fs.Bavail * uint64(fs.Bsize)
	switch {
	case fs.Files > 0 && fs.Ffree == 0:
		return fmt.Errorf("queue database %s: the file system holding %s has no inodes left (%d files): SQLite cannot make its write-ahead log and shared-memory files beside the database; remove files there (old logs, backups) and start the queue again (%w)", path, dir, fs.Files, err)
	case free < minFreeToOpen:
		return fmt.Errorf("queue database %s: the file system holding %s is full (%s free of %s): SQLite cannot open the database without room for its write-ahead log and shared-memory index beside it; free space there (old logs, backups: the queue's write-ahead log alone grows to %s between checkpoints) and start the queue again; nothing was changed (%w)",
			path, dir, bytesIEC(free), bytesIEC(fs.Blocks*uint64(fs.Bsize)), bytesIEC(walRoom), err)
	}
	return err
}

// walRoom is the room the database's write-ahead log takes at most
// between checkpoints (store's journal_size_limit).
const walRoom = 64 << 20

// bytesIEC prints n bytes in KiB, MiB or GiB.
func bytesIEC(n uint64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}
