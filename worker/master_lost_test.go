package worker_test

import (
	"context"
	"io"
	"log/slog"
	"net"
	"testing"
	"time"

	"github.com/harvest-hpc/harvest/worker"
)

// TestAMasterThatRefusesConnectionsIsLeftAtOnce: a refused connection
// means the master's process is dead (kill -9), so the worker goes back to
// the lease at once instead of retrying for its master grace (an hour here).
func TestAMasterThatRefusesConnectionsIsLeftAtOnce(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := "http://" + ln.Addr().String()
	ln.Close() // nothing listens there any more: connections are refused
	asked := make(chan struct{}, 10)
	resolve := func(ctx context.Context) (worker.Endpoint, error) {
		asked <- struct{}{}
		return worker.Endpoint{URL: dead}, nil
	}
	cfg := worker.DefaultConfig()
	cfg.ID, cfg.Token, cfg.Runner = "w1", "token", worker.NoopRunner{}
	cfg.MasterGrace, cfg.RetryInterval = time.Hour, 50*time.Millisecond
	cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	w, err := worker.New(cfg, resolve)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { w.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()
	deadline := time.After(5 * time.Second)
	for i := 0; i < 2; i++ {
		select {
		case <-asked:
		case <-deadline:
			t.Fatalf("the worker asked for a master %d times in 5 s; a refused master must send it back to the lease at once", i)
		}
	}
}
