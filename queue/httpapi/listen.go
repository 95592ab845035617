package httpapi

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"github.com/harvest-hpc/harvest/internal/safefs"
)

// Serve serves the API on every listener until ctx ends, then shuts down
// gracefully. Unix-socket listeners identify callers by peer credentials.
func (s *Server) Serve(ctx context.Context, listeners ...net.Listener) error {
	return s.ServeHandler(ctx, s.Handler(), listeners...)
}

// ServeHandler is Serve with another handler (the agent's mux, which
// wraps Handler): Unix-socket callers are identified by peer credentials.
func (s *Server) ServeHandler(ctx context.Context, h http.Handler, listeners ...net.Listener) error {
	if len(listeners) == 0 {
		return errors.New("queue: serve: no listener")
	}
	srv := &http.Server{
		Handler:           bodyDeadline(h, s.cfg.BodyReadTimeout),
		ConnContext:       connContext,
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       2 * time.Minute,
		WriteTimeout:      2 * time.Minute,
		IdleTimeout:       2 * time.Minute,
	}
	errc := make(chan error, len(listeners))
	for _, l := range listeners {
		go func(l net.Listener) {
			s.log.Info("queue API listening", "addr", l.Addr().String())
			errc <- srv.Serve(l)
		}(l)
	}
	select {
	case <-ctx.Done():
	case err := <-errc:
		if !errors.Is(err, http.ErrServerClosed) {
			srv.Close()
			return fmt.Errorf("queue: serve: %w", err)
		}
	}
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return srv.Shutdown(sctx)
}

// bodyDeadline gives a request with a declared body base plus one second
// per MiB to send it (issue 35 item 8).
func bodyDeadline(h http.Handler, base time.Duration) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.ContentLength > 0 {
			d := base + time.Duration(r.ContentLength)*time.Second/(1<<20)
			_ = http.NewResponseController(w).SetReadDeadline(time.Now().Add(d))
		}
		h.ServeHTTP(w, r)
	})
}

// ListenUnix listens on a Unix socket at path (replacing a stale one),
// world-connectable: identity comes from the peer's credentials.
func ListenUnix(path string) (net.Listener, error) {
	// The socket is made 0666 by name after it is bound: in a directory
	// another user controls, they could put a link to any file there in
	// between, or their own socket later.
	if err := safefs.SharedDir(filepath.Dir(path)); err != nil {
		return nil, fmt.Errorf("socket directory: %w", err)
	}
	if fi, err := os.Lstat(path); err == nil && fi.Mode()&os.ModeSocket != 0 {
		if c, err := net.Dial("unix", path); err == nil {
			c.Close()
			return nil, fmt.Errorf("socket %s is in use by another queue", path)
		}
		os.Remove(path)
	}
	l, err := net.Listen("unix", path)
	if err != nil {
		return nil, fmt.Errorf("listen on %s: %w", path, err)
	}
	if err := os.Chmod(path, 0o666); err != nil {
		l.Close()
		return nil, fmt.Errorf("chmod %s: %w", path, err)
	}
	return l, nil
}

// ListenTCP listens on addr, with TLS when certFile and keyFile are set.
func ListenTCP(addr, certFile, keyFile string) (net.Listener, error) {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("listen on %s: %w", addr, err)
	}
	if certFile == "" && keyFile == "" {
		return l, nil
	}
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		l.Close()
		return nil, fmt.Errorf("load TLS certificate: %w", err)
	}
	return tls.NewListener(l, &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}), nil
}
