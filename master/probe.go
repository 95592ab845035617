package master

import (
	"context"
	"errors"
	"net"
	"net/http"
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

// PathAlive is what a new master asks a restored worker's pilot: a pilot
// answers it at once, whatever it is doing (pilot.ServeHTTP). Any HTTP
// answer at all, an error status from an older pilot included, proves
// the pilot's process runs.
const PathAlive = "/v1/pilot/alive"

// Verdict is what one probe of a pilot's address says.
type Verdict int

const (
	// Answered: an HTTP answer came: the pilot's process runs (maybe
	// slowly); its worker gets the reconnect grace.
	Answered Verdict = iota
	// Refused: nothing listens: the process is gone.
	Refused
	// Silent: no answer within the bound: neither the host's kernel (the
	// TCP handshake, answered whatever the load on the host) nor the
	// pilot (its answer to PathAlive) said anything, or the network said
	// the host is unreachable: the host is down or cut off, or the
	// process is stopped.
	Silent
	// Unclear: any other failure (a bad address, a local error): no
	// verdict.
	Unclear
)

func (v Verdict) String() string {
	return [...]string{"answered", "refused", "silent", "unclear"}[v]
}

// Probe asks the pilot at pilotURL whether it is alive, within timeout.
func Probe(ctx context.Context, pilotURL string, timeout time.Duration) Verdict {
	u, err := url.Parse(pilotURL)
	if err != nil || u.Host == "" {
		return Unclear
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.JoinPath(PathAlive).String(), nil)
	if err != nil {
		return Unclear
	}
	// A connection of its own: no idle connection of another probe, and
	// nothing kept open to a host that may be gone.
	tr := &http.Transport{DisableKeepAlives: true, Proxy: nil}
	defer tr.CloseIdleConnections()
	resp, err := (&http.Client{Transport: tr}).Do(req)
	if err == nil {
		resp.Body.Close()
		return Answered
	}
	var ne net.Error
	switch {
	case errors.Is(err, syscall.ECONNREFUSED):
		return Refused
	case errors.Is(err, syscall.EHOSTUNREACH), errors.Is(err, syscall.ENETUNREACH):
		return Silent
	case ctx.Err() != nil && errors.Is(ctx.Err(), context.DeadlineExceeded):
		return Silent
	case errors.As(err, &ne) && ne.Timeout():
		return Silent
	}
	return Unclear
}

// silence is the rule a new master judges a restored worker's pilot by:
// refused is gone at once; Silences silent probes in a row is gone (host
// down or cut off); an answer is alive, and ends the probing (the
// reconnect grace decides). A probe that is unclear neither counts nor
// resets.
type silence struct {
	need, silent int
}

// observe takes one verdict and says whether the pilot is gone, and
// whether probing is over.
func (s *silence) observe(v Verdict) (gone, over bool) {
	switch v {
	case Answered:
		return false, true
	case Refused:
		return true, true
	case Silent:
		s.silent++
		if s.silent >= s.need {
			return true, true
		}
	}
	return false, false
}

// ProbeRule is how a new master probes a restored worker's pilot: at most
// Tries probes, one after the other, each given Timeout (an attempt that
// fails sooner waits out its Timeout, so Silences silent probes span at
// least Silences x Timeout).
type ProbeRule struct {
	Timeout  time.Duration
	Silences int // silent probes in a row that make a pilot gone
	Tries    int // probes at most (then the grace decides)
}

// judge probes addr until the rule decides; it returns whether the pilot
// is gone and the last verdict. probe is Probe, or a test's.
func (r ProbeRule) judge(ctx context.Context, addr string, probe func(context.Context, string, time.Duration) Verdict) (bool, Verdict) {
	s := silence{need: r.Silences}
	last := Unclear
	for range r.Tries {
		began := time.Now()
		last = probe(ctx, addr, r.Timeout)
		gone, over := s.observe(last)
		if over {
			return gone, last
		}
		t := time.NewTimer(r.Timeout - time.Since(began))
		select {
		case <-ctx.Done():
			t.Stop()
			return false, last
		case <-t.C:
		}
	}
	return false, last
}
