package wirejson

import (
	"bytes"
	"encoding/json"
	"sync"
	"unicode/utf8"

	"github.com/harvest-hpc/harvest/pilotproto"
	"github.com/harvest-hpc/harvest/workerproto"
)

// Decode decodes data into v, a pointer to pilotproto.PullResponse or
// ResultsRequest or workerproto.PullResponse or ResultsRequest (reset to
// its zero value first), on the fast path; for other types, or when data
// is off the fast path, it returns slow(data, v) on the reset value: the
// caller's encoding/json decoder (strict or lenient, Unmarshal or a
// Decoder that ignores what follows the value) decides every error and
// every odd case, so Decode accepts and refuses exactly what slow does.
func Decode(data []byte, v any, slow func([]byte, any) error) error {
	switch v := v.(type) {
	case *pilotproto.PullResponse:
		*v = pilotproto.PullResponse{}
		if decodePilotPull(data, v) {
			return nil
		}
		*v = pilotproto.PullResponse{}
	case *pilotproto.ResultsRequest:
		*v = pilotproto.ResultsRequest{}
		if decodePilotResults(data, v) {
			return nil
		}
		*v = pilotproto.ResultsRequest{}
	case *workerproto.PullResponse:
		*v = workerproto.PullResponse{}
		if decodeWorkerPull(data, v) {
			return nil
		}
		*v = workerproto.PullResponse{}
	case *workerproto.ResultsRequest:
		*v = workerproto.ResultsRequest{}
		if decodeWorkerResults(data, v) {
			return nil
		}
		*v = workerproto.ResultsRequest{}
	}
	return slow(data, v)
}

// Decodes reports whether Decode has a fast path for v.
func Decodes(v any) bool {
	switch v.(type) {
	case *pilotproto.PullResponse, *pilotproto.ResultsRequest, *workerproto.PullResponse, *workerproto.ResultsRequest:
		return true
	}
	return false
}

// FirstValue is encoding/json's Decoder on data: the first value is
// decoded and what follows it ignored (the master's worker endpoints and
// the worker's client have always read bodies so).
func FirstValue(data []byte, v any) error {
	return json.NewDecoder(bytes.NewReader(data)).Decode(v)
}

func decodePilotPull(data []byte, v *pilotproto.PullResponse) bool {
	s := scanner{d: data, shared: true}
	return s.object(func(k []byte) (uint, bool) {
		switch string(k) {
		case "tasks":
			return 0, s.tasks(&v.Tasks)
		case "cancelled_jobs":
			return 1, s.ints(&v.CancelledJobs)
		}
		return 0, false
	}) && s.end()
}

func decodeWorkerPull(data []byte, v *workerproto.PullResponse) bool {
	s := scanner{d: data, shared: true}
	return s.object(func(k []byte) (uint, bool) {
		switch string(k) {
		case "batches":
			return 0, list(&s, &v.Batches, func(b *workerproto.Batch) bool {
				return s.object(func(k []byte) (uint, bool) {
					switch string(k) {
					case "id":
						return 0, s.int64(&b.ID)
					case "tasks":
						return 1, s.tasks(&b.Tasks)
					}
					return 0, false
				})
			})
		case "kill_jobs":
			return 1, s.ints(&v.KillJobs)
		}
		return 0, false
	}) && s.end()
}

func decodePilotResults(data []byte, v *pilotproto.ResultsRequest) bool {
	s := scanner{d: data}
	return s.object(func(k []byte) (uint, bool) {
		switch string(k) {
		case "epoch":
			return 0, s.int64(&v.Epoch)
		case "results":
			return 1, s.results(&v.Results)
		}
		return 0, false
	}) && s.end()
}

func decodeWorkerResults(data []byte, v *workerproto.ResultsRequest) bool {
	s := scanner{d: data}
	return s.object(func(k []byte) (uint, bool) {
		switch string(k) {
		case "worker_id":
			return 0, s.string(&v.WorkerID)
		case "results":
			return 1, s.results(&v.Results)
		case "leaving":
			return 2, s.bool(&v.Leaving)
		}
		return 0, false
	}) && s.end()
}

// tasks decodes a list of tasks.
func (s *scanner) tasks(ts *[]pilotproto.Task) bool {
	return pooledList(s, ts, &taskScratch, func(t *pilotproto.Task) bool {
		return s.object(func(k []byte) (uint, bool) {
			switch string(k) {
			case "id":
				return 0, s.int64(&t.ID)
			case "job_id":
				return 1, s.int64(&t.JobID)
			case "owner":
				return 2, s.string(&t.Owner)
			case "attempt":
				return 3, s.int(&t.Attempt)
			case "name":
				return 4, s.string(&t.Name)
			case "input":
				return 5, s.string(&t.Input)
			case "output":
				return 6, s.string(&t.Output)
			case "output_dir":
				return 7, s.string(&t.OutputDir)
			case "work_dir":
				return 8, s.string(&t.WorkDir)
			case "command":
				return 9, s.strings(&t.Command)
			case "env":
				return 10, s.strings(&t.Env)
			case "batch_size":
				return 11, s.int(&t.BatchSize)
			case "cores":
				return 12, s.int(&t.Cores)
			case "timeout_s":
				return 13, s.int64(&t.TimeoutS)
			}
			return 0, false
		})
	})
}

// results decodes a list of results; a pilot id like the previous
// result's is that string again, not another copy.
func (s *scanner) results(rs *[]pilotproto.Result) bool {
	var pilot [1]string
	return pooledList(s, rs, &resultScratch, func(r *pilotproto.Result) bool {
		ok := s.object(func(k []byte) (uint, bool) {
			switch string(k) {
			case "task_id":
				return 0, s.int64(&r.TaskID)
			case "attempt":
				return 1, s.int(&r.Attempt)
			case "status":
				return 2, s.stringOf(&r.Status, statuses)
			case "exit_code":
				return 3, s.int(&r.ExitCode)
			case "started_at":
				return 4, s.int64(&r.StartedAt)
			case "duration_ms":
				return 5, s.int64(&r.DurationMS)
			case "pilot":
				return 6, s.stringOf(&r.Pilot, pilot[:])
			case "error_tail":
				return 7, s.string(&r.ErrorTail)
			}
			return 0, false
		})
		pilot[0] = r.Pilot
		return ok
	})
}

// scanner walks JSON text; every method returns false (bail out) on
// anything off the fast path, leaving the verdict to encoding/json.
type scanner struct {
	d      []byte
	i      int
	shared bool   // strings are substrings of whole
	whole  string // string(d), made at the first string
}

func (s *scanner) space() {
	for s.i < len(s.d) {
		switch s.d[s.i] {
		case ' ', '\t', '\n', '\r':
			s.i++
		default:
			return
		}
	}
}

// consume skips white space and c, if c comes next.
func (s *scanner) consume(c byte) bool {
	s.space()
	if s.i < len(s.d) && s.d[s.i] == c {
		s.i++
		return true
	}
	return false
}

// end reports whether only white space is left.
func (s *scanner) end() bool {
	s.space()
	return s.i == len(s.d)
}

// object walks an object, calling field for each key (the raw bytes of a
// key without escapes) after its colon; field decodes the value and
// returns the key's bit, each key allowed once.
func (s *scanner) object(field func(key []byte) (bit uint, ok bool)) bool {
	if !s.consume('{') {
		return false
	}
	if s.consume('}') {
		return true
	}
	var seen uint64
	for {
		k, ok := s.key()
		if !ok || !s.consume(':') {
			return false
		}
		bit, ok := field(k)
		if !ok || seen&(1<<bit) != 0 {
			return false
		}
		seen |= 1 << bit
		if s.consume('}') {
			return true
		}
		if !s.consume(',') {
			return false
		}
	}
}

// key reads a key made of plain ASCII (no escapes).
func (s *scanner) key() ([]byte, bool) {
	if !s.consume('"') {
		return nil, false
	}
	start := s.i
	for ; s.i < len(s.d); s.i++ {
		switch c := s.d[s.i]; {
		case c == '"':
			s.i++
			return s.d[start : s.i-1], true
		case c < 0x20 || c == '\\' || c >= utf8.RuneSelf:
			return nil, false
		}
	}
	return nil, false
}

// null consumes a null, if one comes next.
func (s *scanner) null() bool {
	s.space()
	if bytes.HasPrefix(s.d[s.i:], []byte("null")) {
		s.i += 4
		return true
	}
	return false
}

// list walks an array into *out, a nil slice: null leaves it nil, [] makes
// it empty (as encoding/json does).
func list[T any](s *scanner, out *[]T, elem func(*T) bool) bool {
	if s.null() {
		return true
	}
	if !s.consume('[') {
		return false
	}
	var ok bool
	*out, ok = elements(s, make([]T, 0, 8), elem)
	return ok
}

// elements appends the elements of an array, its '[' read, to buf.
func elements[T any](s *scanner, buf []T, elem func(*T) bool) ([]T, bool) {
	if s.consume(']') {
		return buf, true
	}
	for {
		var zero T
		buf = append(buf, zero)
		if !elem(&buf[len(buf)-1]) {
			return buf, false
		}
		if s.consume(']') {
			return buf, true
		}
		if !s.consume(',') {
			return buf, false
		}
	}
}

// Scratch lists: a list of structs is decoded into one of these, then
// copied into a slice of its exact length (one allocation, no regrowth).
var (
	taskScratch   = sync.Pool{New: func() any { return new([]pilotproto.Task) }}
	resultScratch = sync.Pool{New: func() any { return new([]pilotproto.Result) }}
)

// maxScratch keeps a rare huge list's scratch out of the pool.
const maxScratch = 4096

// pooledList is list through a scratch slice taken from pool.
func pooledList[T any](s *scanner, out *[]T, pool *sync.Pool, elem func(*T) bool) bool {
	if s.null() {
		return true
	}
	if !s.consume('[') {
		return false
	}
	sp := pool.Get().(*[]T)
	buf, ok := elements(s, (*sp)[:0], elem)
	if ok {
		*out = make([]T, len(buf))
		copy(*out, buf)
	}
	clear(buf) // the pool holds no strings
	if cap(buf) <= maxScratch {
		*sp = buf[:0]
		pool.Put(sp)
	}
	return ok
}

func (s *scanner) ints(out *[]int64) bool {
	return list(s, out, s.int64)
}

func (s *scanner) strings(out *[]string) bool {
	return list(s, out, s.string)
}

// int64 reads an integer of at most 18 digits (longer ones, and floats,
// are left to encoding/json: no overflow check needed here).
func (s *scanner) int64(p *int64) bool {
	s.space()
	neg := false
	if s.i < len(s.d) && s.d[s.i] == '-' {
		neg = true
		s.i++
	}
	start := s.i
	var n int64
	for s.i < len(s.d) && s.d[s.i] >= '0' && s.d[s.i] <= '9' {
		n = n*10 + int64(s.d[s.i]-'0')
		s.i++
	}
	digits := s.i - start
	if digits == 0 || digits > 18 || (digits > 1 && s.d[start] == '0') {
		return false
	}
	if s.i < len(s.d) {
		if c := s.d[s.i]; c == '.' || c == 'e' || c == 'E' {
			return false
		}
	}
	if neg {
		n = -n
	}
	*p = n
	return true
}

func (s *scanner) int(p *int) bool {
	var n int64
	if !s.int64(&n) || int64(int(n)) != n {
		return false
	}
	*p = int(n)
	return true
}

func (s *scanner) bool(p *bool) bool {
	s.space()
	switch {
	case bytes.HasPrefix(s.d[s.i:], []byte("true")):
		*p = true
		s.i += 4
	case bytes.HasPrefix(s.d[s.i:], []byte("false")):
		*p = false
		s.i += 5
	default:
		return false
	}
	return true
}

// string reads a string into *p. Escapes go through encoding/json; valid
// UTF-8 is taken as it is: in a task list, as a substring of one copy of
// the whole input (one allocation for all of a batch's strings, which
// live as long as its tasks), elsewhere as its own copy.
func (s *scanner) string(p *string) bool {
	return s.stringOf(p, nil)
}

// statuses are the result statuses, decoded without an allocation.
var statuses = []string{pilotproto.StatusDone, pilotproto.StatusFailed, pilotproto.StatusTimeout,
	pilotproto.StatusInterrupted, pilotproto.StatusKilled}

// stringOf is string, taking an equal string of known if there is one.
func (s *scanner) stringOf(p *string, known []string) bool {
	if !s.consume('"') {
		return false
	}
	start := s.i
	plain := true
	for s.i < len(s.d) {
		c := s.d[s.i]
		switch {
		case c == '"':
			raw := s.d[start:s.i]
			if !plain && !utf8.Valid(raw) {
				return false // invalid UTF-8: encoding/json replaces it
			}
			s.i++
			for _, k := range known {
				if string(raw) == k {
					*p = k
					return true
				}
			}
			if !s.shared {
				*p = string(raw)
				return true
			}
			if s.whole == "" {
				s.whole = string(s.d)
			}
			*p = s.whole[start : s.i-1]
			return true
		case c == '\\':
			return s.escaped(p, start-1)
		case c < 0x20:
			return false
		case c >= utf8.RuneSelf:
			plain = false
		}
		s.i++
	}
	return false
}

// escaped finishes a string with escapes that began at start (its quote)
// and decodes it with encoding/json.
func (s *scanner) escaped(p *string, start int) bool {
	for s.i < len(s.d) {
		switch c := s.d[s.i]; {
		case c == '\\':
			s.i += 2
			continue
		case c == '"':
			s.i++
			return json.Unmarshal(s.d[start:s.i], p) == nil
		}
		s.i++
	}
	return false
}
