package master_test

import (
	"strings"
	"testing"

	"github.com/harvest-hpc/harvest/internal/tinyfs"
	"github.com/harvest-hpc/harvest/master"
)

// TestTheCopyOfAnEpochOnAFullDiskSaysToFreeSpace: the copy of the last
// epoch's checkpoint failing on a full state directory said "if the file
// is damaged, move it away", which would throw the checkpoint away for a
// disk that only needs room. It says to free space, and keeps the
// damaged-file hint for other failures.
func TestTheCopyOfAnEpochOnAFullDiskSaysToFreeSpace(t *testing.T) {
	dir := tinyfs.Mount(t, "512k")
	one, _, err := master.OpenCheckpoint(dir, 1, master.DefaultJournal)
	if err != nil {
		t.Fatal(err)
	}
	one.Close()
	tinyfs.Fill(t, dir)
	_, _, err = master.OpenCheckpoint(dir, 2, master.DefaultJournal)
	if err == nil || strings.Contains(err.Error(), "move it away") || !strings.Contains(err.Error(), "free space in") {
		t.Fatalf("open of epoch 2 in a full directory: %v, want a hint to free space, not to move the checkpoint away", err)
	}
}
