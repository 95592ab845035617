package worker

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-resty/resty/v2"

	"github.com/harvest-hpc/harvest/workerproto"
)

// Errors of the master's answers that change what the worker does.
var (
	ErrUnknownWorker = errors.New(workerproto.ErrUnknownWorker) // register again
	ErrNotMaster     = errors.New(workerproto.ErrNotMaster)     // back to the lease
)

// client talks to one master over persistent connections. Calls are not
// retried here: the session decides what a failure means (the master may
// be gone) and when to try again.
type client struct {
	base string
	r    *resty.Client
	// compact: the master said at registration that it reads plain
	// successes as columns (workerproto.ResultsWire); until then, and for
	// a master older than the worker, results go in full.
	compact atomic.Bool
}

// newHTTP returns the resty client a worker uses for every master: a few
// keep-alive connections per master, so a task costs no connection set-up,
// and no proxy (pilots talk to each other directly). A call's time limit
// comes from its context (a long-poll lasts as long as it asks).
func newHTTP(token string) *resty.Client {
	return resty.New().
		SetTransport(&http.Transport{
			Proxy:               nil,
			DialContext:         (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
			MaxIdleConns:        16,
			MaxIdleConnsPerHost: 16,
			IdleConnTimeout:     90 * time.Second,
		}).
		SetAuthToken(token).
		SetHeader("Content-Type", "application/json").
		SetHeader("Accept", "application/json")
}

// bufs holds request bodies between calls: a worker of short tasks posts
// hundreds of times a second.
var bufs = sync.Pool{New: func() any { return new(bytes.Buffer) }}

// post sends in as JSON and decodes the answer into out. It encodes the
// body itself and reads the answer from the stream (resty's
// SetDoNotParseResponse): resty's own body handling matched the content
// types with regular expressions, marshalled through reflection into a
// copied buffer and read the whole answer before unmarshalling it, which
// was a third of a worker's CPU per exchange.
func (c *client) post(ctx context.Context, path string, in, out any) error {
	buf := bufs.Get().(*bytes.Buffer)
	defer bufs.Put(buf)
	buf.Reset()
	if req, ok := in.(workerproto.ResultsRequest); ok && c.compact.Load() {
		in = workerproto.PackResults(req)
	}
	if err := json.NewEncoder(buf).Encode(in); err != nil {
		return fmt.Errorf("master %s%s: encode request: %w", c.base, path, err)
	}
	resp, err := c.r.R().SetContext(ctx).SetBody(bytes.NewReader(buf.Bytes())).SetDoNotParseResponse(true).
		Post(strings.TrimRight(c.base, "/") + path)
	if err != nil {
		return fmt.Errorf("master %s: %w", c.base, err)
	}
	body := resp.RawBody()
	defer body.Close()
	if resp.IsSuccess() {
		// Reading to the end also gives the connection back to the pool.
		ans := bufs.Get().(*bytes.Buffer)
		defer bufs.Put(ans)
		ans.Reset()
		_, err := ans.ReadFrom(body)
		if p, ok := out.(*workerproto.PullResponse); ok && err == nil {
			// Batches come compact (workerproto.PullWire), or in full
			// from a master older than the worker: Unpack reads both.
			var w workerproto.PullWire
			if err = json.Unmarshal(ans.Bytes(), &w); err == nil {
				*p, err = w.Unpack()
			}
		} else if err == nil {
			err = json.Unmarshal(ans.Bytes(), out)
		}
		if r, ok := out.(*workerproto.RegisterResponse); ok && err == nil {
			c.compact.Store(r.CompactResults)
		}
		if err != nil {
			return fmt.Errorf("master %s%s: answer: %w", c.base, path, err)
		}
		return nil
	}
	raw, _ := io.ReadAll(io.LimitReader(body, 64<<10))
	msg := strings.TrimSpace(string(raw))
	var eb workerproto.ErrorBody
	if json.Unmarshal(raw, &eb) == nil && eb.Error != "" {
		msg = eb.Error
	}
	switch {
	case resp.StatusCode() == http.StatusNotFound && msg == workerproto.ErrUnknownWorker:
		return ErrUnknownWorker
	case resp.StatusCode() == http.StatusServiceUnavailable:
		return ErrNotMaster
	}
	return fmt.Errorf("master %s%s: %s: %s", c.base, path, resp.Status(), msg)
}
