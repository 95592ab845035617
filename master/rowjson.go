package master

import (
	"encoding/json"

	"github.com/harvest-hpc/harvest/pilotproto"
)

// The tasks table's body and result columns hold a task and a result as
// encoding/json writes them, appended to a JSON array of rows.

func appendTaskJSON(b []byte, t *pilotproto.Task) []byte { return appendJSON(b, t) }

func appendResultJSON(b []byte, r *pilotproto.Result) []byte { return appendJSON(b, r) }

// appendJSONString writes a state or a worker id, plain ASCII, itself;
// anything else through encoding/json.
func appendJSONString(b []byte, s string) []byte {
	for i := range len(s) {
		if c := s[i]; c < 0x20 || c >= 0x7f || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			return appendJSON(b, s)
		}
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"')
}

// appendJSON appends v's JSON. The values above always encode (strings,
// integers, string lists: no floats, maps or interfaces).
func appendJSON(b []byte, v any) []byte {
	j, err := json.Marshal(v)
	if err != nil {
		panic("master: a checkpoint row does not encode: " + err.Error())
	}
	return append(b, j...)
}
