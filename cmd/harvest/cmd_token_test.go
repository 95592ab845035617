package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestASavedTokenIsTheUsersOnlyEvenOverAnOldReadableFile: --save wrote
// the token with os.WriteFile, which keeps an existing file's mode, so a
// token file once made 0644 (by hand, by a copy, by an older tool) kept
// the new token readable by every local user. It must end 0600, in a
// directory only its owner may enter, and hold the new token whole.
func TestASavedTokenIsTheUsersOnlyEvenOverAnOldReadableFile(t *testing.T) {
	q := startCLIQueue(t)
	cfg := t.TempDir()
	t.Setenv("XDG_CONFIG_HOME", cfg)
	dir := filepath.Join(cfg, "harvest")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, "token")
	if err := os.WriteFile(p, []byte("hv_an_old_token_that_was_much_longer_than_the_new_one_is_going_to_be_at_all\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out, msg, code := run(t, "token", "create", "--save", "--queue", q.url, "--token", q.token)
	if code != 0 {
		t.Fatalf("token create --save: exit %d: %s", code, msg)
	}
	if !strings.Contains(out, p) {
		t.Fatalf("token create --save printed %q, not where it saved the token", out)
	}
	fi, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("the saved token is %v, want -rw-------", fi.Mode().Perm())
	}
	if di, _ := os.Stat(dir); di.Mode().Perm()&0o077 != 0 {
		t.Errorf("the token's directory is %v: others may enter it", di.Mode().Perm())
	}
	b, _ := os.ReadFile(p)
	tok := strings.TrimSpace(string(b))
	if !strings.HasPrefix(tok, "hv_") || strings.Contains(tok, "old") || tok == q.token {
		t.Fatalf("the token file holds %q, not the new token", b)
	}
	// The saved token is what the CLI uses next.
	if _, msg, code := run(t, "jobs", "--queue", q.url); code != 0 {
		t.Fatalf("jobs with the saved token: exit %d: %s", code, msg)
	}
}

// `harvest token list` shows the caller's tokens by ID and `harvest token
// revoke ID` revokes one: the revoked token stops working, the others do
// not; a bad ID is a usage error that names the list command.
func TestTokenListAndRevoke(t *testing.T) {
	q := startCLIQueue(t)
	t.Setenv("XDG_CONFIG_HOME", t.TempDir())
	extra, msg, code := run(t, "token", "create", "--queue", q.url, "--token", q.token)
	if code != 0 {
		t.Fatalf("token create: exit %d: %s", code, msg)
	}
	extra = strings.TrimSpace(extra)
	out, msg, code := run(t, "token", "list", "--queue", q.url, "--token", q.token)
	if code != 0 {
		t.Fatalf("token list: exit %d: %s", code, msg)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 3 || !strings.HasPrefix(lines[0], "ID") {
		t.Fatalf("token list printed %q, want a header and two tokens", out)
	}
	id := strings.Fields(lines[1])[0]
	if _, msg, code := run(t, "token", "revoke", id, "--queue", q.url, "--token", extra); code != 0 {
		t.Fatalf("token revoke %s: exit %d: %s", id, code, msg)
	}
	// Exactly one of the two tokens was revoked: it fails, the other works.
	var works []string
	for _, tok := range []string{q.token, extra} {
		if _, _, code := run(t, "token", "list", "--queue", q.url, "--token", tok); code == 0 {
			works = append(works, tok)
		}
	}
	if len(works) != 1 {
		t.Fatalf("after revoking one of two tokens, %d work", len(works))
	}
	kept := works[0]
	if _, msg, code := run(t, "token", "revoke", "not-hex", "--queue", q.url, "--token", kept); code == 0 || !strings.Contains(msg, "harvest token list") {
		t.Errorf("revoke of a bad ID: exit %d: %q, want an error naming harvest token list", code, msg)
	}
}
