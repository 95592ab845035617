// Package unixacct answers whether a user's Unix account may read a path,
// by the mode bits, for the harvest account that reads every user's data
// on their behalf: the queue when a job is submitted, the worker again
// when a task starts (a link re-pointed in between must not hand another
// user's file to the task).
package unixacct

import (
	"fmt"
	"io/fs"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"syscall"
)

// Account is a Unix account: its uid and every group it is in.
type Account struct {
	UID  uint32
	GIDs []uint32
}

// Lookup finds name's account in the system's user database (NSS:
// /etc/passwd, LDAP, ...).
func Lookup(name string) (Account, error) {
	u, err := user.Lookup(name)
	if err != nil {
		return Account{}, err
	}
	uid, err := strconv.ParseUint(u.Uid, 10, 32)
	if err != nil {
		return Account{}, err
	}
	a := Account{UID: uint32(uid)}
	ids, err := u.GroupIds()
	if err != nil {
		return a, nil // no groups known: fewer rights, never more
	}
	for _, id := range ids {
		if gid, err := strconv.ParseUint(id, 10, 32); err == nil {
			a.GIDs = append(a.GIDs, uint32(gid))
		}
	}
	return a, nil
}

// Denied is a refusal: the account may not do May on Path.
type Denied struct {
	Path string
	May  string // "list and read", "read" or "enter"
	Mode fs.FileMode
	UID  uint32 // the path's owner
	GID  uint32 // the path's group
}

func (d *Denied) Error() string {
	return fmt.Sprintf("may not %s %s (mode %v, uid %d, gid %d)", d.May, d.Path, d.Mode, d.UID, d.GID)
}

// MayRead checks that a may read path (resolved: no link in it): search
// permission on every directory from / down, and on path read (a file)
// or read and search (a directory). ACLs are not consulted. Root reads
// everything. A refusal is a *Denied; a path that cannot be examined
// another error.
func (a Account) MayRead(path string) error {
	if a.UID == 0 {
		return nil
	}
	need, may := uint32(5), "list and read"
	for p := path; ; need, may = 1, "enter" {
		var st syscall.Stat_t
		if err := syscall.Stat(p, &st); err != nil {
			return &fs.PathError{Op: "stat", Path: p, Err: err}
		}
		if p == path && st.Mode&syscall.S_IFMT != syscall.S_IFDIR {
			need, may = 4, "read"
		}
		bits := st.Mode & 7 // a file's owner gets the owner's bits only, its group the group's
		switch {
		case st.Uid == a.UID:
			bits = st.Mode >> 6 & 7
		case slices.Contains(a.GIDs, st.Gid):
			bits = st.Mode >> 3 & 7
		}
		if bits&need != need {
			return &Denied{Path: p, May: may, Mode: fs.FileMode(st.Mode & 0o777), UID: st.Uid, GID: st.Gid}
		}
		parent := filepath.Dir(p)
		if parent == p {
			return nil
		}
		p = parent
	}
}
