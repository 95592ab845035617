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
	"time"

	"github.com/harvest-hpc/harvest/workerproto"
)

// Errors of the master's answers that change what the worker does.
var (
	ErrUnknownWorker = errors.New(workerproto.ErrUnknownWorker) // register again
	ErrNotMaster     = errors.New(workerproto.ErrNotMaster)     // back to the lease
)

// client talks to one master over persistent connections.
type client struct {
	base, token string
	hc          *http.Client
}

// NewTransport returns the keep-alive transport workers use: a few
// persistent connections per master, so a task costs no connection set-up.
func NewTransport() *http.Transport {
	return &http.Transport{
		Proxy:               nil, // pilots talk to each other directly
		DialContext:         (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConns:        16,
		MaxIdleConnsPerHost: 16,
		IdleConnTimeout:     90 * time.Second,
	}
}

func (c *client) post(ctx context.Context, path string, in, out any) error {
	body, err := json.Marshal(in)
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, strings.TrimRight(c.base, "/")+path, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+c.token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.hc.Do(req)
	if err != nil {
		return fmt.Errorf("master %s: %w", c.base, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		var eb workerproto.ErrorBody
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		_ = json.Unmarshal(b, &eb)
		switch {
		case resp.StatusCode == http.StatusNotFound && eb.Error == workerproto.ErrUnknownWorker:
			return ErrUnknownWorker
		case resp.StatusCode == http.StatusServiceUnavailable:
			return ErrNotMaster
		}
		return fmt.Errorf("master %s%s: %s: %s", c.base, path, resp.Status, eb.Error)
	}
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		return fmt.Errorf("master %s%s: decode: %w", c.base, path, err)
	}
	return nil
}
