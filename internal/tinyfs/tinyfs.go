// Package tinyfs gives tests a real small file system (a tmpfs of a few
// KiB) to fill up or make read-only: the failures of a full or
// unwritable state directory, made by the kernel rather than faked.
// Mounting needs root; elsewhere the test is skipped, saying why.
package tinyfs

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
)

// Mount mounts a tmpfs of size (mount's syntax: "64k") on a fresh
// directory and unmounts it when the test ends.
func Mount(t testing.TB, size string) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root to mount a small tmpfs (the full or read-only state directory is made by the kernel)")
	}
	dir := t.TempDir()
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size="+size+",mode=0700", "tmpfs", dir).CombinedOutput(); err != nil {
		t.Skipf("cannot mount a tmpfs here: %v: %s", err, out)
	}
	t.Cleanup(func() {
		if out, err := exec.Command("umount", dir).CombinedOutput(); err != nil {
			t.Errorf("umount %s: %v: %s", dir, err, out)
		}
	})
	return dir
}

// Fill writes a file in dir until the file system is full and returns a
// function that removes it.
func Fill(t testing.TB, dir string) (free func()) {
	t.Helper()
	p := filepath.Join(dir, "filler")
	f, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	buf := make([]byte, 4096)
	for {
		if _, err := f.Write(buf); err != nil {
			if !errors.Is(err, syscall.ENOSPC) {
				t.Fatalf("filling %s: %v", dir, err)
			}
			break
		}
	}
	// A last partial block.
	for {
		if _, err := f.Write(buf[:1]); err != nil {
			break
		}
	}
	return func() {
		if err := os.Remove(p); err != nil {
			t.Fatal(err)
		}
	}
}

// ReadOnly remounts dir's tmpfs read-only (and read-write when the test
// ends, so that it can be cleaned up).
func ReadOnly(t testing.TB, dir string) {
	t.Helper()
	if out, err := exec.Command("mount", "-o", "remount,ro", dir).CombinedOutput(); err != nil {
		t.Fatalf("remount %s read-only: %v: %s", dir, err, out)
	}
	t.Cleanup(func() { exec.Command("mount", "-o", "remount,rw", dir).Run() })
}
