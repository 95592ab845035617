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
