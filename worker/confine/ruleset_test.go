package confine

import (
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

// BenchmarkTaskRuleset is what a task whose entry is a link costs its
// job's runner beyond a plain task's start: a ruleset of its own, from
// the job's rules (opened once) and the link's target (opened here).
// The fork, the exec and the landlock_restrict_self are not in it.
func BenchmarkTaskRuleset(b *testing.B) {
	sup := Probe()
	if sup.ABI == 0 {
		b.Skipf("no Landlock: %v", sup.Err)
	}
	dir := b.TempDir()
	target := filepath.Join(dir, "x")
	os.WriteFile(target, nil, 0o644)
	tr, err := newTaskRules(Policy{Read: append(SystemRead, dir), Write: []string{dir}}, sup.ABI)
	if err != nil {
		b.Fatal(err)
	}
	defer tr.close()
	for b.Loop() {
		fd, err := tr.ruleset([]string{target})
		if err != nil {
			b.Fatal(err)
		}
		unix.Close(fd)
	}
	b.ReportMetric(float64(len(tr.rules)+1), "rules")
}

// On a merged-/usr system (/bin a link to usr/bin), the system's links
// into /usr add no rule to a task's domain: /usr's covers what they lead
// to, and every rule is copied into each task's new domain at its start.
// A link whose cover is not in the list keeps its rule.
func TestLinkedSystemDirectoriesAddNoRule(t *testing.T) {
	sup := Probe()
	if sup.ABI == 0 {
		t.Skipf("no Landlock: %v", sup.Err)
	}
	if real, err := filepath.EvalSymlinks("/bin"); err != nil || real != "/usr/bin" {
		t.Skipf("/bin is %q here, not a link to /usr/bin (%v)", real, err)
	}
	if got := linkedSystem()["/bin"]; got != "/usr" {
		t.Fatalf("linkedSystem()[/bin] = %q, want /usr", got)
	}
	if got := readPaths([]string{"/bin", "/etc"}); len(got) != 2 {
		t.Errorf("readPaths without /usr = %v, want /bin kept", got)
	}
	tr, err := newTaskRules(Policy{Read: SystemRead}, sup.ABI)
	if err != nil {
		t.Fatal(err)
	}
	defer tr.close()
	inode := func(fd int) [2]uint64 {
		var st unix.Stat_t
		if err := unix.Fstat(fd, &st); err != nil {
			t.Fatal(err)
		}
		return [2]uint64{st.Dev, st.Ino}
	}
	usrBin, err := unix.Open("/usr/bin", unix.O_PATH|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(usrBin)
	n := 0
	for _, p := range SystemRead {
		if _, err := os.Stat(p); err == nil {
			n++
		}
	}
	for _, r := range tr.rules {
		if inode(r.fd) == inode(usrBin) {
			t.Errorf("a rule of its own for /usr/bin (through /bin)")
		}
	}
	if want := n - len(linkedSystem()) + len(SystemWrite); len(tr.rules) > want {
		t.Errorf("%d rules, want at most %d", len(tr.rules), want)
	}
}
