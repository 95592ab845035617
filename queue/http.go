package queue

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/harvest-hpc/harvest/pilotproto"
	"github.com/harvest-hpc/harvest/queue/api"
)

// Handler returns the /v1 API. Unix-socket callers are identified only if
// the server was started by Serve (which records peer credentials).
func (q *Queue) Handler() http.Handler {
	mux := http.NewServeMux()
	user := []string{api.RoleUser, api.RoleAdmin}
	admin := []string{api.RoleAdmin}
	pilot := []string{api.RolePilot}
	mux.HandleFunc("/v1/healthz", func(w http.ResponseWriter, r *http.Request) { writeJSON(w, http.StatusOK, map[string]bool{"ok": true}) })
	mux.Handle(api.PathWhoami, q.route(map[string]endpoint{"GET": {nil, q.whoami}}))
	mux.Handle(api.PathJobs, q.route(map[string]endpoint{"POST": {user, q.submitJob}, "GET": {user, q.listJobs}}))
	mux.Handle(api.PathJob+"{id}", q.route(map[string]endpoint{"GET": {user, q.getJob}, "DELETE": {user, q.cancelJob}}))
	mux.Handle(api.PathUsers, q.route(map[string]endpoint{"GET": {user, q.listUsers}}))
	mux.Handle(api.PathUser+"{name}", q.route(map[string]endpoint{"GET": {user, q.getUser}, "PUT": {admin, q.putUser}}))
	mux.Handle(api.PathNodes, q.route(map[string]endpoint{"GET": {admin, q.getNodes}, "PUT": {admin, q.putNodes}}))
	mux.Handle(api.PathTokens, q.route(map[string]endpoint{"POST": {user, q.createToken}}))
	mux.Handle(pilotproto.PathLease, q.route(map[string]endpoint{"POST": {pilot, q.pilotLease}}))
	mux.Handle(pilotproto.PathPull, q.route(map[string]endpoint{"POST": {pilot, q.pilotPull}}))
	mux.Handle(pilotproto.PathResults, q.route(map[string]endpoint{"POST": {pilot, q.pilotResults}}))
	mux.Handle(pilotproto.PathHeartbeat, q.route(map[string]endpoint{"POST": {pilot, q.pilotHeartbeat}}))
	mux.Handle(pilotproto.PathRecommendation, q.route(map[string]endpoint{"POST": {pilot, q.pilotRecommend}}))
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeErr(w, fmt.Errorf("%w: no endpoint %s", api.ErrNotFound, r.URL.Path), q)
	})
	return mux
}

type handlerFunc func(w http.ResponseWriter, r *http.Request, id identity) (any, int, error)

type endpoint struct {
	roles []string // nil = any authenticated caller
	h     handlerFunc
}

// route authenticates, checks the method and the role, and writes the
// answer or the error as JSON.
func (q *Queue) route(methods map[string]endpoint) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-q.closed:
			writeErr(w, ErrClosed, q)
			return
		default:
		}
		id, err := q.authenticate(r)
		if err != nil {
			writeErr(w, err, q)
			return
		}
		ep, ok := methods[r.Method]
		if !ok {
			allowed := make([]string, 0, len(methods))
			for m := range methods {
				allowed = append(allowed, m)
			}
			w.Header().Set("Allow", strings.Join(allowed, ", "))
			writeErr(w, fmt.Errorf("%w: %s %s", api.ErrMethod, r.Method, r.URL.Path), q)
			return
		}
		if ep.roles != nil && !slices.Contains(ep.roles, id.role) {
			writeErr(w, fmt.Errorf("%w: %s needs the %s role, you are %s (%s)", api.ErrForbidden, r.URL.Path, strings.Join(ep.roles, " or "), id.user, id.role), q)
			return
		}
		v, status, err := ep.h(w, r, id)
		if err != nil {
			writeErr(w, err, q)
			return
		}
		writeJSON(w, status, v)
	})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(v)
}

func writeErr(w http.ResponseWriter, err error, q *Queue) {
	status := statusOf(err)
	msg := err.Error()
	if status >= 500 {
		q.log.Error("request failed", "error", err)
		if !errors.Is(err, ErrClosed) {
			msg = "internal error (see the agent's log)"
		}
	}
	writeJSON(w, status, api.Error{Error: msg, Code: api.CodeOf(err)})
}

// decode reads one JSON object, rejecting unknown fields, trailing data
// and bodies over limit.
func decode(w http.ResponseWriter, r *http.Request, limit int64, v any) error {
	if ct := r.Header.Get("Content-Type"); ct != "" && !strings.HasPrefix(ct, "application/json") {
		return invalid("Content-Type must be application/json, got %q", ct)
	}
	r.Body = http.MaxBytesReader(w, r.Body, limit)
	dec := json.NewDecoder(r.Body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return fmt.Errorf("%w: the limit is %d bytes", api.ErrTooLarge, limit)
		}
		if errors.Is(err, io.EOF) {
			return invalid("empty body: a JSON object is required")
		}
		return invalid("malformed JSON: %v", err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return fmt.Errorf("%w: the limit is %d bytes", api.ErrTooLarge, limit)
		}
		return invalid("malformed JSON: data after the object")
	}
	return nil
}

func pathID(r *http.Request) (int64, error) {
	s := r.PathValue("id")
	id, err := strconv.ParseInt(s, 10, 64)
	if err != nil || id <= 0 {
		return 0, invalid("job id %q is not a positive integer", s)
	}
	return id, nil
}

func (q *Queue) whoami(w http.ResponseWriter, r *http.Request, id identity) (any, int, error) {
	return api.Whoami{User: id.user, Role: id.role, Via: id.via}, http.StatusOK, nil
}

func (q *Queue) submitJob(w http.ResponseWriter, r *http.Request, id identity) (any, int, error) {
	var spec api.JobSpec
	if err := decode(w, r, q.cfg.MaxBodyBytes, &spec); err != nil {
		return nil, 0, err
	}
	j, err := q.Submit(r.Context(), id.user, spec)
	return j, http.StatusCreated, err
}

func (q *Queue) listJobs(w http.ResponseWriter, r *http.Request, id identity) (any, int, error) {
	v := r.URL.Query()
	f := ListFilter{Owner: id.user, State: v.Get("state")}
	if id.role == api.RoleAdmin {
		f.Owner = v.Get("user") // admins see everybody unless they filter
	} else if u := v.Get("user"); u != "" && u != id.user {
		return nil, 0, fmt.Errorf("%w: you can list only your own jobs", api.ErrForbidden)
	}
	if s := v.Get("cursor"); s != "" {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return nil, 0, invalid("cursor %q is not an integer", s)
		}
		f.Cursor = n
	}
	if s := v.Get("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			return nil, 0, invalid("limit %q is not a positive integer", s)
		}
		f.Limit = n
	}
	l, err := q.ListJobs(r.Context(), f)
	return l, http.StatusOK, err
}

func (q *Queue) getJob(w http.ResponseWriter, r *http.Request, id identity) (any, int, error) {
	jid, err := pathID(r)
	if err != nil {
		return nil, 0, err
	}
	j, err := q.Job(r.Context(), id.user, id.role == api.RoleAdmin, jid)
	return j, http.StatusOK, err
}

func (q *Queue) cancelJob(w http.ResponseWriter, r *http.Request, id identity) (any, int, error) {
	jid, err := pathID(r)
	if err != nil {
		return nil, 0, err
	}
	j, err := q.Cancel(r.Context(), id.user, id.role == api.RoleAdmin, jid)
	return j, http.StatusOK, err
}

func (q *Queue) listUsers(w http.ResponseWriter, r *http.Request, id identity) (any, int, error) {
	us, err := q.Users(r.Context())
	return api.UserList{Users: us}, http.StatusOK, err
}

func (q *Queue) getUser(w http.ResponseWriter, r *http.Request, id identity) (any, int, error) {
	name := r.PathValue("name")
	if err := validUserName(name); err != nil {
		return nil, 0, err
	}
	u, err := q.User(r.Context(), name)
	return u, http.StatusOK, err
}

func (q *Queue) putUser(w http.ResponseWriter, r *http.Request, id identity) (any, int, error) {
	var s api.UserSettings
	if err := decode(w, r, q.cfg.MaxBodyBytes, &s); err != nil {
		return nil, 0, err
	}
	u, err := q.SetUser(r.Context(), r.PathValue("name"), s)
	return u, http.StatusOK, err
}

func (q *Queue) getNodes(w http.ResponseWriter, r *http.Request, id identity) (any, int, error) {
	n, err := q.Nodes(r.Context())
	return n, http.StatusOK, err
}

func (q *Queue) putNodes(w http.ResponseWriter, r *http.Request, id identity) (any, int, error) {
	var s api.NodesSettings
	if err := decode(w, r, q.cfg.MaxBodyBytes, &s); err != nil {
		return nil, 0, err
	}
	n, err := q.SetNodes(r.Context(), s)
	return n, http.StatusOK, err
}

func (q *Queue) createToken(w http.ResponseWriter, r *http.Request, id identity) (any, int, error) {
	var req api.TokenRequest
	if err := decode(w, r, q.cfg.MaxBodyBytes, &req); err != nil {
		return nil, 0, err
	}
	if req.User == "" {
		req.User = id.user
	}
	if req.Role == "" {
		req.Role = api.RoleUser
	}
	if id.role != api.RoleAdmin && (req.User != id.user || req.Role != api.RoleUser) {
		return nil, 0, fmt.Errorf("%w: you can create only a user token for yourself", api.ErrForbidden)
	}
	t, err := q.CreateToken(r.Context(), req.User, req.Role)
	return t, http.StatusCreated, err
}

func (q *Queue) pilotLease(w http.ResponseWriter, r *http.Request, id identity) (any, int, error) {
	var req pilotproto.LeaseRequest
	if err := decode(w, r, q.cfg.MaxBodyBytes, &req); err != nil {
		return nil, 0, err
	}
	l, err := q.Lease(r.Context(), req)
	return l, http.StatusOK, err
}

func (q *Queue) pilotPull(w http.ResponseWriter, r *http.Request, id identity) (any, int, error) {
	var req pilotproto.PullRequest
	if err := decode(w, r, q.cfg.MaxBodyBytes, &req); err != nil {
		return nil, 0, err
	}
	p, err := q.Pull(r.Context(), req)
	return p, http.StatusOK, err
}

func (q *Queue) pilotResults(w http.ResponseWriter, r *http.Request, id identity) (any, int, error) {
	var req pilotproto.ResultsRequest
	if err := decode(w, r, q.cfg.MaxPilotBodyBytes, &req); err != nil {
		return nil, 0, err
	}
	p, err := q.ReportResults(r.Context(), req)
	return p, http.StatusOK, err
}

func (q *Queue) pilotHeartbeat(w http.ResponseWriter, r *http.Request, id identity) (any, int, error) {
	var req pilotproto.HeartbeatRequest
	if err := decode(w, r, q.cfg.MaxPilotBodyBytes, &req); err != nil {
		return nil, 0, err
	}
	p, err := q.Heartbeat(r.Context(), req)
	return p, http.StatusOK, err
}

func (q *Queue) pilotRecommend(w http.ResponseWriter, r *http.Request, id identity) (any, int, error) {
	var req pilotproto.RecommendationRequest
	if err := decode(w, r, q.cfg.MaxBodyBytes, &req); err != nil {
		return nil, 0, err
	}
	return struct{}{}, http.StatusOK, q.Recommend(r.Context(), req)
}

// Serve serves the API on every listener until ctx ends, then shuts down
// gracefully. Unix-socket listeners identify callers by peer credentials.
func (q *Queue) Serve(ctx context.Context, listeners ...net.Listener) error {
	return q.ServeHandler(ctx, q.Handler(), listeners...)
}

// ListenUnix listens on a Unix socket at path (replacing a stale one),
// world-connectable: identity comes from the peer's credentials.
func ListenUnix(path string) (net.Listener, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, fmt.Errorf("socket directory: %w", err)
	}
	if fi, err := os.Lstat(path); err == nil && fi.Mode()&os.ModeSocket != 0 {
		if c, err := net.Dial("unix", path); err == nil {
			c.Close()
			return nil, fmt.Errorf("socket %s is in use by another queue", path)
		}
		os.Remove(path)
	}
	l, err := net.Listen("unix", path)
	if err != nil {
		return nil, fmt.Errorf("listen on %s: %w", path, err)
	}
	if err := os.Chmod(path, 0o666); err != nil {
		l.Close()
		return nil, fmt.Errorf("chmod %s: %w", path, err)
	}
	return l, nil
}

// ListenTCP listens on addr, with TLS when certFile and keyFile are set.
func ListenTCP(addr, certFile, keyFile string) (net.Listener, error) {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("listen on %s: %w", addr, err)
	}
	if certFile == "" && keyFile == "" {
		return l, nil
	}
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		l.Close()
		return nil, fmt.Errorf("load TLS certificate: %w", err)
	}
	return tls.NewListener(l, &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}), nil
}
