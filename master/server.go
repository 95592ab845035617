package master

import (
	"bytes"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"reflect"
	"strconv"
	"strings"

	"github.com/harvest-hpc/harvest/internal/jsonkeys"
	"github.com/harvest-hpc/harvest/workerproto"
)

const maxBody = 64 << 20

// Handler serves the worker protocol (package wire).
func (m *Master) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST "+workerproto.PathRegister, func(w http.ResponseWriter, r *http.Request) {
		var req workerproto.RegisterRequest
		if !m.decode(w, r, &req) {
			return
		}
		resp, err := m.Register(r.Context(), req)
		resp.CompactResults = true // this handler reads ResultsWire
		reply(w, resp, err)
	})
	mux.HandleFunc("POST "+workerproto.PathPull, func(w http.ResponseWriter, r *http.Request) {
		var req workerproto.PullRequest
		if !m.decode(w, r, &req) {
			return
		}
		resp, err := m.Pull(r.Context(), req)
		if err == nil && req.Compact {
			reply(w, workerproto.PackPull(resp), nil)
			return
		}
		reply(w, resp, err) // a worker older than the master reads this form
	})
	mux.HandleFunc("POST "+workerproto.PathResults, func(w http.ResponseWriter, r *http.Request) {
		// Either form: a worker of this release sends plain successes as
		// columns, an older one every result in full.
		var wire workerproto.ResultsWire
		if !m.decode(w, r, &wire) {
			return
		}
		req, err := wire.Unpack()
		if err == nil {
			err = req.Validate()
		}
		if err != nil {
			writeErr(w, http.StatusBadRequest, err.Error())
			return
		}
		resp, err := m.Results(r.Context(), req)
		reply(w, resp, err)
	})
	mux.HandleFunc("POST "+workerproto.PathHeartbeat, func(w http.ResponseWriter, r *http.Request) {
		var req workerproto.HeartbeatRequest
		if !m.decode(w, r, &req) {
			return
		}
		resp, err := m.Heartbeat(r.Context(), req)
		reply(w, resp, err)
	})
	return mux
}

// Authorized reports whether r carries the bearer token.
func Authorized(r *http.Request, token string) bool {
	got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	return ok && subtle.ConstantTimeCompare([]byte(got), []byte(token)) == 1
}

func (m *Master) decode(w http.ResponseWriter, r *http.Request, v interface{ Validate() error }) bool {
	if !Authorized(r, m.cfg.Token) {
		writeErr(w, http.StatusUnauthorized, "missing or wrong pilot token")
		return false
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBody))
	if err != nil {
		writeErr(w, http.StatusBadRequest, fmt.Sprintf("bad request body: %v", err))
		return false
	}
	// Unknown fields are let through: a newer worker may send some. What
	// a parser could read two ways is not (the queue's pilot endpoints
	// refuse it alike): data after the object, a key given twice in an
	// object (encoding/json keeps the last), a key that is a field's name
	// in another case (it folds them onto one field), and null where the
	// field cannot be null (it reads a "free": null as 0).
	dec := json.NewDecoder(bytes.NewReader(body))
	err = dec.Decode(v)
	if err == nil {
		if _, terr := dec.Token(); !errors.Is(terr, io.EOF) {
			err = errors.New("data after the object")
		}
	}
	if err == nil {
		err = jsonkeys.For(reflect.TypeOf(v).Elem(), true).Check(body)
	}
	if err != nil {
		writeErr(w, http.StatusBadRequest, fmt.Sprintf("bad request body: %v", err))
		return false
	}
	if err := v.Validate(); err != nil {
		writeErr(w, http.StatusBadRequest, err.Error())
		return false
	}
	return true
}

func reply(w http.ResponseWriter, v any, err error) {
	switch {
	case err == nil:
		b, err := json.Marshal(v)
		if err != nil {
			writeErr(w, http.StatusInternalServerError, err.Error())
			return
		}
		w.Header().Set("Content-Type", "application/json")
		// With its length the answer goes out in one piece, not chunked.
		w.Header().Set("Content-Length", strconv.Itoa(len(b)))
		w.Write(b)
	case errors.Is(err, ErrUnknownWorker):
		writeErr(w, http.StatusNotFound, workerproto.ErrUnknownWorker)
	case errors.Is(err, ErrNotMaster), errors.Is(err, ErrFenced):
		writeErr(w, http.StatusServiceUnavailable, workerproto.ErrNotMaster)
	default:
		writeErr(w, http.StatusInternalServerError, err.Error())
	}
}

func writeErr(w http.ResponseWriter, code int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	json.NewEncoder(w).Encode(workerproto.ErrorBody{Error: msg})
}
