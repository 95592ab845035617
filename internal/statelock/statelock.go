// Package statelock keeps one harvest process per state directory: the
// queue database, the pilot token and the control file there are written
// by one process only, and a second queue on the same database would hand
// out the same tasks twice.
//
// The lock is flock(2) on a file beside the state (never on the database
// itself: SQLite's own POSIX locks on queue.db must not be disturbed). The
// kernel drops it when the process dies, however it dies, so a crash
// never leaves a stale lock; the pid written in the file only names the
// holder in the refusal.
package statelock

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// Name is the lock file's name in the state directory.
const Name = "harvest.lock"

// ErrHeld is returned when another process holds the lock.
var ErrHeld = errors.New("state directory in use")

// Lock is a held lock; Release gives it up (exit does too).
type Lock struct {
	f *os.File
}

// Acquire takes the exclusive lock on dir, or says which process holds it.
func Acquire(dir string) (*Lock, error) {
	path := filepath.Join(dir, Name)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, 0o600)
	if err != nil {
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		defer f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("%w: %s is held by %s; stop it first (one queue or agent per state directory)", ErrHeld, dir, holder(f))
		}
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	// Ours now: say who we are for the next one that tries.
	if err := f.Truncate(0); err == nil {
		_, err = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
		if err != nil {
			f.Close()
			return nil, fmt.Errorf("lock %s: %w", path, err)
		}
	}
	return &Lock{f: f}, nil
}

// holder names the process that wrote its pid into the lock file.
func holder(f *os.File) string {
	b := make([]byte, 32)
	n, _ := f.ReadAt(b, 0)
	pid, err := strconv.Atoi(strings.TrimSpace(string(b[:n])))
	if err != nil || pid <= 0 {
		return "another process (its pid is not written yet)"
	}
	return "pid " + strconv.Itoa(pid)
}

// Release gives the lock up.
func (l *Lock) Release() error {
	if l == nil || l.f == nil {
		return nil
	}
	err := l.f.Close()
	l.f = nil
	return err
}
