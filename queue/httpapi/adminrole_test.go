package httpapi_test

import (
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/harvest-hpc/harvest/queue"
	"github.com/harvest-hpc/harvest/queue/api"
	"github.com/harvest-hpc/harvest/queue/queuetest"
)

// An admin token kept its role after its holder left --admin: the role
// was stored with the token at creation and never checked again. The
// role now follows the configuration at each request: the same token is
// refused once its holder is no longer an admin, works again when the
// name is given back, and an admin token is only made for an admin.
func TestAdminTokenFollowsTheAdminList(t *testing.T) {
	e := queuetest.New(t)
	body := `{"min_nodes":1,"max_nodes":5}`
	if code, msg := e.Raw("PUT", api.PathNodes, "admin", body); code != http.StatusOK {
		t.Fatalf("admin in --admin sets nodes: %d %s", code, msg)
	}
	// The admin leaves --admin: a restart with the new list.
	e.Reopen(func(c *queue.Config) { c.Admins = []string{"someone-else"} })
	before := e.Snapshot(t)
	for _, r := range []struct{ method, path, body string }{
		{"PUT", api.PathNodes, `{"min_nodes":2,"max_nodes":9}`},
		{"PUT", api.PathUser + "alice", `{"priority":7}`},
		{"POST", api.PathTokens, `{"user":"bob","role":"admin"}`},
		{"GET", api.PathWhoami, ""},
	} {
		code, msg := e.Raw(r.method, r.path, "admin", r.body)
		if code != http.StatusForbidden || !strings.Contains(msg, "--admin") {
			t.Errorf("%s %s with the former admin's token: %d %q, want 403 naming --admin", r.method, r.path, code, msg)
		}
	}
	if after := e.Snapshot(t); after != before {
		t.Errorf("a former admin's token changed the database:\n%s", after)
	}
	// Rotating the former admin's admin tokens cannot end with a new one:
	// it is refused before anything is revoked (it revoked them, then
	// failed, and said to run it again).
	if _, n, err := e.Q.RotateTokens(t.Context(), "admin", api.RoleAdmin); !errors.Is(err, api.ErrInvalid) || n != 0 || !strings.Contains(err.Error(), "--admin") {
		t.Errorf("rotating a former admin's admin tokens: %d revoked, %v; want refused naming --admin, none revoked", n, err)
	}
	if after := e.Snapshot(t); after != before {
		t.Errorf("a refused rotation changed the database:\n%s", after)
	}
	// Nor may an admin mint an admin token for a name that is not an admin.
	e.Reopen(func(c *queue.Config) { c.Admins = []string{"admin"} })
	code, msg := e.Raw("POST", api.PathTokens, "admin", `{"user":"bob","role":"admin"}`)
	if code != http.StatusBadRequest || !strings.Contains(msg, "--admin") {
		t.Errorf("an admin token for bob, who is not an admin: %d %q, want 400 naming --admin", code, msg)
	}
	if after := e.Snapshot(t); after != before {
		t.Errorf("a refused admin token changed the database:\n%s", after)
	}
	// Back in the list, the same token is an admin's again; root always is.
	if code, msg := e.Raw("PUT", api.PathNodes, "admin", body); code != http.StatusOK {
		t.Errorf("admin back in --admin: %d %s", code, msg)
	}
	if code, msg := e.Raw("POST", api.PathTokens, "admin", `{"user":"root","role":"admin"}`); code != http.StatusCreated {
		t.Errorf("an admin token for root: %d %s", code, msg)
	}
}

// An admin request naming a user the queue does not know (a typo:
// `harvest admin user set alcie`) created that user. It is refused with
// a 404 naming the user and changes nothing; "create" asks for it.
func TestAdminRequestsNamingAnUnknownUserChangeNothing(t *testing.T) {
	e := queuetest.New(t)
	before := e.Snapshot(t)
	for _, r := range []struct{ method, path, body string }{
		{"PUT", api.PathUser + "alcie", `{"priority":2}`},
		{"POST", api.PathTokens, `{"user":"alcie"}`},
		{"GET", api.PathTokens + "?user=alcie", ""},
		{"DELETE", api.PathToken + "0123456789?user=alcie", ""},
	} {
		code, msg := e.Raw(r.method, r.path, "admin", r.body)
		if code != http.StatusNotFound || !strings.Contains(msg, `unknown user "alcie"`) {
			t.Errorf("%s %s naming an unknown user: %d %q, want 404 naming it", r.method, r.path, code, msg)
		}
	}
	if _, n, err := e.Q.RotateTokens(t.Context(), "alcie", api.RoleUser); !errors.Is(err, api.ErrUnknownUser) || n != 0 {
		t.Errorf("rotating an unknown user's tokens: %d revoked, %v; want unknown user", n, err)
	}
	if after := e.Snapshot(t); after != before {
		t.Errorf("a request naming an unknown user changed the database:\n%s", after)
	}
	if code, msg := e.Raw("PUT", api.PathUser+"alcie", "admin", `{"priority":2,"create":true}`); code != http.StatusOK {
		t.Errorf("create: %d %s", code, msg)
	}
	if code, msg := e.Raw("POST", api.PathTokens, "admin", `{"user":"bob"}`); code != http.StatusCreated {
		t.Errorf("a token for bob, a Unix account: %d %s", code, msg)
	}
}
