package queue_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
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
	// The submission wrote: the write lock's figures count it.
	ws := e.Q.WriteStats(false)
	if st.WriteTransactions < 1 || st.WriteTransactions > ws.Transactions || st.WriteLockSeconds <= 0 || st.SlowWrites > st.WriteTransactions || len(st.SlowWritesBy) > int(st.SlowWrites) {
		t.Errorf("write figures %d transactions, %.6f s, %d slow; the store counts %d transactions", st.WriteTransactions, st.WriteLockSeconds, st.SlowWrites, ws.Transactions)
	}
	var hist int64
	for _, n := range st.WriteHist {
		hist += n
	}
	if hist != st.WriteTransactions {
		t.Errorf("histogram of %d transactions, want %d", hist, st.WriteTransactions)
	}
}

// At its close the queue logs the write lock's figures of its life, for an
// admin without Prometheus and for `harvest bench submit`.
func TestCloseLogsTheWriteLockFigures(t *testing.T) {
	var buf bytes.Buffer
	e := queuetest.New(t, func(c *queue.Config) { c.Logger = slog.New(slog.NewJSONHandler(&buf, nil)) })
	ds := e.Dataset("ds", 5)
	if _, err := e.Q.Submit(context.Background(), "alice", api.JobSpec{Dataset: ds, Command: []string{"/bin/true", "{input}"}, BatchSize: 1}); err != nil {
		t.Fatal(err)
	}
	want := e.Q.WriteStats(false).Transactions
	if err := e.Q.Close(); err != nil {
		t.Fatal(err)
	}
	var line struct {
		Msg          string  `json:"msg"`
		Transactions int64   `json:"transactions"`
		LockSeconds  float64 `json:"lock_seconds"`
		LongestMS    float64 `json:"longest_ms"`
		Over5ms      *int64  `json:"over_5ms"`
	}
	for _, l := range strings.Split(buf.String(), "\n") {
		if strings.Contains(l, `"write lock at close"`) {
			if err := json.Unmarshal([]byte(l), &line); err != nil {
				t.Fatal(err)
			}
		}
	}
	if line.Transactions < want || line.LockSeconds <= 0 || line.LongestMS <= 0 || line.Over5ms == nil {
		t.Fatalf("logged %+v, want at least %d transactions, their lock time, the longest and the count over 5 ms; log:\n%s", line, want, buf.String())
	}
}
