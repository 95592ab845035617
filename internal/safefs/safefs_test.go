package safefs

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// both runs a test with openat2 and with the per-component fallback of
// kernels older than 5.6.
func both(t *testing.T, f func(t *testing.T)) {
	for _, fallback := range []bool{false, true} {
		name := "openat2"
		if fallback {
			name = "component walk"
		}
		t.Run(name, func(t *testing.T) {
			noOpenat2 = fallback
			defer func() { noOpenat2 = false }()
			f(t)
		})
	}
}

func TestMkdirAllRefusesALinkPlantedOnThePath(t *testing.T) {
	both(t, func(t *testing.T) {
		dir := t.TempDir()
		elsewhere := filepath.Join(dir, "elsewhere")
		os.Mkdir(elsewhere, 0o700)
		os.MkdirAll(filepath.Join(dir, "alice"), 0o755)
		// alice replaced her output directory by a link after submission.
		os.Symlink(elsewhere, filepath.Join(dir, "alice", "out"))
		_, err := MkdirAll(filepath.Join(dir, "alice", "out", "logs"), 0o755)
		if !errors.Is(err, ErrLink) {
			t.Fatalf("got %v, want ErrLink", err)
		}
		if _, err := os.Stat(filepath.Join(elsewhere, "logs")); err == nil {
			t.Fatal("a directory was created through the link")
		}
		d, err := MkdirAll(filepath.Join(dir, "bob", "out", "logs"), 0o750)
		if err != nil {
			t.Fatal(err)
		}
		defer d.Close()
		if fi, err := os.Stat(filepath.Join(dir, "bob", "out", "logs")); err != nil || !fi.IsDir() || fi.Mode().Perm() != 0o750 {
			t.Fatalf("created %v %v", fi, err)
		}
		// An existing directory is opened, not refused.
		d2, err := MkdirAll(filepath.Join(dir, "bob", "out"), 0o750)
		if err != nil {
			t.Fatal(err)
		}
		d2.Close()
	})
}

func TestCreateBeneathRefusesALinkedFile(t *testing.T) {
	both(t, func(t *testing.T) {
		dir := t.TempDir()
		target := filepath.Join(dir, "checkpoint.db")
		os.WriteFile(target, []byte("precious"), 0o600)
		out := filepath.Join(dir, "out")
		os.Mkdir(out, 0o755)
		os.Symlink(target, filepath.Join(out, "1.1.out"))
		d, err := OpenDir(out)
		if err != nil {
			t.Fatal(err)
		}
		defer d.Close()
		if _, err := CreateBeneath(d, "1.1.out", 0o644); err == nil {
			t.Fatal("created through a link")
		}
		if b, _ := os.ReadFile(target); string(b) != "precious" {
			t.Fatalf("the link's target was truncated: %q", b)
		}
		if _, err := CreateBeneath(d, "../escape", 0o644); err == nil {
			t.Fatal("created outside the directory")
		}
		f, err := CreateBeneath(d, "2.1.out", 0o644)
		if err != nil {
			t.Fatal(err)
		}
		f.WriteString("ok")
		f.Close()
		if b, _ := os.ReadFile(filepath.Join(out, "2.1.out")); string(b) != "ok" {
			t.Fatalf("wrote %q", b)
		}
	})
}

func TestOpenInFollowsLinksOnlyInsideTheRoots(t *testing.T) {
	both(t, func(t *testing.T) {
		dir := t.TempDir()
		root := filepath.Join(dir, "data")
		os.MkdirAll(filepath.Join(root, "ds", "sub1"), 0o755)
		os.MkdirAll(filepath.Join(dir, "private"), 0o755)
		os.Symlink(filepath.Join(root, "ds", "sub1"), filepath.Join(root, "ds", "inside"))
		os.Symlink(filepath.Join(dir, "private"), filepath.Join(root, "ds", "shadow"))
		res := NewResolver([]string{root})
		defer res.Close()
		for _, c := range []struct {
			rel string
			ok  bool
		}{
			{"ds/sub1", true},    // a plain entry
			{"ds/inside", true},  // an absolute link to another entry of the root
			{"ds/shadow", false}, // a link out of the root
			{"ds/../../private", false},
			{"ds/missing", false},
		} {
			// CheckIn says the same (its fast path takes only paths
			// without links), and so does a Resolver, the first time
			// and again from the directory it keeps.
			if err := CheckIn(filepath.Join(root, c.rel), []string{root}); (err == nil) != c.ok {
				t.Errorf("CheckIn %s: err %v, want ok=%v", c.rel, err, c.ok)
			}
			want, _ := ResolveIn(filepath.Join(root, c.rel), []string{root})
			for range 2 {
				if got, err := res.ResolveIn(filepath.Join(root, c.rel)); (err == nil) != c.ok || got != want {
					t.Errorf("Resolver %s: %q, err %v, want %q, ok=%v", c.rel, got, err, want, c.ok)
				}
			}
			f, err := OpenIn(filepath.Join(root, c.rel), []string{root})
			if (err == nil) != c.ok {
				t.Errorf("%s: err %v, want ok=%v", c.rel, err, c.ok)
			}
			if err == nil {
				if f.Name() != filepath.Join(root, "ds", "sub1") {
					t.Errorf("%s opened as %s", c.rel, f.Name())
				}
				f.Close()
			}
		}
	})
}

func TestPrivateDirAndFileTakeAwayOthersAccess(t *testing.T) {
	dir := t.TempDir()
	state := filepath.Join(dir, "state")
	if err := os.Mkdir(state, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := PrivateDir(state); err != nil {
		t.Fatal(err)
	}
	if err := PrivateDir(filepath.Join(dir, "new", "state")); err != nil {
		t.Fatal(err)
	}
	db := filepath.Join(state, "queue.db")
	os.WriteFile(db+"-wal", nil, 0o644)
	if err := PrivateFile(db); err != nil {
		t.Fatal(err)
	}
	for p, want := range map[string]os.FileMode{state: 0o700, filepath.Join(dir, "new", "state"): 0o700, db: 0o600, db + "-wal": 0o600} {
		fi, err := os.Stat(p)
		if err != nil || fi.Mode().Perm() != want {
			t.Errorf("%s: mode %v (%v), want %v", p, fi.Mode().Perm(), err, want)
		}
	}
}

// OwnDir is a directory of this process's user that nobody else can
// enter: a link in its place, a file, or another user's directory is
// refused; ours is made, or closed to others.
func TestOwnDirRefusesWhatAnotherUserCouldHaveMade(t *testing.T) {
	both(t, func(t *testing.T) {
		dir := t.TempDir()
		elsewhere := filepath.Join(dir, "elsewhere")
		os.Mkdir(elsewhere, 0o700)
		os.Symlink(elsewhere, filepath.Join(dir, "link"))
		if _, err := OwnDir(filepath.Join(dir, "link")); !errors.Is(err, ErrLink) {
			t.Errorf("a link: %v, want ErrLink", err)
		}
		os.WriteFile(filepath.Join(dir, "file"), nil, 0o600)
		if _, err := OwnDir(filepath.Join(dir, "file")); err == nil {
			t.Error("a file was taken for a directory")
		}
		if os.Geteuid() == 0 {
			other := filepath.Join(dir, "other")
			os.Mkdir(other, 0o700)
			os.Chown(other, 65534, 65534)
			if _, err := OwnDir(other); err == nil || !strings.Contains(err.Error(), "owned by uid 65534") {
				t.Errorf("another user's directory: %v", err)
			}
		}
		open := filepath.Join(dir, "open")
		os.Mkdir(open, 0o777)
		os.Chmod(open, 0o777)
		for _, p := range []string{open, filepath.Join(dir, "new")} {
			d, err := OwnDir(p)
			if err != nil {
				t.Fatal(err)
			}
			d.Close()
			if fi, err := os.Lstat(p); err != nil || !fi.IsDir() || fi.Mode().Perm() != 0o700 {
				t.Errorf("%s: %v %v, want a directory 0700", p, fi.Mode(), err)
			}
		}
	})
}

// A Resolver checks a directory once, but every entry each time: an
// entry replaced by a link, to a file outside the roots, is refused as
// ResolveIn refuses it; one to another entry resolves to that entry.
func TestResolverChecksEachEntryAfterItsDirectory(t *testing.T) {
	both(t, func(t *testing.T) {
		dir := t.TempDir()
		root, ds := filepath.Join(dir, "data"), filepath.Join(dir, "data", "ds")
		os.MkdirAll(ds, 0o755)
		os.WriteFile(filepath.Join(dir, "secret"), nil, 0o600)
		for _, n := range []string{"a", "b", "c"} {
			os.WriteFile(filepath.Join(ds, n), nil, 0o644)
		}
		res := NewResolver([]string{root})
		defer res.Close()
		if got, err := res.ResolveIn(filepath.Join(ds, "a")); err != nil || got != filepath.Join(ds, "a") {
			t.Fatalf("a: %q, %v", got, err)
		}
		os.Remove(filepath.Join(ds, "b"))
		os.Symlink(filepath.Join(dir, "secret"), filepath.Join(ds, "b"))
		if _, err := res.ResolveIn(filepath.Join(ds, "b")); !errors.Is(err, ErrLink) {
			t.Errorf("b, a link out of the roots: %v, want ErrLink", err)
		}
		os.Remove(filepath.Join(ds, "c"))
		os.Symlink(filepath.Join(ds, "a"), filepath.Join(ds, "c"))
		if got, err := res.ResolveIn(filepath.Join(ds, "c")); err != nil || got != filepath.Join(ds, "a") {
			t.Errorf("c, a link to a: %q, %v", got, err)
		}
		for _, p := range []string{filepath.Join(dir, "secret"), ds + "/../../secret", filepath.Join(ds, "missing")} {
			if _, err := res.ResolveIn(p); err == nil {
				t.Errorf("%s: resolved", p)
			}
		}
	})
}

// PrivateDir refuses, without changing anything, a state directory
// another local user could have prepared in a shared place (a link to a
// directory of theirs or of the system's, their own directory) or could
// replace later (anything of theirs, or open to them, on the way).
func TestPrivateDirRefusesWhatAnotherUserControls(t *testing.T) {
	dir := t.TempDir()
	mk := func(p string, mode os.FileMode) string {
		p = filepath.Join(dir, p)
		if err := os.Mkdir(p, mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, mode); err != nil {
			t.Fatal(err)
		}
		return p
	}
	victim := mk("victim", 0o755) // say /etc
	os.Symlink(victim, filepath.Join(dir, "link"))
	open := mk("open", 0o777)
	sticky := mk("sticky", 0o777|os.ModeSticky) // say /tmp
	ours := mk("ours", 0o777)
	os.Symlink(sticky, filepath.Join(dir, "oklink"))
	type tc struct {
		path, err string
	}
	cases := []tc{
		{"link", "symbolic link"},
		{"open/state", "writable by others (mode 0777) without the sticky bit"},
		{"open/a/b/state", "writable by others"},
		{"ours", "writable by others (mode 0777), who may have put files in it"},
		{"victim/../link", "symbolic link"},
	}
	if os.Geteuid() == 0 {
		theirs := mk("sticky/theirs", 0o700)
		os.Chown(theirs, 65534, 65534)
		mk("sticky/theirsparent", 0o755)
		os.Chown(filepath.Join(dir, "sticky/theirsparent"), 65534, 65534)
		os.Symlink(victim, filepath.Join(dir, "sticky/theirlink"))
		os.Lchown(filepath.Join(dir, "sticky/theirlink"), 65534, 65534)
		cases = append(cases,
			tc{"sticky/theirs", "owned by uid 65534 (another user made it first?)"},
			tc{"sticky/theirsparent/state", "owned by uid 65534"},
			tc{"sticky/theirlink/state", "symbolic link of uid 65534"},
		)
	}
	for _, c := range cases {
		err := PrivateDir(filepath.Join(dir, c.path))
		if err == nil || !strings.Contains(err.Error(), c.err) {
			t.Errorf("%s: %v, want %q", c.path, err, c.err)
		}
	}
	// Nothing was made or changed.
	for p, want := range map[string]os.FileMode{victim: 0o755, open: 0o777, ours: 0o777} {
		if fi, err := os.Stat(p); err != nil || fi.Mode().Perm() != want {
			t.Errorf("%s: mode %v (%v), want %v", p, fi.Mode().Perm(), err, want)
		}
	}
	for _, p := range []string{"open/state", "open/a", "victim/state", "sticky/theirsparent/state", "sticky/theirlink/state"} {
		if _, err := os.Lstat(filepath.Join(dir, p)); err == nil {
			t.Errorf("%s was made", p)
		}
	}
	// A sticky directory of root's (or ours) on the way, and links of
	// ours, are fine: the state is made 0700 where the links lead.
	for _, p := range []string{"sticky/state", "oklink/a/b/state"} {
		if err := PrivateDir(filepath.Join(dir, p)); err != nil {
			t.Errorf("%s: %v", p, err)
		}
	}
	for _, p := range []string{"sticky/state", "sticky/a", "sticky/a/b/state"} {
		if fi, err := os.Lstat(filepath.Join(dir, p)); err != nil || !fi.IsDir() || fi.Mode().Perm() != 0o700 {
			t.Errorf("%s: %v (%v), want a directory 0700", p, fi.Mode(), err)
		}
	}
}
