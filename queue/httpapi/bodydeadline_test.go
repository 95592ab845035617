package httpapi_test

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/harvest-hpc/harvest/queue/httpapi"
	"github.com/harvest-hpc/harvest/queue/queuetest"
)

// Issue 35 item 8: a body shorter than its Content-Length held its
// connection until the server's 2-minute read timeout. A request with a
// declared body now has BodyReadTimeout (plus a second per MiB) to send
// it, and is answered when that passes.
func TestABodyShorterThanItsLengthIsCutAtTheBodyDeadline(t *testing.T) {
	e := queuetest.New(t)
	l, err := httpapi.ListenTCP("127.0.0.1:0", "", "")
	if err != nil {
		t.Fatal(err)
	}
	cfg := httpapi.DefaultConfig()
	cfg.BodyReadTimeout = 200 * time.Millisecond
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- httpapi.New(e.Q, cfg).Serve(ctx, l) }()
	t.Cleanup(func() { cancel(); <-done })

	conn, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "POST /v1/jobs HTTP/1.1\r\nHost: queue\r\nAuthorization: Bearer x\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"name\":")
	// The server's read timeout is 2 minutes: an answer within 60 s can
	// only come from the body deadline.
	conn.SetReadDeadline(time.Now().Add(60 * time.Second))
	start := time.Now()
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		// A closed connection is an answer too, if it came in time.
		if ne, ok := err.(net.Error); ok && ne.Timeout() {
			t.Fatalf("no answer within 60 s of a short body (%v)", err)
		}
		return
	}
	resp.Body.Close()
	if resp.StatusCode < 400 {
		t.Errorf("a short body answered %d", resp.StatusCode)
	}
	t.Logf("answered %d after %v", resp.StatusCode, time.Since(start))
}
