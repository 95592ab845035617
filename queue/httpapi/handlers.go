package httpapi

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/harvest-hpc/harvest/pilotproto"
	"github.com/harvest-hpc/harvest/queue"
	"github.com/harvest-hpc/harvest/queue/api"
)

func pathID(r *http.Request) (int64, error) {
	s := r.PathValue("id")
	// Digits only: ParseInt also takes "+1".
	id, err := strconv.ParseInt(s, 10, 64)
	if err != nil || id <= 0 || strings.TrimLeft(s, "0123456789") != "" {
		return 0, invalid("job id %q is not a positive integer", s)
	}
	return id, nil
}

func (s *Server) whoami(w http.ResponseWriter, r *http.Request, id queue.Identity) (any, int, error) {
	return api.Whoami{User: id.User, Role: id.Role, Via: id.Via}, http.StatusOK, nil
}

// submitJob starts a submission away from the connection (a client that
// goes away does not lose it) and answers with the job, or, when the
// client accepts application/x-ndjson, streams its progress first.
func (s *Server) submitJob(w http.ResponseWriter, r *http.Request, id queue.Identity) (any, int, error) {
	var spec api.JobSpec
	if err := decode(w, r, s.cfg.MaxBodyBytes, &spec); err != nil {
		return nil, 0, err
	}
	sub, err := s.q.StartSubmit(r.Context(), id.User, spec, r.Header.Get(api.HeaderIdempotencyKey))
	if err != nil {
		return nil, 0, err
	}
	if acceptsNDJSON(r) {
		return nil, 0, s.streamSubmission(w, r, sub)
	}
	select {
	case <-sub.Done():
	case <-r.Context().Done():
		return nil, 0, nil // the client left; the submission goes on
	}
	j, err := sub.Result()
	if sub.Replayed() {
		w.Header().Set(api.HeaderReplayed, "true")
		return j, http.StatusOK, err
	}
	return j, http.StatusCreated, err
}

// progressEvery is how often a streamed submission reports progress.
const progressEvery = 250 * time.Millisecond

// streamHold is how long a streamed submission waits for its dataset's
// first entry before it answers 200 and streams anyway.
const streamHold = 10 * time.Second

// streamSubmission writes one api.SubmitEvent per line: progress until the
// submission ends, then the job or the error. Each line extends the
// connection's write deadline, so a long submission is not cut.
//
// Nothing is written before the dataset's first entry is listed (for at
// most streamHold): an error known by then (an empty dataset, one that is
// not a directory) is returned, to be answered with its status as without
// streaming, not 200 and an error line.
func (s *Server) streamSubmission(w http.ResponseWriter, r *http.Request, sub *queue.Submission) error {
	tick := time.NewTicker(progressEvery)
	defer tick.Stop()
	hold := time.NewTimer(streamHold)
	defer hold.Stop()
wait:
	for sub.Progress().Entries == 0 {
		select {
		case <-sub.Done():
			if _, err := sub.Result(); err != nil {
				return err
			}
			break wait
		case <-tick.C:
		case <-hold.C:
			break wait
		case <-r.Context().Done():
			return nil // the client left; the submission goes on
		}
	}
	rc := http.NewResponseController(w)
	w.Header().Set("Content-Type", api.ContentTypeNDJSON)
	if sub.Replayed() {
		w.Header().Set(api.HeaderReplayed, "true")
	}
	w.WriteHeader(http.StatusOK)
	enc := json.NewEncoder(w)
	send := func(ev api.SubmitEvent) bool {
		rc.SetWriteDeadline(time.Now().Add(time.Minute))
		if err := enc.Encode(ev); err != nil {
			return false
		}
		return rc.Flush() == nil
	}
	for {
		select {
		case <-sub.Done():
			j, err := sub.Result()
			if err != nil {
				code := api.CodeOf(err)
				msg := err.Error()
				if api.StatusOf(code) >= 500 {
					s.log.Error("submission failed", "error", err)
					msg = "internal error (see the agent's log)"
				}
				send(api.SubmitEvent{Error: msg, Code: code})
				return nil
			}
			send(api.SubmitEvent{Job: &j, Replayed: sub.Replayed()})
			return nil
		case <-tick.C:
			p := sub.Progress()
			if !send(api.SubmitEvent{Progress: &p}) {
				return nil // the client left; the submission goes on
			}
		case <-r.Context().Done():
			return nil
		}
	}
}

func acceptsNDJSON(r *http.Request) bool {
	for _, a := range strings.Split(r.Header.Get("Accept"), ",") {
		if mt, _, _ := strings.Cut(strings.TrimSpace(a), ";"); mt == api.ContentTypeNDJSON {
			return true
		}
	}
	return false
}

func (s *Server) listJobs(w http.ResponseWriter, r *http.Request, id queue.Identity) (any, int, error) {
	v := r.URL.Query()
	f := queue.ListFilter{Owner: id.User, State: v.Get("state")}
	if id.Role == api.RoleAdmin {
		f.Owner = v.Get("user") // admins see everybody unless they filter
	} else if u := v.Get("user"); u != "" && u != id.User {
		return nil, 0, fmt.Errorf("%w: you can list only your own jobs", api.ErrForbidden)
	}
	var err error
	if f.Cursor, f.Limit, err = page(r); err != nil {
		return nil, 0, err
	}
	l, err := s.q.ListJobs(r.Context(), f)
	return l, http.StatusOK, err
}

func (s *Server) getJob(w http.ResponseWriter, r *http.Request, id queue.Identity) (any, int, error) {
	jid, err := pathID(r)
	if err != nil {
		return nil, 0, err
	}
	j, err := s.q.Job(r.Context(), id.User, id.Role == api.RoleAdmin, jid)
	return j, http.StatusOK, err
}

func (s *Server) getFailures(w http.ResponseWriter, r *http.Request, id queue.Identity) (any, int, error) {
	jid, err := pathID(r)
	if err != nil {
		return nil, 0, err
	}
	cursor, limit, err := page(r)
	if err != nil {
		return nil, 0, err
	}
	l, err := s.q.Failures(r.Context(), id.User, id.Role == api.RoleAdmin, jid, cursor, limit)
	return l, http.StatusOK, err
}

// page reads ?cursor= and ?limit= (absent: 0, the default).
func page(r *http.Request) (cursor int64, limit int, err error) {
	v := r.URL.Query()
	if c := v.Get("cursor"); c != "" {
		if cursor, err = strconv.ParseInt(c, 10, 64); err != nil {
			return 0, 0, invalid("cursor %q is not an integer", c)
		}
	}
	if l := v.Get("limit"); l != "" {
		if limit, err = strconv.Atoi(l); err != nil || limit < 1 {
			return 0, 0, invalid("limit %q is not a positive integer", l)
		}
	}
	return cursor, limit, nil
}

func (s *Server) cancelJob(w http.ResponseWriter, r *http.Request, id queue.Identity) (any, int, error) {
	jid, err := pathID(r)
	if err != nil {
		return nil, 0, err
	}
	j, err := s.q.Cancel(r.Context(), id.User, id.Role == api.RoleAdmin, jid)
	return j, http.StatusOK, err
}

func (s *Server) listUsers(w http.ResponseWriter, r *http.Request, id queue.Identity) (any, int, error) {
	us, err := s.q.Users(r.Context())
	return api.UserList{Users: us}, http.StatusOK, err
}

func (s *Server) getUser(w http.ResponseWriter, r *http.Request, id queue.Identity) (any, int, error) {
	u, err := s.q.User(r.Context(), r.PathValue("name"))
	return u, http.StatusOK, err
}

func (s *Server) putUser(w http.ResponseWriter, r *http.Request, id queue.Identity) (any, int, error) {
	var us api.UserSettings
	if err := decode(w, r, s.cfg.MaxBodyBytes, &us); err != nil {
		return nil, 0, err
	}
	u, err := s.q.SetUser(r.Context(), r.PathValue("name"), us)
	return u, http.StatusOK, err
}

func (s *Server) getNodes(w http.ResponseWriter, r *http.Request, id queue.Identity) (any, int, error) {
	n, err := s.q.Nodes(r.Context())
	return n, http.StatusOK, err
}

func (s *Server) putNodes(w http.ResponseWriter, r *http.Request, id queue.Identity) (any, int, error) {
	var ns api.NodesSettings
	if err := decode(w, r, s.cfg.MaxBodyBytes, &ns); err != nil {
		return nil, 0, err
	}
	n, err := s.q.SetNodes(r.Context(), ns)
	return n, http.StatusOK, err
}

func (s *Server) createToken(w http.ResponseWriter, r *http.Request, id queue.Identity) (any, int, error) {
	var req api.TokenRequest
	if err := decode(w, r, s.cfg.MaxBodyBytes, &req); err != nil {
		return nil, 0, err
	}
	if req.User == "" {
		req.User = id.User
	}
	if req.Role == "" {
		req.Role = api.RoleUser
	}
	if id.Role != api.RoleAdmin && (req.User != id.User || req.Role != api.RoleUser) {
		return nil, 0, fmt.Errorf("%w: you can create only a user token for yourself", api.ErrForbidden)
	}
	if req.User != id.User && req.Role == api.RoleUser {
		if err := s.q.KnownUser(req.User, true, req.Create); err != nil {
			return nil, 0, err
		}
	}
	if req.TTLSeconds < 0 || req.TTLSeconds > api.MaxTokenTTL {
		return nil, 0, invalid("ttl_s must be positive and at most %d (10 years), or left out for the queue's default; got %d", api.MaxTokenTTL, req.TTLSeconds)
	}
	ttl := time.Duration(req.TTLSeconds) * time.Second
	if def := s.q.TokenTTL(); id.Role != api.RoleAdmin && def > 0 && ttl > def {
		return nil, 0, fmt.Errorf("%w: a token lives at most %v on this queue (--token-ttl); ask for less, or ask an admin", api.ErrForbidden, def)
	}
	t, err := s.q.CreateTokenTTL(r.Context(), req.User, req.Role, ttl)
	return t, http.StatusCreated, err
}

// tokenOwner is whose tokens a request lists or revokes: the caller's, or
// (admin) the user ?user= names.
func tokenOwner(r *http.Request, id queue.Identity) (string, error) {
	u := r.URL.Query().Get("user")
	if u == "" || u == id.User {
		return id.User, nil
	}
	if id.Role != api.RoleAdmin {
		return "", fmt.Errorf("%w: you can list and revoke only your own tokens", api.ErrForbidden)
	}
	return u, nil
}

func (s *Server) listTokens(w http.ResponseWriter, r *http.Request, id queue.Identity) (any, int, error) {
	u, err := tokenOwner(r, id)
	if err != nil {
		return nil, 0, err
	}
	ts, err := s.q.Tokens(r.Context(), u)
	if err == nil && len(ts) == 0 && u != id.User {
		// No tokens, and nobody by that name: a typo, not an empty list.
		// (An admin name with tokens is known by them.)
		err = s.q.KnownUser(u, true, false)
	}
	return api.TokenList{Tokens: ts}, http.StatusOK, err
}

func (s *Server) revokeToken(w http.ResponseWriter, r *http.Request, id queue.Identity) (any, int, error) {
	u, err := tokenOwner(r, id)
	if err != nil {
		return nil, 0, err
	}
	tid := r.PathValue("id")
	if err := s.q.RevokeToken(r.Context(), u, tid); err != nil {
		if errors.Is(err, api.ErrNotFound) && u != id.User {
			if kerr := s.q.KnownUser(u, true, false); kerr != nil {
				return nil, 0, kerr
			}
		}
		return nil, 0, err
	}
	return api.TokenInfo{ID: tid, User: u}, http.StatusOK, nil
}

func (s *Server) pilotLease(w http.ResponseWriter, r *http.Request, id queue.Identity) (any, int, error) {
	var req pilotproto.LeaseRequest
	if err := decode(w, r, s.cfg.MaxBodyBytes, &req); err != nil {
		return nil, 0, err
	}
	l, err := s.q.Pool(id.Site).Lease(r.Context(), req)
	return l, http.StatusOK, err
}

func (s *Server) pilotPull(w http.ResponseWriter, r *http.Request, id queue.Identity) (any, int, error) {
	var req pilotproto.PullRequest
	if err := decode(w, r, s.cfg.MaxBodyBytes, &req); err != nil {
		return nil, 0, err
	}
	if req.Compact {
		p, err := s.q.Pool(id.Site).PullWire(r.Context(), req)
		return p, http.StatusOK, err
	}
	p, err := s.q.Pool(id.Site).Pull(r.Context(), req)
	return p, http.StatusOK, err // a pilot older than the queue reads this form
}

func (s *Server) pilotResults(w http.ResponseWriter, r *http.Request, id queue.Identity) (any, int, error) {
	// Both forms in one: a newer pilot's plain successes in done, the
	// rest (an older pilot's every result) in results.
	var wire pilotproto.ResultsWire
	if err := decode(w, r, s.cfg.MaxPilotBodyBytes, &wire); err != nil {
		return nil, 0, err
	}
	req, err := wire.Unpack()
	if err != nil {
		return nil, 0, invalid("%v", err)
	}
	p, err := s.q.Pool(id.Site).ReportResults(r.Context(), req)
	return p, http.StatusOK, err
}

func (s *Server) pilotHeartbeat(w http.ResponseWriter, r *http.Request, id queue.Identity) (any, int, error) {
	var req pilotproto.HeartbeatRequest
	if err := decodeBulk(w, r, s.cfg.MaxPilotBodyBytes, &req); err != nil {
		return nil, 0, err
	}
	p, err := s.q.Pool(id.Site).Heartbeat(r.Context(), req)
	return p, http.StatusOK, err
}

func (s *Server) pilotRecommend(w http.ResponseWriter, r *http.Request, id queue.Identity) (any, int, error) {
	var req pilotproto.RecommendationRequest
	if err := decode(w, r, s.cfg.MaxBodyBytes, &req); err != nil {
		return nil, 0, err
	}
	return struct{}{}, http.StatusOK, s.q.Pool(id.Site).Recommend(r.Context(), req)
}

func (s *Server) agentRegister(w http.ResponseWriter, r *http.Request, id queue.Identity) (any, int, error) {
	var req api.AgentRegistration
	if err := decode(w, r, s.cfg.MaxBodyBytes, &req); err != nil {
		return nil, 0, err
	}
	a, err := s.q.RegisterAgent(r.Context(), id.Site, req)
	return a, http.StatusOK, err
}

func (s *Server) agentRound(w http.ResponseWriter, r *http.Request, id queue.Identity) (any, int, error) {
	var req api.AgentRound
	if err := decode(w, r, s.cfg.MaxBodyBytes, &req); err != nil {
		return nil, 0, err
	}
	p, err := s.q.AgentRound(r.Context(), id.Site, req)
	return p, http.StatusOK, err
}

func (s *Server) agentEnd(w http.ResponseWriter, r *http.Request, id queue.Identity) (any, int, error) {
	var req api.PilotEnd
	if err := decode(w, r, s.cfg.MaxBodyBytes, &req); err != nil {
		return nil, 0, err
	}
	return struct{}{}, http.StatusOK, s.q.Pool(id.Site).PullIn(req.Pilot, req.End)
}

func (s *Server) listSites(w http.ResponseWriter, r *http.Request, id queue.Identity) (any, int, error) {
	l, err := s.q.Sites(r.Context())
	return l, http.StatusOK, err
}

func (s *Server) addSite(w http.ResponseWriter, r *http.Request, id queue.Identity) (any, int, error) {
	var req struct{}
	if err := decode(w, r, s.cfg.MaxBodyBytes, &req); err != nil {
		return nil, 0, err
	}
	t, err := s.q.AddSite(r.Context(), r.PathValue("name"))
	return t, http.StatusCreated, err
}

func (s *Server) putSite(w http.ResponseWriter, r *http.Request, id queue.Identity) (any, int, error) {
	var req api.SiteSettings
	if err := decode(w, r, s.cfg.MaxBodyBytes, &req); err != nil {
		return nil, 0, err
	}
	st, err := s.q.SetSite(r.Context(), r.PathValue("name"), req)
	return st, http.StatusOK, err
}
