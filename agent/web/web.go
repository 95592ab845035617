// Package web serves the agent's operations endpoints on the queue's
// listeners: the status page (/status, server-rendered, no external
// assets), Prometheus metrics (/metrics) and the admin operations
// (/v1/admin/harvest, /v1/admin/drain, /v1/admin/tokens/rotate). Every
// endpoint authenticates exactly like the /v1 API.
package web

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/harvest-hpc/harvest/agent"
	"github.com/harvest-hpc/harvest/pilotproto"
	"github.com/harvest-hpc/harvest/queue"
	"github.com/harvest-hpc/harvest/queue/api"
	"github.com/harvest-hpc/harvest/queue/httpapi"
	qmetrics "github.com/harvest-hpc/harvest/queue/metrics"
)

// Queue is what the endpoints need from the queue: the service
// (*queue.Queue) and its API's authentication and errors
// (*httpapi.Server); cmd/harvest hands them over together.
type Queue interface {
	Authenticate(r *http.Request) (name, role string, err error)
	AuthenticateToken(r *http.Request, token string) (name, role string, err error)
	WriteError(w http.ResponseWriter, err error)
	Users(ctx context.Context) ([]api.User, error)
	ListJobs(ctx context.Context, f queue.ListFilter) (api.JobList, error)
	PilotStatus() map[string]pilotproto.PilotStatus
	// For the admin's dashboard: each site's yield, and the work lost to
	// give-back.
	Sites(ctx context.Context) (api.SiteList, error)
	Stats(ctx context.Context) (queue.Stats, error)
	// RotateTokens revokes user's tokens of role and makes a new one;
	// it revokes nothing if the new one would be refused.
	RotateTokens(ctx context.Context, user, role string) (api.Token, int, error)
}

// Rounds gives the last round (*agent.Reconciler).
type Rounds interface {
	Last() (agent.RoundResult, bool)
}

// Config wires the endpoints.
type Config struct {
	Queue   Queue
	Rounds  Rounds
	Control *agent.Control
	Metrics *agent.Metrics
	History *History
	// MetricsAnonymous serves /metrics without authentication (for a
	// Prometheus that cannot send a bearer token; the figures name users).
	MetricsAnonymous bool
	// ChartWindow is how far back the utilisation chart goes.
	ChartWindow time.Duration
	// Adapter names the batch system on the page ("slurm", "sim").
	Adapter string
	// GiveBack says how pilots make way for foreign jobs
	// (agent.GiveBack.Describe).
	GiveBack string
	// StateDir and DumpDir are the agent's directories, for admin tools
	// (GET /v1/admin/agent).
	StateDir, DumpDir string
	// Now is the wall clock; tests replace it.
	Now func() time.Time
	Log *slog.Logger
}

// DefaultConfig fills the optional fields.
func DefaultConfig() Config {
	return Config{ChartWindow: 6 * time.Hour, Now: time.Now, Log: slog.New(slog.DiscardHandler)}
}

// Validate reports missing parts.
func (c Config) Validate() error {
	var errs []error
	if c.Queue == nil {
		errs = append(errs, errors.New("web: no queue (the endpoints authenticate through it)"))
	}
	if c.Rounds == nil || c.Control == nil || c.Metrics == nil || c.History == nil {
		errs = append(errs, errors.New("web: rounds, control, metrics and history are required"))
	}
	if c.ChartWindow <= 0 || c.Now == nil || c.Log == nil {
		errs = append(errs, errors.New("web: chart window, clock and logger are required"))
	}
	return errors.Join(errs...)
}

// cookieName holds a token given once as ?token=, so the browser can
// reload the page without the token in the URL.
const cookieName = "harvest_token"

// Handler returns a mux serving the operations endpoints and everything
// else from api (the queue's /v1 handler).
func Handler(cfg Config, apiHandler http.Handler) (http.Handler, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	s := &server{cfg: cfg}
	mux := http.NewServeMux()
	mux.Handle("/", apiHandler)
	mux.HandleFunc("GET "+api.PathStatus, s.status)
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, api.PathStatus, http.StatusFound)
	})
	mux.Handle(api.PathMetrics, qmetrics.Handler(cfg.Metrics.Registry, cfg.Queue, cfg.MetricsAnonymous))
	mux.HandleFunc("GET "+api.PathHarvest, s.admin(s.getHarvest))
	mux.HandleFunc("PUT "+api.PathHarvest, s.admin(s.putHarvest))
	mux.HandleFunc("POST "+api.PathDrain, s.admin(s.postDrain))
	mux.HandleFunc("GET "+api.PathDrain, s.admin(s.getHarvest))
	mux.HandleFunc("POST "+api.PathTokenRotate, s.admin(s.rotateToken))
	mux.HandleFunc("GET "+api.PathAgent, s.admin(s.getAgent))
	return mux, nil
}

type server struct {
	cfg Config
}

// caller authenticates r like the API; for the status page a token may
// also come from the cookie.
func (s *server) caller(r *http.Request, cookie bool) (name, role string, err error) {
	name, role, err = s.cfg.Queue.Authenticate(r)
	if err == nil || !cookie || r.Header.Get("Authorization") != "" {
		return name, role, err
	}
	if c, cerr := r.Cookie(cookieName); cerr == nil && c.Value != "" {
		return s.cfg.Queue.AuthenticateToken(r, c.Value)
	}
	return name, role, err
}

type adminFunc func(w http.ResponseWriter, r *http.Request, user string) (any, error)

// admin authenticates, requires the admin role and writes JSON.
func (s *server) admin(h adminFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		name, role, err := s.caller(r, false)
		if err != nil {
			s.cfg.Queue.WriteError(w, err)
			return
		}
		if role != api.RoleAdmin {
			writeErr(w, fmt.Errorf("%w: %s needs the admin role, you are %s (%s)", api.ErrForbidden, r.URL.Path, name, role))
			return
		}
		v, err := h(w, r, name)
		if err != nil {
			if api.StatusOf(api.CodeOf(err)) >= 500 {
				s.cfg.Log.Error("admin request failed", "path", r.URL.Path, "error", err)
			}
			writeErr(w, err)
			return
		}
		writeJSON(w, http.StatusOK, v)
	}
}

func (s *server) getHarvest(w http.ResponseWriter, r *http.Request, _ string) (any, error) {
	return s.cfg.Control.State(), nil
}

func (s *server) getAgent(w http.ResponseWriter, r *http.Request, _ string) (any, error) {
	return api.AgentInfo{Adapter: s.cfg.Adapter, StateDir: s.cfg.StateDir, DumpDir: s.cfg.DumpDir}, nil
}

func (s *server) putHarvest(w http.ResponseWriter, r *http.Request, user string) (any, error) {
	var req api.HarvestSettings
	if err := decode(w, r, &req); err != nil {
		return nil, err
	}
	if req.Paused == nil {
		return nil, fmt.Errorf("%w: body must set \"paused\" (true or false)", api.ErrInvalid)
	}
	st, err := s.cfg.Control.SetPaused(*req.Paused)
	if err == nil {
		s.cfg.Log.Info("admin changed harvesting", "by", user, "paused", *req.Paused)
	}
	return st, err
}

func (s *server) postDrain(w http.ResponseWriter, r *http.Request, user string) (any, error) {
	var req api.DrainRequest
	if err := decode(w, r, &req); err != nil {
		return nil, err
	}
	st, err := s.cfg.Control.StartDrain(req.Now)
	if err == nil {
		s.cfg.Log.Info("admin started a drain", "by", user, "now", req.Now)
	}
	return st, err
}

func (s *server) rotateToken(w http.ResponseWriter, r *http.Request, user string) (any, error) {
	var req api.TokenRotateRequest
	if err := decode(w, r, &req); err != nil {
		return nil, err
	}
	if req.Role == "" {
		req.Role = api.RoleUser
	}
	if req.Role != api.RoleUser && req.Role != api.RoleAdmin {
		return nil, fmt.Errorf("%w: role must be %q or %q, got %q", api.ErrInvalid, api.RoleUser, api.RoleAdmin, req.Role)
	}
	tok, n, err := s.cfg.Queue.RotateTokens(r.Context(), req.User, req.Role)
	if err != nil {
		return nil, err
	}
	s.cfg.Log.Info("admin rotated tokens", "by", user, "user", req.User, "role", req.Role, "revoked", n)
	return api.TokenRotation{Token: tok, Revoked: n}, nil
}

// decode is the queue API's strict decoder (duplicate keys, key case,
// trailing data, the exact content type).
func decode(w http.ResponseWriter, r *http.Request, v any) error {
	return httpapi.DecodeStrict(w, r, 64<<10, v)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(v)
}

// writeErr answers err with the status and code of the sentinel it wraps.
func writeErr(w http.ResponseWriter, err error) {
	code := api.CodeOf(err)
	status := api.StatusOf(code)
	msg := err.Error()
	if status >= 500 {
		msg = "internal error (see the agent's log)"
	}
	writeJSON(w, status, api.Error{Error: msg, Code: code})
}
