package worker

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
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
		SetHeader("Accept", "application/json").
		SetError(&workerproto.ErrorBody{})
}

func (c *client) post(ctx context.Context, path string, in, out any) error {
	resp, err := c.r.R().SetContext(ctx).SetBody(in).SetResult(out).Post(strings.TrimRight(c.base, "/") + path)
	if err != nil {
		return fmt.Errorf("master %s: %w", c.base, err)
	}
	if resp.IsSuccess() {
		return nil
	}
	msg := strings.TrimSpace(resp.String())
	if eb, ok := resp.Error().(*workerproto.ErrorBody); ok && eb.Error != "" {
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
