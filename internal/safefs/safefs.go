// Package safefs opens and creates paths without following symbolic links
// a user may have planted after a path was checked (issue 13: an output
// directory replaced by a link after submission). It uses openat2(2)
// (Linux 5.6+): RESOLVE_NO_SYMLINKS for paths the queue stored fully
// resolved, RESOLVE_BENEATH for paths that must stay inside a root. On
// older kernels it walks the path one component at a time with O_NOFOLLOW,
// which refuses every link (stricter, never looser).
package safefs

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// ErrLink: a path held a symbolic link (or left its root) where none may be.
var ErrLink = errors.New("symbolic link or path outside its directory")

// noOpenat2 forces the fallback (tests run both ways).
var noOpenat2 = false

// openat2 opens rel under dirfd; on ENOSYS it falls back to a walk that
// refuses every link.
func openat2(dirfd int, rel string, flags uint64, mode uint64, resolve uint64) (int, error) {
	if noOpenat2 {
		return walk(dirfd, rel, flags, mode)
	}
	fd, err := unix.Openat2(dirfd, rel, &unix.OpenHow{Flags: flags | unix.O_CLOEXEC, Mode: mode, Resolve: resolve})
	if errors.Is(err, unix.ENOSYS) {
		return walk(dirfd, rel, flags, mode)
	}
	if errors.Is(err, unix.ELOOP) || errors.Is(err, unix.EXDEV) {
		err = fmt.Errorf("%w (%w)", ErrLink, err)
	}
	return fd, err
}

// walk opens rel under dirfd one component at a time, none followed.
func walk(dirfd int, rel string, flags, mode uint64) (int, error) {
	if strings.HasPrefix(rel, "/") {
		root, err := unix.Open("/", unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err != nil {
			return -1, err
		}
		defer unix.Close(root)
		dirfd = root
	}
	var parts []string
	for _, p := range strings.Split(rel, "/") {
		switch p {
		case "", ".":
		case "..":
			return -1, fmt.Errorf("%w: %q has \"..\"", ErrLink, rel)
		default:
			parts = append(parts, p)
		}
	}
	cur, err := unix.FcntlInt(uintptr(dirfd), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return -1, err
	}
	for i, p := range parts {
		f, m := uint64(unix.O_PATH|unix.O_DIRECTORY), uint64(0)
		if i == len(parts)-1 {
			f, m = flags, mode
		}
		fd, err := unix.Openat(cur, p, int(f|unix.O_NOFOLLOW|unix.O_CLOEXEC), uint32(m))
		if err != nil {
			var st unix.Stat_t
			if unix.Fstatat(cur, p, &st, unix.AT_SYMLINK_NOFOLLOW) == nil && st.Mode&unix.S_IFMT == unix.S_IFLNK {
				err = fmt.Errorf("%w (%s: %w)", ErrLink, p, err)
			}
		}
		unix.Close(cur)
		if err != nil {
			return -1, err
		}
		cur = fd
	}
	// O_PATH|O_NOFOLLOW opens a final link itself instead of failing.
	var st unix.Stat_t
	if err := unix.Fstat(cur, &st); err != nil || st.Mode&unix.S_IFMT == unix.S_IFLNK {
		unix.Close(cur)
		return -1, fmt.Errorf("%w: %s", ErrLink, rel)
	}
	return cur, nil
}

const noLinks = unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS

// OpenDir opens the absolute directory path as an O_PATH handle, refusing
// any symbolic link on the way.
func OpenDir(path string) (*os.File, error) {
	if !filepath.IsAbs(path) {
		return nil, fmt.Errorf("%s: not an absolute path", path)
	}
	fd, err := openat2(unix.AT_FDCWD, path, unix.O_PATH|unix.O_DIRECTORY, 0, noLinks)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: path, Err: err}
	}
	return os.NewFile(uintptr(fd), path), nil
}

// MkdirAll creates the absolute directory path and its missing parents
// (perm), refusing any symbolic link on the way, and returns it open as an
// O_PATH handle.
func MkdirAll(path string, perm os.FileMode) (*os.File, error) {
	if !filepath.IsAbs(path) {
		return nil, fmt.Errorf("%s: not an absolute path", path)
	}
	d, err := OpenDir("/")
	if err != nil {
		return nil, err
	}
	for _, p := range strings.Split(filepath.Clean(path), "/") {
		if p == "" {
			continue
		}
		next, err := MkdirBeneath(d, p, perm)
		d.Close()
		if err != nil {
			return nil, &os.PathError{Op: "mkdir", Path: path, Err: err}
		}
		d = next
	}
	return d, nil
}

// MkdirBeneath creates rel (missing parents too) inside dir, refusing any
// symbolic link, and returns it open as an O_PATH handle.
func MkdirBeneath(dir *os.File, rel string, perm os.FileMode) (*os.File, error) {
	cur, err := dup(dir)
	if err != nil {
		return nil, err
	}
	for _, p := range strings.Split(filepath.Clean(rel), "/") {
		if p == "" || p == "." {
			continue
		}
		if p == ".." {
			cur.Close()
			return nil, fmt.Errorf("%w: %q has \"..\"", ErrLink, rel)
		}
		err := unix.Mkdirat(int(cur.Fd()), p, uint32(perm.Perm()))
		if err != nil && !errors.Is(err, unix.EEXIST) {
			cur.Close()
			return nil, &os.PathError{Op: "mkdir", Path: filepath.Join(cur.Name(), p), Err: err}
		}
		fd, err := openat2(int(cur.Fd()), p, unix.O_PATH|unix.O_DIRECTORY, 0, unix.RESOLVE_BENEATH|noLinks)
		name := filepath.Join(cur.Name(), p)
		cur.Close()
		if err != nil {
			return nil, &os.PathError{Op: "open", Path: name, Err: err}
		}
		cur = os.NewFile(uintptr(fd), name)
	}
	return cur, nil
}

// MkdirFresh creates the absolute directory path, which must not exist
// yet, and its missing parents (perm), refusing any symbolic link on the
// way.
func MkdirFresh(path string, perm os.FileMode) error {
	parent, err := MkdirAll(filepath.Dir(path), perm)
	if err != nil {
		return err
	}
	defer parent.Close()
	if err := unix.Mkdirat(int(parent.Fd()), filepath.Base(path), uint32(perm.Perm())); err != nil {
		return &os.PathError{Op: "mkdir", Path: path, Err: err}
	}
	return nil
}

// CreateBeneath creates (or truncates) the file rel inside dir for
// reading and writing, refusing any symbolic link, the file itself included.
func CreateBeneath(dir *os.File, rel string, perm os.FileMode) (*os.File, error) {
	name := filepath.Join(dir.Name(), rel)
	fd, err := openat2(int(dir.Fd()), rel, unix.O_RDWR|unix.O_CREAT|unix.O_TRUNC|unix.O_NOFOLLOW,
		uint64(perm.Perm()), unix.RESOLVE_BENEATH|noLinks)
	if err != nil {
		return nil, &os.PathError{Op: "create", Path: name, Err: err}
	}
	return os.NewFile(uintptr(fd), name), nil
}

// OpenIn opens the path, which must resolve inside one of roots, as an
// O_PATH handle on what it resolves to: links are followed only while the
// result stays inside a root, and a link planted between the check and the
// open is refused.
func OpenIn(path string, roots []string) (*os.File, error) {
	real, err := filepath.EvalSymlinks(path)
	if err != nil {
		return nil, err
	}
	if !Within(real, roots) {
		return nil, &os.PathError{Op: "open", Path: path, Err: fmt.Errorf("%w: resolves to %s, outside %v", ErrLink, real, roots)}
	}
	fd, err := openat2(unix.AT_FDCWD, real, unix.O_PATH, 0, noLinks)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: real, Err: err}
	}
	return os.NewFile(uintptr(fd), real), nil
}

// CheckIn tells, as OpenIn would, whether path resolves inside one of
// roots (nil: it does), without keeping it open. A clean absolute path
// inside a root with no link on it (the common case) costs one openat2;
// any other goes through OpenIn.
func CheckIn(path string, roots []string) error {
	_, err := ResolveIn(path, roots)
	return err
}

// ResolveIn is CheckIn that also returns what path resolves to (path
// itself when no link is on it).
func ResolveIn(path string, roots []string) (string, error) {
	if filepath.IsAbs(path) && filepath.Clean(path) == path && Within(path, roots) {
		fd, err := openat2(unix.AT_FDCWD, path, unix.O_PATH, 0, noLinks)
		if err == nil {
			unix.Close(fd)
			return path, nil
		}
		if !errors.Is(err, ErrLink) {
			return "", &os.PathError{Op: "open", Path: path, Err: err}
		}
	}
	f, err := OpenIn(path, roots)
	if err != nil {
		return "", err
	}
	return f.Name(), f.Close()
}

// A Resolver is ResolveIn for many paths against the same roots, most of
// them in a few directories (a group's dataset entries): each directory
// is checked once, as ResolveIn checks a whole path (clean, absolute,
// inside a root, no link on it), and kept open; a path in one of them
// then costs one fstatat of its last component (not a link), instead of
// an openat2 and a close of the whole path and its filepath.Clean and
// Rel (a quarter of a worker's CPU under `harvest bench dispatch
// --exec`: its profile). Anything else, a link or an error included,
// goes through ResolveIn. Not safe for concurrent use; Close it.
type Resolver struct {
	roots []string
	dirs  map[string]int // checked directories' O_PATH handles; -1: not fit for the short way
}

// NewResolver returns a Resolver for roots.
func NewResolver(roots []string) *Resolver {
	return &Resolver{roots: roots, dirs: map[string]int{}}
}

// ResolveIn is ResolveIn(path, r's roots).
func (r *Resolver) ResolveIn(path string) (string, error) {
	i := strings.LastIndexByte(path, '/')
	if base := path[i+1:]; i > 0 && base != "" && base != "." && base != ".." {
		dir := path[:i]
		fd, ok := r.dirs[dir]
		if !ok {
			fd = -1
			if filepath.IsAbs(dir) && filepath.Clean(dir) == dir && Within(dir, r.roots) {
				if d, err := openat2(unix.AT_FDCWD, dir, unix.O_PATH|unix.O_DIRECTORY, 0, noLinks); err == nil {
					fd = d
				}
			}
			r.dirs[dir] = fd
		}
		var st unix.Stat_t
		if fd >= 0 && unix.Fstatat(fd, base, &st, unix.AT_SYMLINK_NOFOLLOW) == nil && st.Mode&unix.S_IFMT != unix.S_IFLNK {
			return path, nil
		}
	}
	return ResolveIn(path, r.roots)
}

// Close closes the directories r kept open.
func (r *Resolver) Close() {
	for _, fd := range r.dirs {
		if fd >= 0 {
			unix.Close(fd)
		}
	}
	clear(r.dirs)
}

// Within reports whether the clean absolute path p is one of dirs or
// beneath one.
func Within(p string, dirs []string) bool {
	for _, d := range dirs {
		rel, err := filepath.Rel(d, p)
		if err == nil && rel != ".." && !strings.HasPrefix(rel, "../") {
			return true
		}
	}
	return false
}

func dup(f *os.File) (*os.File, error) {
	fd, err := unix.FcntlInt(f.Fd(), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	return os.NewFile(uintptr(fd), f.Name()), nil
}

// FDPath names an open file by its descriptor in this process: a path
// that reaches exactly that file, whatever has been renamed or linked
// since it was opened.
func FDPath(f *os.File) string { return fmt.Sprintf("/proc/self/fd/%d", f.Fd()) }

// PrivateDir creates the directory path (missing parents too, 0700)
// readable by this process's user only, and takes group and other access
// away from an existing one: harvest's state (queue database, tokens,
// control file) is nobody else's business (issue 13 item 8). It refuses,
// before it creates or changes anything, a path another local user could
// have prepared or could replace later, as OwnDir does and on the whole
// way to it (an admin may point it into /tmp or a shared directory): path
// itself a symbolic link, not a directory, another user's directory, or
// open to writes by others (who may have put files in it); on the way, a
// directory others may write without the sticky bit (they could rename
// ours away and put theirs in its place) or a symbolic link or directory
// of a user other than root and this process's.
func PrivateDir(path string) error {
	return trustedDir(path, true)
}

// SharedDir creates the directory path (missing parents too, 0755) for
// what others must reach but not replace (the queue's Unix socket), and
// refuses it as PrivateDir does the way to its directory: it, or anything
// on the way, a symbolic link or directory of a user other than root and
// this process's, or a directory others may write without the sticky
// bit. Nothing is created when it refuses.
func SharedDir(path string) error {
	return trustedDir(path, false)
}

func trustedDir(path string, private bool) error {
	if path == "" {
		return errors.New("empty directory name")
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return err
	}
	perm, last := uint32(0o755), 1
	if private {
		perm, last = 0o700, 2 // OwnDir makes the last
	}
	// Each pass creates one missing directory, which the next pass checks
	// like the rest (another user may have made the name in between).
	for range 256 {
		real, missing, err := walkTrusted(abs, private)
		if err != nil {
			return err
		}
		if len(missing) >= last {
			if err := unix.Mkdir(filepath.Join(real, missing[0]), perm); err != nil && !errors.Is(err, unix.EEXIST) {
				return &os.PathError{Op: "mkdir", Path: filepath.Join(real, missing[0]), Err: err}
			}
			continue
		}
		if !private {
			return nil
		}
		if len(missing) == 0 {
			real = filepath.Dir(real)
		}
		d, err := OwnDir(filepath.Join(real, filepath.Base(abs)))
		if err != nil {
			return err
		}
		return d.Close()
	}
	return fmt.Errorf("%s: too many components", path)
}

// walkTrusted resolves the absolute path from / one component at a time,
// checking each as PrivateDir (private) or SharedDir says, and returns the
// real path of the last one that exists and the names after it that do
// not.
func walkTrusted(abs string, private bool) (real string, missing []string, err error) {
	uid := uint32(os.Geteuid())
	refuse := func(p, why string) error {
		return fmt.Errorf("%s: %s %s: another user could replace it or what lies beneath it; use a directory only root or this process's user (uid %d) controls", abs, p, why, uid)
	}
	todo := strings.Split(abs, "/")
	cur, links := "/", 0
	var st unix.Stat_t
	if err := unix.Stat("/", &st); err != nil {
		return "", nil, err
	}
	for {
		if err := othersCannotReplace(cur, &st, uid, refuse); err != nil {
			return "", nil, err
		}
		for len(todo) > 0 && (todo[0] == "" || todo[0] == ".") {
			todo = todo[1:]
		}
		if len(todo) == 0 {
			return cur, nil, nil
		}
		leaf := len(todo) == 1
		name := todo[0]
		if name == ".." {
			cur, todo = filepath.Dir(cur), todo[1:]
			if err := unix.Stat(cur, &st); err != nil {
				return "", nil, &os.PathError{Op: "stat", Path: cur, Err: err}
			}
			continue
		}
		next := filepath.Join(cur, name)
		if err := unix.Lstat(next, &st); errors.Is(err, unix.ENOENT) {
			return cur, todo, nil
		} else if err != nil {
			return "", nil, &os.PathError{Op: "lstat", Path: next, Err: err}
		}
		switch st.Mode & unix.S_IFMT {
		case unix.S_IFDIR:
			if leaf && private {
				if st.Uid != uid {
					return "", nil, refuse(next, fmt.Sprintf("is owned by uid %d (another user made it first?)", st.Uid))
				}
				if st.Mode&0o022 != 0 {
					return "", nil, refuse(next, fmt.Sprintf("is writable by others (mode %04o), who may have put files in it", st.Mode&0o7777))
				}
			}
			cur, todo = next, todo[1:]
		case unix.S_IFLNK:
			if leaf && private {
				return "", nil, &os.PathError{Op: "open", Path: abs, Err: fmt.Errorf("%w: %s is a symbolic link", ErrLink, next)}
			}
			if st.Uid != 0 && st.Uid != uid {
				return "", nil, refuse(next, fmt.Sprintf("is a symbolic link of uid %d", st.Uid))
			}
			if links++; links > 40 {
				return "", nil, &os.PathError{Op: "open", Path: abs, Err: unix.ELOOP}
			}
			target, err := os.Readlink(next)
			if err != nil {
				return "", nil, err
			}
			if filepath.IsAbs(target) {
				cur = "/"
			}
			todo = append(strings.Split(target, "/"), todo[1:]...)
			if err := unix.Stat(cur, &st); err != nil {
				return "", nil, &os.PathError{Op: "stat", Path: cur, Err: err}
			}
		default:
			return "", nil, &os.PathError{Op: "open", Path: abs, Err: fmt.Errorf("%s is not a directory", next)}
		}
	}
}

// othersCannotReplace refuses the directory p (st) if a user other than
// root and uid owns it, or may write it without the sticky bit.
func othersCannotReplace(p string, st *unix.Stat_t, uid uint32, refuse func(p, why string) error) error {
	if st.Uid != 0 && st.Uid != uid {
		return refuse(p, fmt.Sprintf("is owned by uid %d", st.Uid))
	}
	if st.Mode&0o022 != 0 && st.Mode&unix.S_ISVTX == 0 {
		return refuse(p, fmt.Sprintf("is writable by others (mode %04o) without the sticky bit", st.Mode&0o7777))
	}
	return nil
}

// OwnDir creates the directory path (its parent must exist; links on the
// way to it are the admin's and followed) readable by this process's user
// only, or opens it if it exists, refusing it where another user could
// have put it: path itself a symbolic link, something other than a
// directory, or a directory of another user (in a world-writable parent
// such as /tmp, anyone may make the name first). A directory of ours
// that others may enter is closed (0700). It returns the directory open,
// for CreateBeneath.
func OwnDir(path string) (*os.File, error) {
	parent, err := os.Open(filepath.Dir(path))
	if err != nil {
		return nil, err
	}
	defer parent.Close()
	base := filepath.Base(path)
	if err := unix.Mkdirat(int(parent.Fd()), base, 0o700); err != nil && !errors.Is(err, unix.EEXIST) {
		return nil, &os.PathError{Op: "mkdir", Path: path, Err: err}
	}
	fd, err := openat2(int(parent.Fd()), base, unix.O_RDONLY|unix.O_DIRECTORY, 0, unix.RESOLVE_BENEATH|noLinks)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: path, Err: err}
	}
	d := os.NewFile(uintptr(fd), path)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		d.Close()
		return nil, &os.PathError{Op: "stat", Path: path, Err: err}
	}
	if uid := os.Geteuid(); int(st.Uid) != uid {
		d.Close()
		return nil, fmt.Errorf("%s is owned by uid %d, not by this process's %d (another user made it first?): remove it or use another directory", path, st.Uid, uid)
	}
	if st.Mode&0o077 != 0 {
		if err := unix.Fchmod(fd, st.Mode&0o700); err != nil {
			d.Close()
			return nil, &os.PathError{Op: "chmod", Path: path, Err: err}
		}
	}
	return d, nil
}

// PrivateFile makes the file path, and the journal files SQLite keeps
// beside it (-wal, -shm, -journal), readable by their owner only: it
// creates path empty (0600) if it does not exist, so SQLite, which gives
// its journals the database file's mode, never makes them world-readable.
func PrivateFile(path string) error {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return err
	}
	f.Close()
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
