package httpapi_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/harvest-hpc/harvest/internal/pgtest"
	"github.com/harvest-hpc/harvest/queue"
	"github.com/harvest-hpc/harvest/queue/client"
	"github.com/harvest-hpc/harvest/queue/httpapi"
	"github.com/harvest-hpc/harvest/queue/queuetest"
)

// TestMain lets the test binary act as a standalone queue process (for
// the kill -9 test) or as a CLI caller under another uid (for the socket
// test), selected by HARVEST_QUEUE_TEST_CHILD.
func TestMain(m *testing.M) {
	switch os.Getenv("HARVEST_QUEUE_TEST_CHILD") {
	case "serve":
		if err := childServe(); err != nil {
			fmt.Fprintln(os.Stderr, "child:", err)
			os.Exit(1)
		}
		os.Exit(0)
	case "whoami":
		if err := childWhoami(); err != nil {
			fmt.Fprintln(os.Stderr, "child:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// childConfig is the configuration of a queue process under test.
func childConfig(dir string) queue.Config {
	cfg := queue.DefaultConfig()
	cfg.DBPath = filepath.Join(dir, "queue.db")
	if b, err := os.ReadFile(filepath.Join(dir, "db")); err == nil {
		cfg.DBPath = string(b) // the test's PostgreSQL schema (childSetup)
	}
	cfg.AllowedRoots = []string{filepath.Join(dir, "data")}
	cfg.OutputsRoot = filepath.Join(dir, "data", "out")
	cfg.PilotToken = queuetest.PilotToken
	cfg.LookupAccount = queuetest.TestAccount // the test's users, not the machine's
	cfg.ZombieTimeout = 2 * time.Second
	cfg.SweepInterval = 300 * time.Millisecond
	cfg.FlushInterval = 200 * time.Millisecond
	cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	return cfg
}

func childServe() error {
	dir := os.Getenv("HQ_DIR")
	q, err := queue.Open(childConfig(dir))
	if err != nil {
		return err
	}
	defer q.Close()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	addrFile := os.Getenv("HQ_ADDR")
	if err := os.WriteFile(addrFile+".tmp", []byte("http://"+l.Addr().String()), 0o644); err != nil {
		return err
	}
	if err := os.Rename(addrFile+".tmp", addrFile); err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	return httpapi.New(q, httpapi.DefaultConfig()).Serve(ctx, l)
}

func childWhoami() error {
	cfg := client.DefaultConfig()
	cfg.URL = os.Getenv("HQ_URL")
	cfg.Token = os.Getenv("HQ_TOKEN")
	c, err := client.New(cfg)
	if err != nil {
		return err
	}
	w, err := c.Whoami(context.Background())
	if err != nil {
		return err
	}
	return json.NewEncoder(os.Stdout).Encode(w)
}

// childSetup prepares a state directory for queue processes under test:
// a dataset of entries sub-directories (named by name, a number and the
// index) under the allowed root, the outputs root, and a token for each
// user (name: role), made through a queue opened and closed here.
func childSetup(t *testing.T, name string, entries int, users map[string]string) (dir, ds string, tokens map[string]string) {
	t.Helper()
	dir = queuetest.SharedDir(t)
	ds = filepath.Join(dir, "data", "set")
	for i := 0; i < entries; i++ {
		if err := os.MkdirAll(filepath.Join(ds, fmt.Sprintf("%s%04d", name, i)), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.MkdirAll(filepath.Join(dir, "data", "out"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "db"), []byte(pgtest.DB(t, filepath.Join(dir, "queue.db"))), 0o600); err != nil {
		t.Fatal(err)
	}
	q, err := queue.Open(childConfig(dir))
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	tokens = map[string]string{}
	for u, role := range users {
		tok, err := q.CreateToken(context.Background(), u, role)
		if err != nil {
			t.Fatal(err)
		}
		tokens[u] = tok.Token
	}
	return dir, ds, tokens
}
