package master

import (
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"

	"github.com/harvest-hpc/harvest/internal/wirejson"
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
		reply(w, resp, err)
	})
	mux.HandleFunc("POST "+workerproto.PathPull, func(w http.ResponseWriter, r *http.Request) {
		var req workerproto.PullRequest
		if !m.decode(w, r, &req) {
			return
		}
		resp, err := m.Pull(r.Context(), req)
		reply(w, resp, err)
	})
	mux.HandleFunc("POST "+workerproto.PathResults, func(w http.ResponseWriter, r *http.Request) {
		var req workerproto.ResultsRequest
		if !m.decode(w, r, &req) {
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
	buf := wirejson.GetBuffer()
	defer wirejson.PutBuffer(buf)
	_, err := buf.ReadFrom(http.MaxBytesReader(w, r.Body, maxBody))
	if err == nil {
		// Results go through wirejson's decoder; anything off its fast
		// path, and every other request, through encoding/json's Decoder.
		err = wirejson.Decode(buf.Bytes(), v, wirejson.FirstValue)
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

// replyBufs holds answers being encoded: a master answers every worker's
// pull and results.
var replyBufs = sync.Pool{New: func() any { return new([]byte) }}

// maxPooled keeps a rare huge answer's buffer out of the pool.
const maxPooled = 1 << 20

func reply(w http.ResponseWriter, v any, err error) {
	switch {
	case err == nil:
		w.Header().Set("Content-Type", "application/json")
		bp := replyBufs.Get().(*[]byte)
		defer func() {
			if cap(*bp) <= maxPooled {
				replyBufs.Put(bp)
			}
		}()
		// Pull answers (task batches) are encoded by wirejson, the same
		// bytes without reflection; the rest by encoding/json.
		if b, ok := wirejson.Encode((*bp)[:0], v); ok {
			*bp = b
			// With its length the answer goes out in one piece, not chunked.
			w.Header().Set("Content-Length", strconv.Itoa(len(b)))
			w.Write(b)
			return
		}
		json.NewEncoder(w).Encode(v)
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
