// Package httpapi serves the queue's /v1 REST API over the queue service
// (package queue): routing, authentication transport (peer credentials on
// the Unix socket, bearer tokens elsewhere), roles, strict JSON bodies and
// the error contract of queue/api (a typed code and its status). It holds
// no state and no rules of its own.
package httpapi

import (
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/harvest-hpc/harvest/pilotproto"
	"github.com/harvest-hpc/harvest/queue"
	"github.com/harvest-hpc/harvest/queue/api"
)

// Config configures the API. Only cmd/ maps flags onto it.
type Config struct {
	MaxBodyBytes      int64 // user/admin request bodies
	MaxPilotBodyBytes int64 // pilot request bodies (results batches, heartbeats)
	// BodyReadTimeout bounds the reading of a request body with a
	// Content-Length, plus one second per MiB declared: a body shorter
	// than its Content-Length gives its connection up then, not at the
	// server's 2-minute read timeout.
	BodyReadTimeout time.Duration
}

// DefaultConfig returns the documented limits (1 MiB, 16 MiB).
func DefaultConfig() Config {
	return Config{MaxBodyBytes: 1 << 20, MaxPilotBodyBytes: 16 << 20, BodyReadTimeout: 10 * time.Second}
}

// Validate checks the configuration.
func (c Config) Validate() error {
	if c.MaxBodyBytes < 1024 || c.MaxPilotBodyBytes < 1024 {
		return errors.New("httpapi: body limits must be at least 1 KiB")
	}
	return nil
}

// Server is the API over one queue.
type Server struct {
	q   *queue.Queue
	cfg Config
	log *slog.Logger
}

// New returns the API of q. A config that does not validate falls back to
// the defaults' limits field by field.
func New(q *queue.Queue, cfg Config) *Server {
	def := DefaultConfig()
	if cfg.MaxBodyBytes < 1024 {
		cfg.MaxBodyBytes = def.MaxBodyBytes
	}
	if cfg.MaxPilotBodyBytes < 1024 {
		cfg.MaxPilotBodyBytes = def.MaxPilotBodyBytes
	}
	if cfg.BodyReadTimeout <= 0 {
		cfg.BodyReadTimeout = def.BodyReadTimeout
	}
	return &Server{q: q, cfg: cfg, log: q.Logger()}
}

// Handler returns the /v1 API. Unix-socket callers are identified only if
// the server was started by Serve or ServeHandler (which record peer
// credentials).
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	user := []string{api.RoleUser, api.RoleAdmin}
	admin := []string{api.RoleAdmin}
	pilot := []string{api.RolePilot}
	agent := []string{api.RoleAgent}
	mux.HandleFunc("/v1/healthz", func(w http.ResponseWriter, r *http.Request) {
		s.writeJSON(w, http.StatusOK, map[string]bool{"ok": true})
	})
	mux.Handle(api.PathWhoami, s.route(map[string]endpoint{"GET": {nil, s.whoami, nil}}))
	mux.Handle(api.PathJobs, s.route(map[string]endpoint{"POST": {user, s.submitJob, nil}, "GET": {user, s.listJobs, []string{"state", "user", "cursor", "limit"}}}))
	mux.Handle(api.PathJob+"{id}", s.route(map[string]endpoint{"GET": {user, s.getJob, nil}, "DELETE": {user, s.cancelJob, nil}}))
	mux.Handle(api.PathJob+"{id}"+api.PathFailuresSuffix, s.route(map[string]endpoint{"GET": {user, s.getFailures, []string{"cursor", "limit"}}}))
	mux.Handle(api.PathUsers, s.route(map[string]endpoint{"GET": {user, s.listUsers, nil}}))
	mux.Handle(api.PathUser+"{name}", s.route(map[string]endpoint{"GET": {user, s.getUser, nil}, "PUT": {admin, s.putUser, nil}}))
	mux.Handle(api.PathNodes, s.route(map[string]endpoint{"GET": {admin, s.getNodes, nil}, "PUT": {admin, s.putNodes, nil}}))
	mux.Handle(api.PathTokens, s.route(map[string]endpoint{"POST": {user, s.createToken, nil}, "GET": {user, s.listTokens, []string{"user"}}}))
	mux.Handle(api.PathToken+"{id}", s.route(map[string]endpoint{"DELETE": {user, s.revokeToken, []string{"user"}}}))
	mux.Handle(pilotproto.PathLease, s.route(map[string]endpoint{"POST": {pilot, s.pilotLease, nil}}))
	mux.Handle(pilotproto.PathPull, s.route(map[string]endpoint{"POST": {pilot, s.pilotPull, nil}}))
	mux.Handle(pilotproto.PathResults, s.route(map[string]endpoint{"POST": {pilot, s.pilotResults, nil}}))
	mux.Handle(pilotproto.PathHeartbeat, s.route(map[string]endpoint{"POST": {pilot, s.pilotHeartbeat, nil}}))
	mux.Handle(pilotproto.PathRecommendation, s.route(map[string]endpoint{"POST": {pilot, s.pilotRecommend, nil}}))
	mux.Handle(api.PathAgentRegister, s.route(map[string]endpoint{"POST": {agent, s.agentRegister, nil}}))
	mux.Handle(api.PathAgentRound, s.route(map[string]endpoint{"POST": {agent, s.agentRound, nil}}))
	mux.Handle(api.PathAgentEnd, s.route(map[string]endpoint{"POST": {agent, s.agentEnd, nil}}))
	mux.Handle(api.PathSites, s.route(map[string]endpoint{"GET": {admin, s.listSites, nil}}))
	mux.Handle(api.PathSite+"{name}", s.route(map[string]endpoint{"POST": {admin, s.addSite, nil}, "PUT": {admin, s.putSite, nil}}))
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		s.WriteError(w, fmt.Errorf("%w: no endpoint %s", api.ErrNotFound, r.URL.Path))
	})
	return mux
}

// handlerFunc answers v with status, or err; a status of 0 with no error
// means the handler wrote its answer itself (or the client left).
type handlerFunc func(w http.ResponseWriter, r *http.Request, id queue.Identity) (any, int, error)

type endpoint struct {
	roles []string // nil = any authenticated caller
	h     handlerFunc
	query []string // the query parameters it takes, each at most once
}

// route authenticates, checks the method and the role, and writes the
// answer or the error as JSON.
func (s *Server) route(methods map[string]endpoint) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-s.q.Closing():
			s.WriteError(w, queue.ErrClosed)
			return
		default:
		}
		if err := checkCredentials(r); err != nil {
			s.WriteError(w, err)
			return
		}
		id, err := s.identify(r)
		if err != nil {
			s.WriteError(w, err)
			return
		}
		ep, ok := methods[r.Method]
		if !ok {
			allowed := make([]string, 0, len(methods))
			for m := range methods {
				allowed = append(allowed, m)
			}
			slices.Sort(allowed)
			w.Header().Set("Allow", strings.Join(allowed, ", "))
			s.WriteError(w, fmt.Errorf("%w: %s %s", api.ErrMethod, r.Method, r.URL.Path))
			return
		}
		if ep.roles != nil && !slices.Contains(ep.roles, id.Role) {
			s.WriteError(w, fmt.Errorf("%w: %s needs the %s role, you are %s (%s)", api.ErrForbidden, r.URL.Path, strings.Join(ep.roles, " or "), id.User, id.Role))
			return
		}
		if err := checkRequest(r, ep.query); err != nil {
			s.WriteError(w, err)
			return
		}
		v, status, err := ep.h(w, r, id)
		switch {
		case err != nil:
			s.WriteError(w, err)
		case status != 0: // 0: the handler wrote its answer (a stream) or has none to give
			s.writeJSON(w, status, v)
		}
	})
}

// singleHeaders may be given once: with two, which one counts would be a
// guess (a proxy that checks the last Authorization while the API read
// the first).
var singleHeaders = []string{"Authorization", "Content-Type", api.HeaderIdempotencyKey}

// checkCredentials refuses credentials the API would have to guess
// about: a header of singleHeaders given twice, or an Authorization that
// is not "Bearer TOKEN" (a token sent without its scheme was read as no
// token at all). The scheme's case does not matter (RFC 9110).
func checkCredentials(r *http.Request) error {
	for _, h := range singleHeaders {
		if n := len(r.Header.Values(h)); n > 1 {
			return invalid("the %s header is given %d times: send it once", h, n)
		}
	}
	if _, socket := r.Context().Value(peerKey).(peer); socket {
		return nil // the kernel's peer credentials; a token is ignored
	}
	if auth := r.Header.Get("Authorization"); auth != "" {
		if _, ok := bearerToken(auth); !ok {
			return fmt.Errorf("%w: Authorization must be \"Bearer TOKEN\"", api.ErrUnauthorized)
		}
	}
	return nil
}

// checkRequest refuses a query the endpoint would have to guess about: a
// parameter it does not take (a typo such as ?stat=RUNNING listed every
// job), one given twice (?limit=5&limit=100000000 read the first), or a
// query that does not parse.
func checkRequest(r *http.Request, known []string) error {
	if r.URL.RawQuery == "" {
		return nil
	}
	vals, err := url.ParseQuery(r.URL.RawQuery)
	if err != nil {
		return invalid("malformed query %q: %v", r.URL.RawQuery, err)
	}
	for _, k := range slices.Sorted(maps.Keys(vals)) {
		if !slices.Contains(known, k) {
			if len(known) == 0 {
				return invalid("unknown query parameter %q: %s takes none", k, r.URL.Path)
			}
			return invalid("unknown query parameter %q: %s %s takes %s", k, r.Method, r.URL.Path, strings.Join(known, ", "))
		}
		if n := len(vals[k]); n > 1 {
			return invalid("query parameter %q is given %d times: give it once", k, n)
		}
	}
	return nil
}
