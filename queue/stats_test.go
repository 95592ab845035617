package queue_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/harvest-hpc/harvest/queue"
	"github.com/harvest-hpc/harvest/queue/api"
	"github.com/harvest-hpc/harvest/queue/queuetest"
)

func TestRevokedTokensStopWorkingAndOthersStay(t *testing.T) {
	e := queuetest.New(t)
	ctx := context.Background()
	second, err := e.Q.CreateToken(ctx, "alice", api.RoleUser)
	if err != nil {
		t.Fatal(err)
	}
	n, err := e.Q.RevokeTokens(ctx, "alice", api.RoleUser)
	if err != nil || n != 2 {
		t.Fatalf("revoked %d, %v; want 2", n, err)
	}
	for _, tok := range []string{e.Tokens["alice"], second.Token} {
		if _, err := e.Q.Identify(ctx, queue.Credentials{Token: tok}); !errors.Is(err, api.ErrUnauthorized) {
			t.Errorf("a revoked token still authenticates: %v", err)
		}
	}
	if id, err := e.Q.Identify(ctx, queue.Credentials{Token: e.Tokens["bob"]}); err != nil || id.User != "bob" || id.Role != api.RoleUser {
		t.Errorf("bob's token: %+v %v", id, err)
	}
	if _, err := e.Q.RevokeTokens(ctx, "alice", api.RolePilot); !errors.Is(err, api.ErrInvalid) {
		t.Errorf("revoking the pilot role: %v, want api.ErrInvalid", err)
	}
}

func TestStatsCountTasksPerOwnerAndTheLease(t *testing.T) {
	e := queuetest.New(t)
	ctx := context.Background()
	ds := e.Dataset("ds", 5)
	if _, err := e.Q.Submit(ctx, "alice", api.JobSpec{Dataset: ds, Command: []string{"/bin/true", "{input}"}, BatchSize: 1}); err != nil {
		t.Fatal(err)
	}
	st, err := e.Q.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got := st.ByUser["alice"]; got.Waiting != 5 || got.Running != 0 || got.Done != 0 {
		t.Errorf("alice's tasks %+v, want 5 waiting", got)
	}
	if st.Epoch != 0 || st.MasterAlive || st.Requeued != 0 {
		t.Errorf("stats %+v, want no master and no requeue yet", st)
	}
	// The submission wrote: the write lock's figures count it, and say
	// whether the writer runs real-time as the queue's log does.
	ws := e.Q.WriteStats(false)
	if st.WriteTransactions < 1 || st.WriteTransactions > ws.Transactions || st.WriteLockSeconds <= 0 || st.SlowWrites > st.WriteTransactions || st.StretchedWrites > st.SlowWrites {
		t.Errorf("write figures %d transactions, %.6f s, %d slow; the store counts %d transactions", st.WriteTransactions, st.WriteLockSeconds, st.SlowWrites, ws.Transactions)
	}
	if on := !strings.HasPrefix(e.Q.LockCeiling(), "off"); st.WriterRealtime != on {
		t.Errorf("WriterRealtime %v, but the ceiling is %q", st.WriterRealtime, e.Q.LockCeiling())
	}
}
