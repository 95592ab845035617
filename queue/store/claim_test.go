package store

import (
	"context"
	"errors"
	"testing"

	"github.com/harvest-hpc/harvest/internal/pgtest"
)

// A queue alone on a PostgreSQL schema shuts out every other, and agents
// that share it (--peer) shut out one that would run alone; a closed
// store gives its claim up; another schema of the same database is not
// concerned.
func TestAClaimedDatabaseRefusesAQueueOfTheOtherMode(t *testing.T) {
	if !pgtest.Enabled() {
		t.Skip("a claim is a PostgreSQL advisory lock (SQLite: internal/statelock): run with HARVEST_TEST_DB=postgres")
	}
	ctx := context.Background()
	url := pgtest.URL(t)
	open := func() *Store {
		s, err := Open(url)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	}
	alone := open()
	if err := alone.Claim(ctx, false, 0); err != nil {
		t.Fatalf("the first queue: %v", err)
	}
	for _, shared := range []bool{false, true} {
		if err := open().Claim(ctx, shared, 0); !errors.Is(err, ErrClaimed) {
			t.Errorf("beside a queue alone, claim (shared %v): %v, want ErrClaimed", shared, err)
		}
	}
	other, err := Open(pgtest.URL(t))
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	if err := other.Claim(ctx, false, 0); err != nil {
		t.Errorf("a queue alone on another schema: %v", err)
	}
	alone.Close()
	a, b := open(), open()
	if err := a.Claim(ctx, true, 0); err != nil {
		t.Fatalf("a shared claim once the queue alone closed: %v", err)
	}
	if err := b.Claim(ctx, true, 0); err != nil {
		t.Fatalf("a second shared claim: %v", err)
	}
	if err := open().Claim(ctx, false, 0); !errors.Is(err, ErrClaimed) {
		t.Errorf("a queue alone beside two that share: %v, want ErrClaimed", err)
	}
}
