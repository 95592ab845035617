package httpapi_test

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/harvest-hpc/harvest/queue"
	"github.com/harvest-hpc/harvest/queue/api"
	"github.com/harvest-hpc/harvest/queue/queuetest"
)

// Tokens never expired. A token now has a lifetime: its own (ttl_s) or
// the queue's default (--token-ttl); the listing shows when it expires;
// once expired it is refused with a 401 that says so, and the sweep
// deletes it. Tokens made without a lifetime (the default: none) live on.
func TestTokensExpire(t *testing.T) {
	e := queuetest.New(t) // alice's, bob's and admin's tokens: no lifetime
	e.Reopen(func(c *queue.Config) { c.TokenTTL = time.Hour })
	ctx := context.Background()
	before := e.Snapshot(t)
	for _, tc := range []struct {
		who, body string
		code      int
		msg       string
	}{
		{"alice", `{"ttl_s":-5}`, http.StatusBadRequest, "ttl_s must be positive"},
		{"alice", `{"ttl_s":999999999999}`, http.StatusBadRequest, "at most"},
		{"alice", `{"ttl_s":7200}`, http.StatusForbidden, "at most 1h0m0s"},
		{"alice", `{"ttl_s":"1h"}`, http.StatusBadRequest, "malformed JSON"},
	} {
		if code, msg := e.Raw("POST", api.PathTokens, tc.who, tc.body); code != tc.code || !strings.Contains(msg, tc.msg) {
			t.Errorf("%s %s: %d %q, want %d %q", tc.who, tc.body, code, msg, tc.code, tc.msg)
		}
	}
	if after := e.Snapshot(t); after != before {
		t.Fatalf("a refused token request changed the database:\n%s", after)
	}
	t0 := e.Clock.Now()
	def, err := e.Client("alice").CreateToken(ctx, api.TokenRequest{})
	if err != nil || def.ExpiresAt != t0.Add(time.Hour).Unix() {
		t.Fatalf("a token with the default lifetime: %+v %v", def, err)
	}
	short, err := e.Client("alice").CreateToken(ctx, api.TokenRequest{TTLSeconds: 600})
	if err != nil || short.ExpiresAt != t0.Add(10*time.Minute).Unix() {
		t.Fatalf("a 10-minute token: %+v %v", short, err)
	}
	long, err := e.Client("admin").CreateToken(ctx, api.TokenRequest{User: "bob", TTLSeconds: 30 * 24 * 3600})
	if err != nil || long.ExpiresAt != t0.Add(30*24*time.Hour).Unix() {
		t.Fatalf("an admin's 30-day token for bob: %+v %v", long, err)
	}
	ts, err := e.Client("admin").Tokens(ctx, "alice")
	if err != nil {
		t.Fatal(err)
	}
	expiring := 0
	for _, tk := range ts {
		if tk.ExpiresAt != 0 {
			expiring++
		}
	}
	if len(ts) != 3 || expiring != 2 {
		t.Fatalf("alice's tokens %+v: want 3, 2 of them expiring", ts)
	}
	if code, msg := e.Raw("GET", api.PathWhoami, short.Token, ""); code != http.StatusOK {
		t.Fatalf("a live token: %d %s", code, msg)
	}
	e.Clock.Advance(10 * time.Minute)
	if code, msg := e.Raw("GET", api.PathWhoami, short.Token, ""); code != http.StatusUnauthorized || !strings.Contains(msg, "expired at") {
		t.Errorf("an expired token: %d %q, want 401 saying it expired", code, msg)
	}
	if code, msg := e.Raw("GET", api.PathWhoami, def.Token, ""); code != http.StatusOK {
		t.Errorf("a token with 50 minutes left: %d %s", code, msg)
	}
	if err := e.Q.Sweep(ctx); err != nil {
		t.Fatal(err)
	}
	if n := e.Count(`SELECT count(*) FROM tokens WHERE "user" = 'alice'`); n != 2 {
		t.Errorf("after the sweep alice has %d token rows, want 2 (the expired one deleted)", n)
	}
	if code, msg := e.Raw("GET", api.PathWhoami, short.Token, ""); code != http.StatusUnauthorized || !strings.Contains(msg, "invalid token") {
		t.Errorf("a swept token: %d %q", code, msg)
	}
	e.Clock.Advance(24 * time.Hour)
	if code, msg := e.Raw("GET", api.PathWhoami, "alice", ""); code != http.StatusOK {
		t.Errorf("a token made without a lifetime: %d %s", code, msg)
	}
	if code, msg := e.Raw("GET", api.PathWhoami, long.Token, ""); code != http.StatusOK {
		t.Errorf("bob's 30-day token a day later: %d %s", code, msg)
	}
	if _, err := e.Client("alice").CreateToken(ctx, api.TokenRequest{TTLSeconds: -1}); !errors.Is(err, api.ErrInvalid) {
		t.Errorf("a negative lifetime through the client: %v", err)
	}
}
