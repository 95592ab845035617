package master

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"

	"github.com/mattn/go-sqlite3"
)

// ErrStateDir: the state directory cannot hold the checkpoint.
var ErrStateDir = errors.New("the state directory cannot hold the master checkpoint")

// CheckStateDir makes sure dir offers what the checkpoint does at each
// failover (docs/pilot.md, "What the shared state directory must offer"):
// this account creates a file, writes and fsyncs it, renames it within the
// directory, syncs the directory, reads the file back and removes it. A
// pilot checks it at start, so a directory that cannot work (or that
// another user controls) is refused then, with the failing step named, not at its first election (where the
// master could not start and the pool would have no master).
func CheckStateDir(dir string) error {
	bad := func(step string, err error) error {
		return fmt.Errorf("%w: %s: %s: %v (the pilots' account must create, fsync, rename, read and remove files there: see docs/pilot.md)",
			ErrStateDir, dir, step, err)
	}
	st, err := os.Stat(dir)
	if err != nil {
		return bad("stat", err)
	}
	if !st.IsDir() {
		return bad("stat", errors.New("not a directory"))
	}
	// The checkpoint holds every task's command, and a master runs what
	// it reads there: a directory another user owns, or any user may
	// write (without the sticky bit that keeps others' files theirs),
	// lets them read it, or replace it and run their commands as the
	// pilots' account. A group-writable one is the site's choice.
	if sys, ok := st.Sys().(*syscall.Stat_t); ok {
		if uid := uint32(os.Geteuid()); sys.Uid != uid && sys.Uid != 0 {
			return bad("check its owner", fmt.Errorf("owned by uid %d, neither this account's (%d) nor root's", sys.Uid, uid))
		}
		if sys.Mode&0o002 != 0 && sys.Mode&syscall.S_ISVTX == 0 {
			return bad("check its mode", fmt.Errorf("mode %04o: any user may replace the checkpoint", sys.Mode&0o7777))
		}
	}
	b := make([]byte, 6)
	rand.Read(b)
	tmp := filepath.Join(dir, ".harvest-probe-"+hex.EncodeToString(b)+".tmp")
	final := tmp[:len(tmp)-len(".tmp")]
	want := []byte("harvest state directory probe\n")
	f, err := os.OpenFile(tmp, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return bad("create a file", err)
	}
	defer os.Remove(tmp)
	_, err = f.Write(want)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return bad("write and fsync a file", err)
	}
	if err := os.Rename(tmp, final); err != nil {
		return bad("rename a file", err)
	}
	defer os.Remove(final)
	if err := syncDir(dir); err != nil {
		return bad("sync the directory", err)
	}
	got, err := os.ReadFile(final)
	if err != nil {
		return bad("read a file back", err)
	}
	if string(got) != string(want) {
		return bad("read a file back", fmt.Errorf("read %q, wrote %q", got, want))
	}
	if err := os.Remove(final); err != nil {
		return bad("remove a file", err)
	}
	return nil
}

// stateDirError marks err, a failure to open the checkpoint in dir, with
// ErrStateDir when the directory is the cause: full (ENOSPC, EDQUOT),
// read-only (EROFS) or not writable by this account (EACCES, EPERM), as
// the error itself says or, where SQLite gives no errno, as a probe of
// the directory finds. Other errors (a damaged file) are returned as they
// are.
func stateDirError(dir string, err error) error {
	if errno, ok := stateErrno(err); ok {
		return fmt.Errorf("%w: %s: %v (%w)", ErrStateDir, dir, errno, err)
	}
	var se sqlite3.Error
	if errors.As(err, &se) && (se.Code == sqlite3.ErrReadonly || se.Code == sqlite3.ErrCantOpen || se.Code == sqlite3.ErrIoErr || se.Code == sqlite3.ErrPerm) {
		if perr := CheckStateDir(dir); perr != nil {
			return fmt.Errorf("%w (%w)", perr, err)
		}
	}
	return err
}

// stateErrno finds the errno of a full or unwritable file system in err.
func stateErrno(err error) (syscall.Errno, bool) {
	var se sqlite3.Error
	if errors.As(err, &se) {
		if se.Code == sqlite3.ErrFull {
			return syscall.ENOSPC, true
		}
		err = se.SystemErrno
	}
	var errno syscall.Errno
	if errors.As(err, &errno) {
		switch errno {
		case syscall.ENOSPC, syscall.EDQUOT, syscall.EROFS, syscall.EACCES, syscall.EPERM:
			return errno, true
		}
	}
	return 0, false
}
