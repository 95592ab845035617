package queue

import (
	"context"
	"errors"
	"net/http/httptest"
	"testing"

	"github.com/harvest-hpc/harvest/queue/api"
)

func TestRevokedTokensStopWorkingAndOthersStay(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	second, err := e.q.CreateToken(ctx, "alice", api.RoleUser)
	if err != nil {
		t.Fatal(err)
	}
	n, err := e.q.RevokeTokens(ctx, "alice", api.RoleUser)
	if err != nil || n != 2 {
		t.Fatalf("revoked %d, %v; want 2", n, err)
	}
	for _, tok := range []string{e.tokens["alice"], second.Token} {
		r := httptest.NewRequest("GET", "/status", nil)
		if _, _, err := e.q.AuthenticateToken(r, tok); !errors.Is(err, api.ErrUnauthorized) {
			t.Errorf("a revoked token still authenticates: %v", err)
		}
	}
	r := httptest.NewRequest("GET", "/status", nil)
	if name, role, err := e.q.AuthenticateToken(r, e.tokens["bob"]); err != nil || name != "bob" || role != api.RoleUser {
		t.Errorf("bob's token: %s %s %v", name, role, err)
	}
	if _, err := e.q.RevokeTokens(ctx, "alice", api.RolePilot); !errors.Is(err, api.ErrInvalid) {
		t.Errorf("revoking the pilot role: %v, want api.ErrInvalid", err)
	}
}

func TestStatsCountTasksPerOwnerAndTheLease(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	ds := e.dataset("ds", 5)
	if _, err := e.q.Submit(ctx, "alice", api.JobSpec{Dataset: ds, Command: []string{"/bin/true", "{input}"}, BatchSize: 1}); err != nil {
		t.Fatal(err)
	}
	st, err := e.q.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got := st.ByUser["alice"]; got.Waiting != 5 || got.Running != 0 || got.Done != 0 {
		t.Errorf("alice's tasks %+v, want 5 waiting", got)
	}
	if st.Epoch != 0 || st.MasterAlive || st.Requeued != 0 {
		t.Errorf("stats %+v, want no master and no requeue yet", st)
	}
}
