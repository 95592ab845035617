package master

import (
	"context"
	"errors"
	"net"
	"net/url"
	"syscall"
	"time"
)

// NothingListens reports whether nothing listens at a pilot's URL
// (connection refused): the pilot's process is gone (kill -9, crash, the
// end of its job), not slow. Any other outcome, a timeout included (a host
// down or cut off answers nothing), is no verdict: the caller's grace
// decides then. Every pilot's port must be reachable from every other
// pilot (any of them may become master), so a refusal is not a firewall's.
func NothingListens(ctx context.Context, pilotURL string) bool {
	u, err := url.Parse(pilotURL)
	if err != nil || u.Host == "" {
		return false
	}
	d := net.Dialer{Timeout: 2 * time.Second}
	c, err := d.DialContext(ctx, "tcp", u.Host)
	if err != nil {
		return errors.Is(err, syscall.ECONNREFUSED)
	}
	c.Close()
	return false
}
