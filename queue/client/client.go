// Package client is the Go client of the queue's /v1 API, used by the CLI
// and by the pilots' master. Idempotent calls (reads, PUTs, cancel, lease,
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
	"strconv"
	"strings"
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
	// URL is http(s)://host:port or unix:///path/to/queue.sock.
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

// Validate checks the configuration.
func (c Config) Validate() error {
	u, err := url.Parse(c.URL)
	if err != nil {
		return fmt.Errorf("queue URL %q: %w", c.URL, err)
	}
	switch u.Scheme {
	case "http", "https":
		if u.Host == "" {
			return fmt.Errorf("queue URL %q has no host", c.URL)
		}
	case "unix":
		if u.Path == "" {
			return fmt.Errorf("queue URL %q has no socket path (unix:///path/to/queue.sock)", c.URL)
		}
	default:
		return fmt.Errorf("queue URL %q: scheme must be http, https or unix", c.URL)
	}
	if c.Timeout <= 0 || c.RetryFor < 0 {
		return errors.New("client timeout must be positive and retry duration not negative")
	}
	return nil
}

// Client calls the queue.
type Client struct {
	cfg    Config
	r      *resty.Client
	stream *resty.Client // r without the overall timeout: streamed answers
}

// New returns a client.
func New(cfg Config) (*Client, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	u, _ := url.Parse(cfg.URL)
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
		r.SetBaseURL(strings.TrimSuffix(cfg.URL, "/"))
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
	return &Client{cfg: cfg, r: r, stream: stream}, nil
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
		req := c.r.R().SetContext(ctx)
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
			return fmt.Errorf("queue %s %s: %w", method, path, err)
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
