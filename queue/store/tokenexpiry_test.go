package store

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/harvest-hpc/harvest/internal/pgtest"
)

// A token's expiry is stored with it, read back with its identity and
// its listing, and SweepTokens deletes the expired ones only: tokens
// without one (zero: every token made before, the sites') stay.
func TestTokenExpiryIsStoredAndSwept(t *testing.T) {
	s, err := Open(pgtest.DB(t, filepath.Join(t.TempDir(), "q.db")))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	t0 := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	if err := s.PutToken(ctx, "short", "alice", "user", t0, t0.Add(time.Hour), 10); err != nil {
		t.Fatal(err)
	}
	if err := s.PutToken(ctx, "forever", "alice", "user", t0, time.Time{}, 10); err != nil {
		t.Fatal(err)
	}
	if err := s.AddSite(ctx, "b", "agent", "agent", t0); err != nil {
		t.Fatal(err)
	}
	if _, _, exp, ok, err := s.TokenIdentity(ctx, "short"); err != nil || !ok || !exp.Equal(t0.Add(time.Hour)) {
		t.Fatalf("short token: expires %v, %v %v", exp, ok, err)
	}
	if _, _, exp, ok, err := s.TokenIdentity(ctx, "forever"); err != nil || !ok || !exp.IsZero() {
		t.Fatalf("token without expiry: expires %v, %v %v", exp, ok, err)
	}
	ts, err := s.Tokens(ctx, "alice")
	if err != nil || len(ts) != 2 {
		t.Fatalf("tokens %+v %v", ts, err)
	}
	for _, tk := range ts {
		if want := tk.Hash == "short"; want != !tk.Expires.IsZero() {
			t.Errorf("listed %s expires %v", tk.Hash, tk.Expires)
		}
	}
	if n, err := s.SweepTokens(ctx, t0.Add(time.Hour-time.Millisecond)); err != nil || n != 0 {
		t.Fatalf("sweep before the expiry: %d %v", n, err)
	}
	if n, err := s.SweepTokens(ctx, t0.Add(time.Hour)); err != nil || n != 1 {
		t.Fatalf("sweep at the expiry: %d %v", n, err)
	}
	for _, h := range []string{"forever", "agent"} {
		if _, _, _, ok, _ := s.TokenIdentity(ctx, h); !ok {
			t.Errorf("token %s swept", h)
		}
	}
	if _, _, _, ok, _ := s.TokenIdentity(ctx, "short"); ok {
		t.Error("the expired token was not swept")
	}
}
