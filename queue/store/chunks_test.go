package store

import (
	"github.com/harvest-hpc/harvest/internal/pgtest"

	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/harvest-hpc/harvest/pilotproto"
)

// The sizer aims each transaction at chunkBudget from the last one's lock
// time per row, at most doubling, at least a quarter, within its bounds.
func TestChunkSizerAimsAtTheBudget(t *testing.T) {
	z := (&Store{}).chunks(1000)
	if z.n != chunkStart {
		t.Fatalf("first chunk %d, want %d", z.n, chunkStart)
	}
	z.took(64, chunkBudget/16) // 16 times too fast: grows, but only doubles
	if z.n != 128 {
		t.Fatalf("after a fast chunk: %d, want 128 (doubled)", z.n)
	}
	z.took(128, chunkBudget/2) // twice too fast: 256 would fit
	if z.n != 256 {
		t.Fatalf("after a chunk at half the budget: %d, want 256", z.n)
	}
	z.took(256, 2*chunkBudget) // twice too slow: 128 would fit
	if z.n != 128 {
		t.Fatalf("after a chunk at twice the budget: %d, want 128", z.n)
	}
	z.took(128, 20*chunkBudget) // a stretched one: a quarter, not a twentieth
	if z.n != 32 {
		t.Fatalf("after a chunk at 20 times the budget: %d, want 32 (a quarter)", z.n)
	}
	z.took(32, 20*chunkBudget)
	if z.n != chunkMin {
		t.Fatalf("after another: %d, want the floor %d", z.n, chunkMin)
	}
	for range 20 {
		z.took(z.n, 0) // nothing measurable: doubles up to the limit
	}
	if z.n != 1000 {
		t.Fatalf("after fast chunks: %d, want the limit 1000", z.n)
	}
	z.took(0, time.Second) // nothing written: nothing learnt
	if z.n != 1000 {
		t.Fatalf("after an empty chunk: %d, want 1000", z.n)
	}
	if z := (&Store{}).chunks(5); z.n != 5 {
		t.Fatalf("limit 5: first chunk %d", z.n)
	} else if z.took(5, time.Hour); z.n != 5 {
		t.Fatalf("limit 5 under the floor: %d, want 5 (the limit is the caller's)", z.n)
	}
	if z := (&Store{}).chunks(0); z.n != 1 {
		t.Fatalf("limit 0: %d, want 1", z.n)
	}
}

// InsertTasks stores every name exactly, in chunks that start small and
// never pass the limit.
func TestInsertTasksStoresNamesExactlyInSizedChunks(t *testing.T) {
	s, _ := openWithJob(t, pgtest.DB(t, filepath.Join(t.TempDir(), "q.db")), 1)
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
	if err := s.InsertTasks(ctx, id, names, 300, func(k int) { sizes = append(sizes, k) }); err != nil {
		t.Fatal(err)
	}
	total := 0
	for _, k := range sizes {
		if k > 300 || k < 1 {
			t.Fatalf("chunk of %d tasks, limit 300: %v", k, sizes)
		}
		total += k
	}
	first := chunkStart
	if s.pg {
		first = 300 // no write lock to keep short: the limit
	}
	if total != len(names) || sizes[0] != first {
		t.Fatalf("chunks %v: %d tasks, first %d; want %d, first %d", sizes, total, sizes[0], len(names), first)
	}
	rows, err := s.r.Query(`SELECT name, state FROM tasks WHERE job_id = $1 ORDER BY id`, id)
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
}

// Failed results with the longest error tails the API takes, one a
// transaction as the queue applies them (its resultsChunk), keep the last
// failure's tail whole in the entry's exception row (harvest failures).
func TestLongErrorTailsAreKeptWhole(t *testing.T) {
	s, job := openWithJob(t, pgtest.DB(t, filepath.Join(t.TempDir(), "q.db")), 200)
	defer s.Close()
	ctx := context.Background()
	const n, tail = 40, 64 << 10
	for round := range 2 {
		ts := take(t, s, job, n)
		rs := make([]pilotproto.Result, len(ts))
		for i, tk := range ts {
			rs[i] = pilotproto.Result{TaskID: tk.ID, Attempt: tk.Attempt, Status: pilotproto.StatusFailed, ExitCode: 1, DurationMS: 10,
				ErrorTail: fmt.Sprintf("%s%06d", strings.Repeat("e", tail-6), tk.ID&0xffffffff)}
		}
		for _, r := range rs {
			if _, err := s.ApplyResults(ctx, "local", 1, t0, []pilotproto.Result{r}); err != nil {
				t.Fatalf("round %d: %v", round, err)
			}
		}
	}
	var whole, rows int
	xs, err := s.r.Query(`SELECT idx, error_tail, tries FROM exceptions`)
	if err != nil {
		t.Fatal(err)
	}
	for xs.Next() {
		var idx, tries int
		var et string
		if err := xs.Scan(&idx, &et, &tries); err != nil {
			t.Fatal(err)
		}
		rows++
		if len(et) == tail && strings.HasSuffix(et, fmt.Sprintf("%06d", idx)) && tries == 2 {
			whole++
		}
	}
	xs.Close()
	if rows != n || whole != n {
		t.Fatalf("%d exceptions stored, %d with their whole last tail after two failures; want %d", rows, whole, n)
	}
}
