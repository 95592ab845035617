// Package wirejson encodes and decodes the few messages on the dispatch
// hot path (task batches and results, queue <-> master <-> workers)
// without reflection. encoding/json spent about a tenth of the queue and
// master's CPU and a third of a worker's on them (issue 17, docs/pilot.md).
//
// The wire format does not change: the encoders write exactly the bytes
// encoding/json writes (tests compare them on random values), and the
// decoders take a fast path only for input they understand completely
// (known keys spelled exactly, once each; integers; strings). Anything
// else (unknown or duplicate keys, case-folded names, floats, overflows,
// null where encoding/json would keep the zero value, malformed JSON,
// trailing data) is left to the caller's encoding/json decoder on a reset
// value, so its errors and its strictness are those of before, by
// construction.
package wirejson

import (
	"encoding/json"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/harvest-hpc/harvest/pilotproto"
	"github.com/harvest-hpc/harvest/workerproto"
)

// Encode appends v as an encoding/json Encoder writes it (with its
// newline), for the hot types (pilotproto.PullResponse and
// ResultsRequest, workerproto.PullResponse and ResultsRequest, values or
// pointers). ok is false for any other type: encode it with encoding/json.
func Encode(b []byte, v any) (out []byte, ok bool) {
	switch v := v.(type) {
	case pilotproto.PullResponse:
		b = appendPilotPull(b, &v)
	case *pilotproto.PullResponse:
		b = appendPilotPull(b, v)
	case pilotproto.ResultsRequest:
		b = appendPilotResults(b, &v)
	case *pilotproto.ResultsRequest:
		b = appendPilotResults(b, v)
	case workerproto.PullResponse:
		b = appendWorkerPull(b, &v)
	case *workerproto.PullResponse:
		b = appendWorkerPull(b, v)
	case workerproto.ResultsRequest:
		b = appendWorkerResults(b, &v)
	case *workerproto.ResultsRequest:
		b = appendWorkerResults(b, v)
	default:
		return b, false
	}
	return append(b, '\n'), true
}

func appendPilotPull(b []byte, p *pilotproto.PullResponse) []byte {
	b = append(b, `{"tasks":`...)
	b = appendList(b, p.Tasks, AppendTask)
	if len(p.CancelledJobs) > 0 {
		b = append(b, `,"cancelled_jobs":`...)
		b = appendList(b, p.CancelledJobs, appendInt)
	}
	return append(b, '}')
}

func appendWorkerPull(b []byte, p *workerproto.PullResponse) []byte {
	b = append(b, '{')
	if len(p.Batches) > 0 {
		b = append(b, `"batches":[`...)
		for i := range p.Batches {
			if i > 0 {
				b = append(b, ',')
			}
			b = append(b, `{"id":`...)
			b = strconv.AppendInt(b, p.Batches[i].ID, 10)
			b = append(b, `,"tasks":`...)
			b = appendList(b, p.Batches[i].Tasks, AppendTask)
			b = append(b, '}')
		}
		b = append(b, ']')
	}
	if len(p.KillJobs) > 0 {
		if len(p.Batches) > 0 {
			b = append(b, ',')
		}
		b = append(b, `"kill_jobs":`...)
		b = appendList(b, p.KillJobs, appendInt)
	}
	return append(b, '}')
}

func appendPilotResults(b []byte, r *pilotproto.ResultsRequest) []byte {
	b = append(b, `{"epoch":`...)
	b = strconv.AppendInt(b, r.Epoch, 10)
	b = append(b, `,"results":`...)
	b = appendList(b, r.Results, AppendResult)
	return append(b, '}')
}

func appendWorkerResults(b []byte, r *workerproto.ResultsRequest) []byte {
	b = append(b, `{"worker_id":`...)
	b = AppendString(b, r.WorkerID)
	b = append(b, `,"results":`...)
	b = appendList(b, r.Results, AppendResult)
	if r.Leaving {
		b = append(b, `,"leaving":true`...)
	}
	return append(b, '}')
}

// AppendTask appends t as encoding/json writes it (the field order and
// omitempty tags of pilotproto.Task).
func AppendTask(b []byte, t *pilotproto.Task) []byte {
	b = append(b, `{"id":`...)
	b = strconv.AppendInt(b, t.ID, 10)
	b = append(b, `,"job_id":`...)
	b = strconv.AppendInt(b, t.JobID, 10)
	b = append(b, `,"owner":`...)
	b = AppendString(b, t.Owner)
	b = append(b, `,"attempt":`...)
	b = strconv.AppendInt(b, int64(t.Attempt), 10)
	b = append(b, `,"name":`...)
	b = AppendString(b, t.Name)
	b = append(b, `,"input":`...)
	b = AppendString(b, t.Input)
	b = append(b, `,"output":`...)
	b = AppendString(b, t.Output)
	b = append(b, `,"output_dir":`...)
	b = AppendString(b, t.OutputDir)
	if t.WorkDir != "" {
		b = append(b, `,"work_dir":`...)
		b = AppendString(b, t.WorkDir)
	}
	b = append(b, `,"command":`...)
	b = appendList(b, t.Command, appendString)
	if len(t.Env) > 0 {
		b = append(b, `,"env":`...)
		b = appendList(b, t.Env, appendString)
	}
	b = append(b, `,"batch_size":`...)
	b = strconv.AppendInt(b, int64(t.BatchSize), 10)
	b = append(b, `,"cores":`...)
	b = strconv.AppendInt(b, int64(t.Cores), 10)
	if t.TimeoutS != 0 {
		b = append(b, `,"timeout_s":`...)
		b = strconv.AppendInt(b, t.TimeoutS, 10)
	}
	return append(b, '}')
}

// AppendResult appends r as encoding/json writes it (the field order and
// omitempty tags of pilotproto.Result).
func AppendResult(b []byte, r *pilotproto.Result) []byte {
	b = append(b, `{"task_id":`...)
	b = strconv.AppendInt(b, r.TaskID, 10)
	b = append(b, `,"attempt":`...)
	b = strconv.AppendInt(b, int64(r.Attempt), 10)
	b = append(b, `,"status":`...)
	b = AppendString(b, r.Status)
	b = append(b, `,"exit_code":`...)
	b = strconv.AppendInt(b, int64(r.ExitCode), 10)
	b = append(b, `,"started_at":`...)
	b = strconv.AppendInt(b, r.StartedAt, 10)
	b = append(b, `,"duration_ms":`...)
	b = strconv.AppendInt(b, r.DurationMS, 10)
	if r.Pilot != "" {
		b = append(b, `,"pilot":`...)
		b = AppendString(b, r.Pilot)
	}
	if r.ErrorTail != "" {
		b = append(b, `,"error_tail":`...)
		b = AppendString(b, r.ErrorTail)
	}
	return append(b, '}')
}

// appendList appends xs as a JSON array (nil: null, as encoding/json
// writes a nil slice; the omitempty lists are not written when empty).
func appendList[T any](b []byte, xs []T, add func([]byte, *T) []byte) []byte {
	if xs == nil {
		return append(b, "null"...)
	}
	b = append(b, '[')
	for i := range xs {
		if i > 0 {
			b = append(b, ',')
		}
		b = add(b, &xs[i])
	}
	return append(b, ']')
}

func appendString(b []byte, s *string) []byte { return AppendString(b, *s) }

func appendInt(b []byte, n *int64) []byte { return strconv.AppendInt(b, *n, 10) }

// AppendString appends s as a JSON string, byte for byte as encoding/json
// writes it: printable ASCII and valid UTF-8 as they are, the rest
// (quotes, backslashes, control characters, <, > and & which encoding/json
// escapes for HTML, U+2028, U+2029, invalid UTF-8) through encoding/json.
func AppendString(b []byte, s string) []byte {
	for i := 0; i < len(s); {
		c := s[i]
		if asIs[c] {
			i++
			continue
		}
		if c < utf8.RuneSelf {
			return appendQuoted(b, s)
		}
		r, n := utf8.DecodeRuneInString(s[i:])
		if (r == utf8.RuneError && n == 1) || r == '\u2028' || r == '\u2029' {
			return appendQuoted(b, s)
		}
		i += n
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"')
}

// asIs marks the ASCII bytes encoding/json writes as they are.
var asIs = func() (t [256]bool) {
	for c := 0x20; c < utf8.RuneSelf; c++ {
		t[c] = !strings.ContainsRune(`"\\<>&`, rune(c))
	}
	return t
}()

func appendQuoted(b []byte, s string) []byte {
	enc, _ := json.Marshal(s) // a string always encodes
	return append(b, enc...)
}
