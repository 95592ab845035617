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
