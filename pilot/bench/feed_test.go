package bench

import (
	"fmt"
	"strings"
	"testing"
)

// TestFeedTasksComeInBatchesOfEachJobInTurn: the in-memory feed hands
// out what the queue's fair share would for equal users: a batch of each
// job in turn, every task once, the jobs sized as the real run's.
func TestFeedTasksComeInBatchesOfEachJobInTurn(t *testing.T) {
	ts := feedTasks(Config{Tasks: 17, Users: 2, BatchSize: 4, Dir: t.TempDir()})
	var runs []string
	for i := 0; i < len(ts); {
		k := i + 1
		for k < len(ts) && ts[k].JobID == ts[i].JobID {
			k++
		}
		runs = append(runs, fmt.Sprintf("%d:%d", ts[i].JobID, k-i))
		i = k
	}
	if got, want := strings.Join(runs, " "), "1:4 2:4 1:4 2:4 1:1"; got != want {
		t.Fatalf("feed runs %q, want %q", got, want)
	}
	for i, tk := range ts {
		if tk.ID != int64(i+1) {
			t.Fatalf("task %d has id %d", i, tk.ID)
		}
	}
}
