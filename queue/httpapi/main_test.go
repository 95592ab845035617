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
	cfg.AllowedRoots = []string{filepath.Join(dir, "data")}
	cfg.OutputsRoot = filepath.Join(dir, "data", "out")
	cfg.PilotToken = queuetest.PilotToken
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
