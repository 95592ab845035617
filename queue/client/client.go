// Package client is the Go client of the queue's /v1 API, used by the CLI
// and by the pilots' master. It takes a list of queue URLs (several agents
// serving one database): calls go to the one that last answered, and move
// to the next on a connection failure or a 5xx answer, never on a 4xx (an
// answer is an answer, whichever agent gives it). Idempotent calls (reads, PUTs, cancel, lease,
// results, heartbeat, recommendation) are retried with exponential backoff
// on network errors and 5xx answers; so is submit, which carries an
// Idempotency-Key (a retry gets the first job, never a second). Pull is
// never retried (a lost answer must not hand out twice).
package client

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/go-resty/resty/v2"

	"github.com/harvest-hpc/harvest/pilotproto"
	"github.com/harvest-hpc/harvest/queue/api"
)

// The client is the pilotproto.Queue over HTTP (what pilots' masters use).
var _ pilotproto.Queue = (*Client)(nil)

// Config configures a client.
type Config struct {
	// URL is http(s)://host:port or unix:///path/to/queue.sock, or a
	// comma-separated list of them: agents serving one database, tried in
	// turn (see URLs).
	URL   string
	Token string // bearer token (ignored by the server on the Unix socket)
	// CAFile verifies a TLS server with this CA bundle (default: system roots).
	CAFile string
	// Timeout bounds one HTTP exchange.
	Timeout time.Duration
	// RetryFor bounds the retries of an idempotent call (0 = no retries).
	RetryFor time.Duration
}

// DefaultConfig talks to the agent's socket.
func DefaultConfig() Config {
	return Config{URL: "unix://" + api.DefaultSocket, Timeout: 30 * time.Second, RetryFor: 30 * time.Second}
}

// URLs splits a list of queue URLs ("URL,URL,..." with optional spaces),
// dropping empty items and repeats, in order.
func URLs(list string) []string {
	var out []string
	for _, u := range strings.Split(list, ",") {
		if u = strings.TrimSpace(u); u != "" && !slices.Contains(out, u) {
			out = append(out, u)
		}
	}
	return out
}

// Validate checks the configuration.
func (c Config) Validate() error {
	urls := URLs(c.URL)
	if len(urls) == 0 {
		return errors.New("no queue URL")
	}
	for _, raw := range urls {
		if err := validURL(raw); err != nil {
			return err
		}
	}
	if c.Timeout <= 0 || c.RetryFor < 0 {
		return errors.New("client timeout must be positive and retry duration not negative")
	}
	return nil
}

func validURL(raw string) error {
	u, err := url.Parse(raw)
	if err != nil {
		return fmt.Errorf("queue URL %q: %w", raw, err)
	}
	switch u.Scheme {
	case "http", "https":
		if u.Host == "" {
			return fmt.Errorf("queue URL %q has no host", raw)
		}
	case "unix":
		if u.Path == "" {
			return fmt.Errorf("queue URL %q has no socket path (unix:///path/to/queue.sock)", raw)
		}
	default:
		return fmt.Errorf("queue URL %q: scheme must be http, https or unix", raw)
	}
	return nil
}

// Client calls the queue.
type Client struct {
	cfg Config
	eps []endpoint
	cur atomic.Int32 // the endpoint that answered last: calls start there
}

// endpoint is one agent's API.
type endpoint struct {
	url    string
	r      *resty.Client
	stream *resty.Client // r without the overall timeout: streamed answers
}

// New returns a client.
func New(cfg Config) (*Client, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	c := &Client{cfg: cfg}
	for _, raw := range URLs(cfg.URL) {
		c.eps = append(c.eps, newEndpoint(cfg, raw))
	}
	return c, nil
}

// URL is the queue URL calls go to now (the last to answer).
func (c *Client) URL() string { return c.eps[c.cur.Load()].url }

func newEndpoint(cfg Config, raw string) endpoint {
	u, _ := url.Parse(raw)
	r := resty.New().SetTimeout(cfg.Timeout).SetHeader("Accept", "application/json").SetError(&api.Error{})
	if u.Scheme == "unix" {
		sock := u.Path
		r.SetTransport(&http.Transport{
			DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
				var d net.Dialer
				return d.DialContext(ctx, "unix", sock)
			},
		})
		r.SetBaseURL("http://harvest-queue")
	} else {
		r.SetBaseURL(strings.TrimSuffix(raw, "/"))
	}
	if cfg.CAFile != "" {
		r.SetRootCertificate(cfg.CAFile)
	}
	if cfg.Token != "" {
		r.SetAuthToken(cfg.Token)
	}
	stream := resty.NewWithClient(&http.Client{Transport: r.GetClient().Transport}).SetBaseURL(r.BaseURL).
		SetHeader("Accept", api.ContentTypeNDJSON)
	if cfg.Token != "" {
		stream.SetAuthToken(cfg.Token)
	}
	return endpoint{url: raw, r: r, stream: stream}
}

// Error is an error answer of the queue. It wraps the sentinel of its
// code (queue/api: errors.Is(err, api.ErrStaleEpoch) and so on).
type Error struct {
	Status  int
	Code    api.Code
	Message string
}

func (e *Error) Error() string {
	return fmt.Sprintf("queue: %s (HTTP %d)", e.Message, e.Status)
}

// Unwrap is the sentinel of the answer's code (for an answer without a
// code, from an older server or a proxy, that of its HTTP status).
func (e *Error) Unwrap() error { return api.ErrOf(e.Code, e.Status) }

// do performs one call; idempotent calls are retried on transient failures.
func (c *Client) do(ctx context.Context, method, path string, query url.Values, body, out any, idempotent bool) error {
	op := func() error {
		return c.each(ctx, idempotent, func(ep endpoint) error {
			req := ep.r.R().SetContext(ctx)
			if body != nil {
				req.SetHeader("Content-Type", "application/json").SetBody(body)
			}
			if out != nil {
				req.SetResult(out)
			}
			if query != nil {
				req.SetQueryParamsFromValues(query)
			}
			resp, err := req.Execute(method, path)
			if err != nil {
				if ctx.Err() != nil {
					return backoff.Permanent(ctx.Err())
				}
				return fmt.Errorf("queue %s %s at %s: %w", method, path, ep.url, err)
			}
			if resp.IsSuccess() {
				return nil
			}
			e := &Error{Status: resp.StatusCode(), Message: strings.TrimSpace(resp.String())}
			if ae, ok := resp.Error().(*api.Error); ok && ae.Error != "" {
				e.Message = ae.Error
				e.Code = ae.Code
			}
			return retryable(e)
		})
	}
	if !idempotent || c.cfg.RetryFor == 0 {
		err := op()
		var perm *backoff.PermanentError
		if errors.As(err, &perm) {
			return perm.Err
		}
		return err
	}
	b := backoff.NewExponentialBackOff()
	b.InitialInterval = 200 * time.Millisecond
	b.MaxInterval = 5 * time.Second
	b.MaxElapsedTime = c.cfg.RetryFor
	return backoff.Retry(op, backoff.WithContext(b, ctx))
}

// each runs one try of a call on the endpoints in turn, from the one that
// answered last, until one gives an answer that is not a failure of the
// server (success, or a permanent error such as a 4xx), which becomes the
// current one. A call that may have been applied (anything but a refused
// connection) moves on only when it is safe to repeat (idempotent: the
// queue's idempotency keys, task attempts and lease holders make a repeat
// at another agent of the same database a no-op). The error is the last
// endpoint's.
func (c *Client) each(ctx context.Context, idempotent bool, try func(endpoint) error) error {
	start := int(c.cur.Load())
	var err error
	for k := range c.eps {
		i := (start + k) % len(c.eps)
		err = try(c.eps[i])
		var perm *backoff.PermanentError
		if err == nil || errors.As(err, &perm) {
			c.cur.Store(int32(i))
			return err
		}
		if ctx.Err() != nil || (!idempotent && !neverSent(err)) {
			return err
		}
	}
	return err
}

// neverSent says whether a failed call surely never reached a server: its
// connection was never made (refused, no route, no such socket), so any
// call, even one that is not idempotent, may go to another agent.
func neverSent(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial"
}

// retryable is e, to be retried if the server failed (5xx), else as a
// permanent error.
func retryable(e *Error) error {
	if e.Status >= 500 {
		return e
	}
	return backoff.Permanent(e)
}

// ListOptions select jobs.
type ListOptions struct {
	User   string // admins only
	State  string
	Cursor int64
	Limit  int
}

// Jobs lists one page of jobs, newest first.
func (c *Client) Jobs(ctx context.Context, o ListOptions) (api.JobList, error) {
	q := url.Values{}
	if o.User != "" {
		q.Set("user", o.User)
	}
	if o.State != "" {
		q.Set("state", o.State)
	}
	if o.Cursor > 0 {
		q.Set("cursor", strconv.FormatInt(o.Cursor, 10))
	}
	if o.Limit > 0 {
		q.Set("limit", strconv.Itoa(o.Limit))
	}
	var l api.JobList
	return l, c.do(ctx, http.MethodGet, api.PathJobs, q, nil, &l, true)
}

// Job returns one job.
func (c *Client) Job(ctx context.Context, id int64) (api.Job, error) {
	var j api.Job
	return j, c.do(ctx, http.MethodGet, api.PathJob+strconv.FormatInt(id, 10), nil, nil, &j, true)
}

// Failures returns a page of the job's tasks that failed at least once
// (cursor 0: from the first; limit 0: the queue's default page).
func (c *Client) Failures(ctx context.Context, id, cursor int64, limit int) (api.FailureList, error) {
	q := url.Values{}
	if cursor > 0 {
		q.Set("cursor", strconv.FormatInt(cursor, 10))
	}
	if limit > 0 {
		q.Set("limit", strconv.Itoa(limit))
	}
	var l api.FailureList
	return l, c.do(ctx, http.MethodGet, api.PathJob+strconv.FormatInt(id, 10)+api.PathFailuresSuffix, q, nil, &l, true)
}

// Cancel kills a job. A retry after a lost answer gets ErrConflict ("already KILLED").
func (c *Client) Cancel(ctx context.Context, id int64) (api.Job, error) {
	var j api.Job
	return j, c.do(ctx, http.MethodDelete, api.PathJob+strconv.FormatInt(id, 10), nil, nil, &j, true)
}

// Users lists every user's standing.
func (c *Client) Users(ctx context.Context) ([]api.User, error) {
	var l api.UserList
	return l.Users, c.do(ctx, http.MethodGet, api.PathUsers, nil, nil, &l, true)
}

// SetUser sets a user's priority and quotas (admin).
func (c *Client) SetUser(ctx context.Context, name string, s api.UserSettings) (api.User, error) {
	var u api.User
	return u, c.do(ctx, http.MethodPut, api.PathUser+url.PathEscape(name), nil, s, &u, true)
}

// Nodes returns the node settings (admin).
func (c *Client) Nodes(ctx context.Context) (api.Nodes, error) {
	var n api.Nodes
	return n, c.do(ctx, http.MethodGet, api.PathNodes, nil, nil, &n, true)
}

// SetNodes sets the floor and cap of pilot nodes (admin).
func (c *Client) SetNodes(ctx context.Context, s api.NodesSettings) (api.Nodes, error) {
	var n api.Nodes
	return n, c.do(ctx, http.MethodPut, api.PathNodes, nil, s, &n, true)
}

// CreateToken creates a token (never retried: each call makes a new one).
func (c *Client) CreateToken(ctx context.Context, req api.TokenRequest) (api.Token, error) {
	var t api.Token
	return t, c.do(ctx, http.MethodPost, api.PathTokens, nil, req, &t, false)
}

// Tokens lists the caller's tokens (an admin may name another user).
func (c *Client) Tokens(ctx context.Context, user string) ([]api.TokenInfo, error) {
	var l api.TokenList
	var q url.Values
	if user != "" {
		q = url.Values{"user": {user}}
	}
	return l.Tokens, c.do(ctx, http.MethodGet, api.PathTokens, q, nil, &l, true)
}

// RevokeToken revokes the caller's token id (an admin may name another
// user): the start of its hash, as Tokens shows it.
func (c *Client) RevokeToken(ctx context.Context, user, id string) error {
	var q url.Values
	if user != "" {
		q = url.Values{"user": {user}}
	}
	return c.do(ctx, http.MethodDelete, api.PathToken+url.PathEscape(id), q, nil, nil, false)
}

// Whoami says who the queue thinks the caller is.
func (c *Client) Whoami(ctx context.Context) (api.Whoami, error) {
	var w api.Whoami
	return w, c.do(ctx, http.MethodGet, api.PathWhoami, nil, nil, &w, true)
}

// Lease asks for or renews the master lease (idempotent for the same pilot).
func (c *Client) Lease(ctx context.Context, req pilotproto.LeaseRequest) (pilotproto.Lease, error) {
	var l pilotproto.Lease
	return l, c.do(ctx, http.MethodPost, pilotproto.PathLease, nil, req, &l, true)
}

// Pull asks for tasks (never retried: a lost answer would leave tasks
// ASSIGNED to nobody until the zombie timeout requeues them).
// It asks for the compact form (each job's fields once).
func (c *Client) Pull(ctx context.Context, req pilotproto.PullRequest) (pilotproto.PullResponse, error) {
	req.Compact = true
	var w pilotproto.PullWire
	if err := c.do(ctx, http.MethodPost, pilotproto.PathPull, nil, req, &w, false); err != nil {
		return pilotproto.PullResponse{}, err
	}
	p, err := w.Unpack()
	if err != nil {
		return p, fmt.Errorf("queue %s: the answer: %w", pilotproto.PathPull, err)
	}
	return p, nil
}

// Results reports results (idempotent by task and attempt), plain
// successes compactly (pilotproto.ResultsWire).
func (c *Client) Results(ctx context.Context, req pilotproto.ResultsRequest) (pilotproto.ResultsResponse, error) {
	var r pilotproto.ResultsResponse
	return r, c.do(ctx, http.MethodPost, pilotproto.PathResults, nil, pilotproto.PackResults(req), &r, true)
}

// Heartbeat keeps running tasks and the lease alive.
func (c *Client) Heartbeat(ctx context.Context, req pilotproto.HeartbeatRequest) (pilotproto.HeartbeatResponse, error) {
	var r pilotproto.HeartbeatResponse
	return r, c.do(ctx, http.MethodPost, pilotproto.PathHeartbeat, nil, req, &r, true)
}

// Recommend sends the MiniNode recommendation and demand figures.
func (c *Client) Recommend(ctx context.Context, req pilotproto.RecommendationRequest) error {
	return c.do(ctx, http.MethodPost, pilotproto.PathRecommendation, nil, req, nil, true)
}
