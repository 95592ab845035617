package main

import (
	"io"
	"os"
	"path/filepath"
	"testing"
)

// A link planted at PATH.tmp (a shared output directory) is replaced, not
// followed: root running harvest replay must not overwrite what it names.
func TestWriteFileDoesNotFollowALinkAtItsTemporaryName(t *testing.T) {
	dir := t.TempDir()
	victim := filepath.Join(dir, "victim")
	if err := os.WriteFile(victim, []byte("keep"), 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "report.json")
	if err := os.Symlink(victim, out+".tmp"); err != nil {
		t.Fatal(err)
	}
	if err := writeFile(out, func(w io.Writer) error { _, err := io.WriteString(w, "new"); return err }); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(victim); string(b) != "keep" {
		t.Fatalf("the link's target was written: %q", b)
	}
	if b, _ := os.ReadFile(out); string(b) != "new" {
		t.Fatalf("output %q, want new", b)
	}
	if _, err := os.Lstat(out + ".tmp"); !os.IsNotExist(err) {
		t.Fatalf("the temporary name is left: %v", err)
	}
}
