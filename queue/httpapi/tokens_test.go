package httpapi_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/harvest-hpc/harvest/queue"
	"github.com/harvest-hpc/harvest/queue/api"
	"github.com/harvest-hpc/harvest/queue/queuetest"
)

// A user could mint tokens without end (each a row of the tokens table)
// and could neither see nor revoke them. Now a user holds at most
// MaxTokensPerUser per role; the next is refused (409, nothing stored)
// until one is revoked; users list and revoke their own, admins anyone's.
func TestTokensAreCappedListedAndRevokedByTheirOwner(t *testing.T) {
	const limit = 3
	e := queuetest.New(t, func(c *queue.Config) { c.MaxTokensPerUser = limit })
	ctx := context.Background()
	alice := e.Client("alice")
	// alice holds one token (the environment's); she makes two more.
	made := []string{e.Tokens["alice"]}
	for len(made) < limit {
		tok, err := alice.CreateToken(ctx, api.TokenRequest{})
		if err != nil {
			t.Fatalf("token %d of %d: %v", len(made)+1, limit, err)
		}
		made = append(made, tok.Token)
	}
	before := e.Snapshot(t)
	code, msg := e.Raw("POST", api.PathTokens, "alice", `{}`)
	if code != http.StatusConflict || !strings.Contains(msg, "revoke") {
		t.Fatalf("token %d: %d %q, want 409 naming how to revoke one", limit+1, code, msg)
	}
	if after := e.Snapshot(t); after != before {
		t.Errorf("a refused token changed the database:\n%s", after)
	}
	// The cap is per user: bob is not affected by alice's tokens.
	if _, err := e.Client("bob").CreateToken(ctx, api.TokenRequest{}); err != nil {
		t.Errorf("bob's second token: %v", err)
	}

	ts, err := alice.Tokens(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	if len(ts) != limit {
		t.Fatalf("alice lists %d tokens, want %d: %+v", len(ts), limit, ts)
	}
	for _, tk := range ts {
		if tk.User != "alice" || tk.Role != api.RoleUser || len(tk.ID) != api.TokenIDLen || strings.Contains(strings.Join(made, " "), tk.ID) {
			t.Errorf("listed token %+v: want alice's user token, a %d-digit ID that is not part of a token", tk, api.TokenIDLen)
		}
	}
	// Nobody lists or revokes another user's tokens but an admin.
	if _, err := e.Client("bob").Tokens(ctx, "alice"); !errors.Is(err, api.ErrForbidden) {
		t.Errorf("bob lists alice's tokens: %v, want forbidden", err)
	}
	if err := e.Client("bob").RevokeToken(ctx, "alice", ts[0].ID); !errors.Is(err, api.ErrForbidden) {
		t.Errorf("bob revokes alice's token: %v, want forbidden", err)
	}
	if as, err := e.Client("admin").Tokens(ctx, "alice"); err != nil || len(as) != limit {
		t.Errorf("the admin lists alice's tokens: %d, %v; want %d", len(as), err, limit)
	}
	// Bad and unknown IDs change nothing.
	before = e.Snapshot(t)
	for _, tc := range []struct {
		id   string
		want error
	}{{"xyz", api.ErrInvalid}, {"ABCDEF123456", api.ErrInvalid}, {"1234", api.ErrInvalid}, {"%25%25%25%25%25%25%25%25", api.ErrInvalid}, {"000000000000", api.ErrNotFound}} {
		if err := alice.RevokeToken(ctx, "", tc.id); !errors.Is(err, tc.want) {
			t.Errorf("revoke %q: %v, want %v", tc.id, err, tc.want)
		}
	}
	if after := e.Snapshot(t); after != before {
		t.Errorf("a refused revoke changed the database:\n%s", after)
	}

	// alice revokes the token she authenticates with last: which one is it?
	// Revoke every other one by ID; the one left still works.
	var revoked int
	for _, tk := range ts {
		if hashPrefix(e.Tokens["alice"], tk.ID) {
			continue
		}
		if err := alice.RevokeToken(ctx, "", tk.ID); err != nil {
			t.Fatalf("revoke %s: %v", tk.ID, err)
		}
		revoked++
	}
	if revoked != limit-1 {
		t.Fatalf("revoked %d tokens, want %d (one ID per token)", revoked, limit-1)
	}
	for _, tok := range made[1:] {
		if code, _ := e.Raw("GET", api.PathWhoami, tok, ""); code != http.StatusUnauthorized {
			t.Errorf("a revoked token answers %d, want 401", code)
		}
	}
	if left := mustTokens(t, alice); len(left) != 1 {
		t.Errorf("alice has %d tokens after revoking %d of %d", len(left), revoked, limit)
	}
	// Room again.
	if _, err := alice.CreateToken(ctx, api.TokenRequest{}); err != nil {
		t.Errorf("a token after revoking: %v", err)
	}
}

// A site's agent token is stored under the site's name with role agent: a
// user of the same name neither lists nor revokes it.
func TestAUserNamedLikeASiteCannotRevokeItsAgentToken(t *testing.T) {
	e := queuetest.New(t)
	e.AddSite(t, "alice", "pilot-secret-of-site-alice-0123456789abcdef")
	ts := mustTokens(t, e.Client("alice"))
	for _, tk := range ts {
		if tk.Role != api.RoleUser {
			t.Errorf("alice lists %+v: only her user tokens should show", tk)
		}
	}
	agentID := ""
	for _, tk := range tokenRows(t, e) {
		if tk[1] == api.RoleAgent {
			agentID = tk[0][:api.TokenIDLen]
		}
	}
	if agentID == "" {
		t.Fatal("no agent token stored for site alice")
	}
	if err := e.Client("alice").RevokeToken(context.Background(), "", agentID); !errors.Is(err, api.ErrNotFound) {
		t.Errorf("alice revokes site alice's agent token: %v, want not found", err)
	}
	if code, _ := e.Raw("POST", api.PathAgentRound, "agent-alice", `{}`); code == http.StatusUnauthorized {
		t.Error("the site's agent token stopped working")
	}
}

// hashPrefix is whether id is the ID of token tok.
func hashPrefix(tok, id string) bool {
	sum := sha256.Sum256([]byte(tok))
	return strings.HasPrefix(hex.EncodeToString(sum[:]), id)
}

func mustTokens(t *testing.T, c interface {
	Tokens(context.Context, string) ([]api.TokenInfo, error)
}) []api.TokenInfo {
	t.Helper()
	ts, err := c.Tokens(context.Background(), "")
	if err != nil {
		t.Fatal(err)
	}
	return ts
}

// tokenRows are the stored tokens' (hash, role).
func tokenRows(t *testing.T, e *queuetest.Env) [][2]string {
	t.Helper()
	rows, err := e.Query(`SELECT hash, role FROM tokens ORDER BY hash`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out [][2]string
	for rows.Next() {
		var r [2]string
		if err := rows.Scan(&r[0], &r[1]); err != nil {
			t.Fatal(err)
		}
		out = append(out, r)
	}
	return out
}
