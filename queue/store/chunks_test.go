package store

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// The sizer aims each transaction at chunkBudget from the last one's lock
// time per row, at most doubling, at least a quarter, within its bounds.
func TestChunkSizerAimsAtTheBudget(t *testing.T) {
	z := newChunkSizer(1000)
	if z.size() != chunkStart {
		t.Fatalf("first chunk %d, want %d", z.size(), chunkStart)
	}
	z.took(64, chunkBudget/16) // 16 times too fast: grows, but only doubles
	if z.size() != 128 {
		t.Fatalf("after a fast chunk: %d, want 128 (doubled)", z.size())
	}
	z.took(128, chunkBudget/2) // twice too fast: 256 would fit
	if z.size() != 256 {
		t.Fatalf("after a chunk at half the budget: %d, want 256", z.size())
	}
	z.took(256, 2*chunkBudget) // twice too slow: 128 would fit
	if z.size() != 128 {
		t.Fatalf("after a chunk at twice the budget: %d, want 128", z.size())
	}
	z.took(128, 20*chunkBudget) // a stretched one: a quarter, not a twentieth
	if z.size() != 32 {
		t.Fatalf("after a chunk at 20 times the budget: %d, want 32 (a quarter)", z.size())
	}
	z.took(32, 20*chunkBudget)
	if z.size() != chunkMin {
		t.Fatalf("after another: %d, want the floor %d", z.size(), chunkMin)
	}
	for range 20 {
		z.took(z.size(), 0) // nothing measurable: doubles up to the limit
	}
	if z.size() != 1000 {
		t.Fatalf("after fast chunks: %d, want the limit 1000", z.size())
	}
	z.took(0, time.Second) // nothing written: nothing learnt
	if z.size() != 1000 {
		t.Fatalf("after an empty chunk: %d, want 1000", z.size())
	}
	if z := newChunkSizer(5); z.size() != 5 {
		t.Fatalf("limit 5: first chunk %d", z.size())
	} else if z.took(5, time.Hour); z.size() != 5 {
		t.Fatalf("limit 5 under the floor: %d, want 5 (the limit is the caller's)", z.size())
	}
	if z := newChunkSizer(0); z.size() != 1 {
		t.Fatalf("limit 0: %d, want 1", z.size())
	}
}

// InsertTasks stores every name exactly (they travel as a JSON array), in
// chunks that start small and never pass the limit, and refuses a name
// that is not UTF-8 before storing anything.
func TestInsertTasksStoresNamesExactlyInSizedChunks(t *testing.T) {
	s, _ := openWithJob(t, filepath.Join(t.TempDir(), "q.db"), 1)
	defer s.Close()
	ctx := context.Background()
	id, err := s.CreateJob(ctx, NewJob{Owner: "bob", Dataset: "/d", Command: []string{"p"}, BatchSize: 1, Price: 1, Cores: 1, MaxAttempts: 3, Submitted: t0, Expires: t0.Add(time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	odd := []string{`quote"d`, `back\slash`, "tab\there", "new\nline", "ünïcødé", "雪", "[not, json]", "emoji 🙂", strings.Repeat("long", 500)}
	names := make([]string, 0, 5000)
	for i := range 5000 - len(odd) {
		names = append(names, fmt.Sprintf("f%06d", i))
	}
	names = append(names, odd...)
	var sizes []int
	if err := s.InsertTasks(ctx, id, names, t0, 300, func(k int) { sizes = append(sizes, k) }); err != nil {
		t.Fatal(err)
	}
	total := 0
	for _, k := range sizes {
		if k > 300 || k < 1 {
			t.Fatalf("chunk of %d tasks, limit 300: %v", k, sizes)
		}
		total += k
	}
	if total != len(names) || sizes[0] != chunkStart {
		t.Fatalf("chunks %v: %d tasks, first %d; want %d, first %d", sizes, total, sizes[0], len(names), chunkStart)
	}
	rows, err := s.r.Query(`SELECT name, state FROM tasks WHERE job_id = ? ORDER BY id`, id)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for rows.Next() {
		var n, st string
		rows.Scan(&n, &st)
		if st != "WAITING" {
			t.Fatalf("task %q %s", n, st)
		}
		got = append(got, n)
	}
	rows.Close()
	if len(got) != len(names) {
		t.Fatalf("%d tasks stored, want %d", len(got), len(names))
	}
	for i := range names {
		if got[i] != names[i] {
			t.Fatalf("task %d stored as %q, want %q", i, got[i], names[i])
		}
	}

	other, err := s.CreateJob(ctx, NewJob{Owner: "bob", Dataset: "/e", Command: []string{"p"}, BatchSize: 1, Price: 1, Cores: 1, MaxAttempts: 3, Submitted: t0, Expires: t0.Add(time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	err = s.InsertTasks(ctx, other, []string{"good", "bad\xff"}, t0, 300, nil)
	if err == nil || !strings.Contains(err.Error(), "not valid UTF-8") {
		t.Fatalf("a name that is not UTF-8: %v", err)
	}
	var n int
	s.r.QueryRow(`SELECT count(*) FROM tasks WHERE job_id = ?`, other).Scan(&n)
	if n != 0 {
		t.Fatalf("%d tasks stored for a refused insert", n)
	}
}
