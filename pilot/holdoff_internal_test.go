package pilot

import (
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/harvest-hpc/harvest/internal/tinyfs"
	"github.com/harvest-hpc/harvest/master"
	"github.com/harvest-hpc/harvest/queue/queuetest"
)

// TestAPilotHeldOffTheLeaseServesAnotherMaster (found by the audit): a
// pilot whose state directory is full holds off the lease, and its worker
// idled up to a minute even when another pilot was master, as any lease
// question could grant it a new epoch. It now asks where the master is
// with a question that grants nothing, and its worker serves that master;
// with none alive it waits, taking no epoch.
func TestAPilotHeldOffTheLeaseServesAnotherMaster(t *testing.T) {
	dir := tinyfs.Mount(t, "64k")
	tinyfs.Fill(t, dir)
	e := queuetest.New(t)
	q := &grantCounter{Queue: e.Q, grants: map[string]map[int64]bool{}}
	clock := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	listening := httptest.NewServer(http.NotFoundHandler()) // the other master's address answers
	defer listening.Close()
	mk := func(id, state, url string) *Pilot {
		cfg := DefaultConfig()
		cfg.PilotID, cfg.Token, cfg.StateDir = id, queuetest.PilotToken, state
		cfg.Logger = slog.New(slog.DiscardHandler)
		return &Pilot{cfg: cfg, q: q, log: cfg.Logger, url: url, now: func() time.Time { return clock }, startBO: newStartBackOff()}
	}
	full := mk("p-full", dir, "http://127.0.0.1:1")
	ctx := t.Context()
	for range 3 {
		if _, err := full.resolve(ctx); !errors.Is(err, master.ErrStateDir) {
			t.Fatalf("resolve with a full state directory and no other master: %v, want ErrStateDir", err)
		}
	}
	ok := mk("p-ok", t.TempDir(), listening.URL)
	defer ok.stopMaster()
	if ep, err := ok.resolve(ctx); err != nil || ep.URL != ok.url {
		t.Fatalf("a pilot with a working state directory: %+v %v, want master", ep, err)
	}
	ep, err := full.resolve(ctx)
	if err != nil || ep.URL != listening.URL || ep.Slots != full.cfg.Slots {
		t.Fatalf("the held-off pilot's worker: %+v %v, want the other master at %s", ep, err, listening.URL)
	}
	if n := q.count("p-full"); n != 1 {
		t.Fatalf("the held-off pilot took %d epochs, want 1 (its failed start): finding the master granted it the lease", n)
	}
	if n := q.count("p-ok"); n != 1 {
		t.Fatalf("the master's lease was granted %d times, want 1", n)
	}
}
