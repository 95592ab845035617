package pilot

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/harvest-hpc/harvest/internal/tinyfs"
	"github.com/harvest-hpc/harvest/master"
	"github.com/harvest-hpc/harvest/pilotproto"
	"github.com/harvest-hpc/harvest/queue/queuetest"
)

// grantCounter counts the lease grants (each a new epoch) a queue made. A
// renewal answers Granted too, with the same epoch: it is not counted (the
// master renews at once, not behind its first commit, so a test cannot
// tell from timing whether one went out).
type grantCounter struct {
	pilotproto.Queue
	mu     sync.Mutex
	grants map[string]map[int64]bool
}

func (g *grantCounter) Lease(ctx context.Context, req pilotproto.LeaseRequest) (pilotproto.Lease, error) {
	l, err := g.Queue.Lease(ctx, req)
	if err == nil && l.Granted && !req.Release {
		g.mu.Lock()
		if g.grants[req.PilotID] == nil {
			g.grants[req.PilotID] = map[int64]bool{}
		}
		g.grants[req.PilotID][l.Epoch] = true
		g.mu.Unlock()
	}
	return l, err
}

func (g *grantCounter) count(pilot string) int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.grants[pilot])
}

// syncBuffer is a log sink the master's goroutines may write to too.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestAPilotWhoseStateDirectoryIsFullBacksOff (found by the audit): a
// pilot whose state directory filled up after start took a new epoch at
// every lease question (8 in 15 s), left each epoch's file behind, and
// logged only "no master yet". It says why it cannot be master (the state
// directory, full), asks for the lease again only after a back-off,
// leaves no file of the epochs it failed to open, and a pilot with a
// working state directory becomes master.
func TestAPilotWhoseStateDirectoryIsFullBacksOff(t *testing.T) {
	dir := tinyfs.Mount(t, "64k")
	tinyfs.Fill(t, dir)
	e := queuetest.New(t)
	q := &grantCounter{Queue: e.Q, grants: map[string]map[int64]bool{}}
	var logs syncBuffer
	clock := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	mk := func(id, state string) *Pilot {
		cfg := DefaultConfig()
		cfg.PilotID, cfg.Token, cfg.StateDir = id, queuetest.PilotToken, state
		cfg.Logger = slog.New(slog.NewTextHandler(&logs, nil))
		return &Pilot{cfg: cfg, q: q, log: cfg.Logger.With("pilot", id), url: "http://127.0.0.1:1",
			now: func() time.Time { return clock }, startBO: newStartBackOff()}
	}
	full := mk("p-full", dir)
	ctx := t.Context()
	tries := func(want int) {
		t.Helper()
		for range 10 {
			_, err := full.resolve(ctx)
			if !errors.Is(err, master.ErrStateDir) || !strings.Contains(err.Error(), syscall.ENOSPC.Error()) {
				t.Fatalf("resolve with a full state directory: %v, want ErrStateDir and %q", err, syscall.ENOSPC.Error())
			}
		}
		if n := q.count("p-full"); n != want {
			t.Fatalf("%d epochs taken, want %d: a new epoch per try, not per back-off", n, want)
		}
		if ents, _ := os.ReadDir(dir); len(ents) != 1 {
			t.Fatalf("the state directory holds %v, want nothing of the failed epochs", ents)
		}
	}
	tries(1)
	if n := strings.Count(logs.String(), "cannot be master: the state directory cannot hold the checkpoint"); n != 1 || !strings.Contains(logs.String(), dir) {
		t.Fatalf("the pilot said %d times why it cannot be master (want once, naming %s):\n%s", n, dir, logs.String())
	}
	clock = clock.Add(2 * startRetryFirst) // past the first back-off (5 s, randomised by half)
	tries(2)

	ok := mk("p-ok", t.TempDir())
	defer ok.stopMaster()
	ep, err := ok.resolve(ctx)
	if err != nil || ep.URL != ok.url || q.count("p-ok") != 1 {
		t.Fatalf("a pilot with a working state directory: %+v %v, want master", ep, err)
	}
	ok.mu.Lock()
	running := ok.m != nil
	ok.mu.Unlock()
	if !running {
		t.Fatal("the pilot with a working state directory runs no master")
	}
}
