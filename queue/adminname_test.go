package queue_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/harvest-hpc/harvest/queue"
)

// An admin named by something no user name can be (a typo, a space) is
// refused at start, not a setting that silently makes nobody admin.
func TestAnAdminThatIsNoUserNameIsRefused(t *testing.T) {
	cfg := queue.DefaultConfig()
	cfg.DBPath, cfg.AllowedRoots = "/nonexistent/q.db", []string{"/nonexistent"}
	for _, name := range []string{"Bad Name", "", "../root", "alice\n"} {
		cfg.Admins = []string{"alice", name}
		if err := cfg.Validate(); !errors.Is(err, queue.ErrInvalidConfig) || !strings.Contains(err.Error(), "admin") {
			t.Errorf("admin %q: %v, want an invalid config naming the admin", name, err)
		}
	}
	cfg.Admins = []string{"alice", "bob"}
	if err := cfg.Validate(); err != nil {
		t.Errorf("valid admins: %v", err)
	}
}
