package master_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/harvest-hpc/harvest/master"
)

// A pilot does not keep its checkpoint (every task's command, read back
// and run by the next master) where another user could replace it: a
// directory any user may write without the sticky bit, or another
// user's. Nothing is written in it. Sticky (as a shared /tmp) is fine.
func TestCheckStateDirRefusesADirectoryAnotherUserControls(t *testing.T) {
	dir := t.TempDir()
	mk := func(name string, mode os.FileMode) string {
		p := filepath.Join(dir, name)
		os.Mkdir(p, mode)
		os.Chmod(p, mode)
		return p
	}
	cases := map[string]string{mk("open", 0o777): "mode 0777: any user may replace the checkpoint"}
	if os.Geteuid() == 0 {
		theirs := mk("theirs", 0o755)
		os.Chown(theirs, 65534, 65534)
		cases[theirs] = "owned by uid 65534"
	}
	for p, want := range cases {
		err := master.CheckStateDir(p)
		if !errors.Is(err, master.ErrStateDir) || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want ErrStateDir saying %q", p, err, want)
		}
		if ents, _ := os.ReadDir(p); len(ents) != 0 {
			t.Errorf("%s: written in: %v", p, ents)
		}
	}
	if err := master.CheckStateDir(mk("sticky", 0o777|os.ModeSticky)); err != nil {
		t.Errorf("a sticky directory: %v", err)
	}
}
