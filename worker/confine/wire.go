package confine

import (
	"encoding/binary"
	"errors"
	"strconv"
	"strings"
)

// The runner's packets (one per SOCK_SEQPACKET message) are fields
// separated by NUL bytes, which neither a path, an argument nor a
// variable may hold (spawn refuses them): no JSON on the per-task path.
//
//	request: op seq sig path argc argv... env...
//	event:   seq flags status code err   (flags: r ready, d done)

var errBadPacket = errors.New("confine: malformed runner packet")

func encodeRequest(q request) []byte {
	f := []string{q.Op, strconv.FormatInt(q.Seq, 10), strconv.Itoa(q.Sig), q.Path, strconv.Itoa(len(q.Argv))}
	f = append(append(f, q.Argv...), q.Env...)
	return []byte(strings.Join(f, "\x00"))
}

func decodeRequest(b []byte) (request, error) {
	f := strings.Split(string(b), "\x00")
	if len(f) < 5 {
		return request{}, errBadPacket
	}
	seq, err1 := strconv.ParseInt(f[1], 10, 64)
	sig, err2 := strconv.Atoi(f[2])
	argc, err3 := strconv.Atoi(f[4])
	if err1 != nil || err2 != nil || err3 != nil || argc < 0 || 5+argc > len(f) {
		return request{}, errBadPacket
	}
	return request{Op: f[0], Seq: seq, Sig: sig, Path: f[3], Argv: f[5 : 5+argc], Env: f[5+argc:]}, nil
}

func encodeEvent(e event) []byte {
	b := make([]byte, 0, 32+len(e.Err))
	b = binary.AppendVarint(b, e.Seq)
	flags := byte(0)
	if e.Ready {
		flags |= 1
	}
	if e.Done {
		flags |= 2
	}
	b = append(b, flags)
	b = binary.AppendVarint(b, int64(e.Status))
	b = binary.AppendVarint(b, int64(e.Code))
	return append(b, e.Err...)
}

func decodeEvent(b []byte, e *event) error {
	seq, n := binary.Varint(b)
	if n <= 0 || n >= len(b) {
		return errBadPacket
	}
	flags := b[n]
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
	*e = event{Seq: seq, Ready: flags&1 != 0, Done: flags&2 != 0, Status: int(status), Code: int(code), Err: string(b[n:])}
	return nil
}
