package confine

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"unsafe"
)

// The runner's packets (SOCK_SEQPACKET messages) each hold one or more
// records: the requests the worker had for the runner when it wrote, the
// events of one turn of the runner's loop (every task that ended at
// once, every start that failed). No JSON on the per-task path.
//
// A request is NUL-terminated fields, which neither a path, an argument,
// a variable nor a name may hold (appendRequest refuses them):
//
//	op seq sig timeout path argc envc readc out err tmp argv... env... read...
//
// op: "start" (alone in its packet, with 3 descriptors: stdin, stdout,
// stderr), "run" (the runner makes the task's logs out and err and its
// temporary directory tmp), "queue" (a "run" that waits for one of the
// runner's slots and is stopped after timeout milliseconds, 0: never),
// "slots" (sig: how many queued tasks may run at once, 0: any number),
// "signal" (sig to task seq's group), "stop" (task seq: not started if
// it waits; else SIGTERM to its group, SIGKILL after the runner's grace).
//
// An event is varints and bytes:
//
//	seq flags status code micros len(err) err
//
// flags: evReady, evDone, evTmpLeft, evFiles, evTimedOut, evSkipped.

const (
	evReady    = 1 << iota // the runner is confined and serves
	evDone                 // the task ended (or could not start: err)
	evTmpLeft              // its temporary directory was not empty: the worker removes it
	evFiles                // it could not start: its logs or temporary directory could not be made
	evTimedOut             // the runner stopped it at its timeout
	evSkipped              // a queued task stopped before it started
)

var errBadPacket = errors.New("confine: malformed runner packet")

// appendRequest appends q's record to b; a field holding a NUL byte is
// refused (b is then returned unchanged).
func appendRequest(b []byte, q request) ([]byte, error) {
	for _, s := range [][]string{{q.Path, q.Out, q.Err, q.Tmp}, q.Argv, q.Env, q.Read} {
		for _, s := range s {
			if strings.IndexByte(s, 0) >= 0 {
				return b, fmt.Errorf("argument, variable or name %q holds a NUL byte", s)
			}
		}
	}
	field := func(s string) { b = append(append(b, s...), 0) }
	num := func(n int64) { b = append(strconv.AppendInt(b, n, 10), 0) }
	field(q.Op)
	num(q.Seq)
	num(int64(q.Sig))
	num(q.TimeoutMS)
	field(q.Path)
	num(int64(len(q.Argv)))
	num(int64(len(q.Env)))
	num(int64(len(q.Read)))
	field(q.Out)
	field(q.Err)
	field(q.Tmp)
	for _, s := range q.Argv {
		field(s)
	}
	for _, s := range q.Env {
		field(s)
	}
	for _, s := range q.Read {
		field(s)
	}
	return b, nil
}

// decodeRequests calls f with each request of packet b (their strings
// are b's, not copies, a few dozen allocations per task fewer: b must not
// change while they are used), or returns why b is malformed (the
// records before it were passed to f).
func decodeRequests(b []byte, f func(request)) error {
	next := func() (string, bool) {
		i := bytes.IndexByte(b, 0)
		if i < 0 {
			return "", false
		}
		s := ""
		if i > 0 {
			s = unsafe.String(&b[0], i) // b's, not a copy
		}
		b = b[i+1:]
		return s, true
	}
	num := func() (int64, bool) {
		s, ok := next()
		if !ok {
			return 0, false
		}
		n, err := strconv.ParseInt(s, 10, 64)
		return n, err == nil
	}
	for len(b) > 0 {
		var q request
		var ok [11]bool
		q.Op, ok[0] = next()
		q.Seq, ok[1] = num()
		sig, ok2 := num()
		q.Sig, ok[2] = int(sig), ok2
		q.TimeoutMS, ok[10] = num()
		q.Path, ok[3] = next()
		argc, ok4 := num()
		envc, ok5 := num()
		readc, ok9 := num()
		ok[4], ok[5], ok[9] = ok4, ok5, ok9
		q.Out, ok[6] = next()
		q.Err, ok[7] = next()
		q.Tmp, ok[8] = next()
		for _, o := range ok {
			if !o {
				return errBadPacket
			}
		}
		if argc < 0 || envc < 0 || readc < 0 || argc+envc+readc > int64(len(b)) {
			return errBadPacket
		}
		q.Argv = make([]string, argc)
		q.Env = make([]string, envc)
		if readc > 0 {
			q.Read = make([]string, readc)
		}
		for _, ss := range [][]string{q.Argv, q.Env, q.Read} {
			for i := range ss {
				if ss[i], ok[0] = next(); !ok[0] {
					return errBadPacket
				}
			}
		}
		f(q)
	}
	return nil
}

// appendEvent appends e's record to b.
func appendEvent(b []byte, e event) []byte {
	b = binary.AppendVarint(b, e.Seq)
	b = append(b, e.Flags)
	b = binary.AppendVarint(b, int64(e.Status))
	b = binary.AppendVarint(b, int64(e.Code))
	b = binary.AppendVarint(b, e.Micros)
	b = binary.AppendUvarint(b, uint64(len(e.Err)))
	return append(b, e.Err...)
}

// decodeEvents calls f with each event of packet b, or returns why b is
// malformed.
func decodeEvents(b []byte, f func(event)) error {
	if len(b) == 0 {
		return errBadPacket
	}
	for len(b) > 0 {
		var e event
		seq, n := binary.Varint(b)
		if n <= 0 || n >= len(b) {
			return errBadPacket
		}
		e.Seq, e.Flags = seq, b[n]
		b = b[n+1:]
		status, n := binary.Varint(b)
		if n <= 0 {
			return errBadPacket
		}
		b = b[n:]
		code, n := binary.Varint(b)
		if n <= 0 {
			return errBadPacket
		}
		b = b[n:]
		us, n := binary.Varint(b)
		if n <= 0 {
			return errBadPacket
		}
		b = b[n:]
		e.Micros = us
		l, n := binary.Uvarint(b)
		if n <= 0 || l > uint64(len(b)-n) {
			return errBadPacket
		}
		e.Status, e.Code, e.Err = int(status), int(code), string(b[n:n+int(l)])
		b = b[n+int(l):]
		f(e)
	}
	return nil
}
