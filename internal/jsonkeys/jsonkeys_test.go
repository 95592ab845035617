package jsonkeys

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
)

type ref struct {
	ID      int64 `json:"task_id"`
	Attempt int   `json:"attempt"`
}

type beat struct {
	Epoch   int64            `json:"epoch"`
	Running []ref            `json:"running"`
	Note    string           //
	Opt     *int             `json:"opt,omitempty"`
	Labels  map[string]int   `json:"labels,omitempty"`
	Extra   json.RawMessage  `json:"extra,omitempty"`
	Any     any              `json:"any,omitempty"`
	Next    *beat            `json:"next,omitempty"`
	Grid    [][]int          `json:"grid,omitempty"`
	Named   map[string][]ref `json:"named,omitempty"`
}

func TestCheck(t *testing.T) {
	for _, tc := range []struct {
		body    string
		unknown bool
		err     string
	}{
		{`{"epoch": 1, "running": [{"task_id": 1, "attempt": 1}, {"task_id": 2, "attempt": 1}], "Note": "a \"epoch\": {"}`, false, ""},
		{`{"epoch": 1, "epoch": 2}`, false, `duplicate key "epoch"`},
		{`{"epoch": 1, "running": [{"task_id": 1, "attempt": 1, "task_id": 2}]}`, false, `duplicate key "task_id"`},
		{`{"ep\u006fch": 1, "epoch": 2}`, false, `duplicate key "epoch"`},
		{`{"EPOCH": 1}`, false, `unknown field "EPOCH"`},
		{`{"EPOCH": 1}`, true, `key "EPOCH" differs only in case from field "epoch"`},
		{`{"epoch": 1, "bonus": {"x": 1, "X": 2}}`, true, `keys "x" and "X" differ only in case`},
		{`{"epoch": 1, "bonus": {"x": 1}, "more": [{"x": 1}, {"x": null}]}`, true, ""},
		{`{"epoch": 1, "bonus": 1}`, false, `unknown field "bonus"`},
		{`{"labels": {"a": 1, "A": 2}}`, false, ""},
		{`{"labels": {"a": 1, "a": 2}}`, false, `duplicate key "a"`},
		{`{"s": "\\", "t": "\\\"", "s": 1}`, true, `duplicate key "s"`},
		// null where the type cannot hold it was read as a zero.
		{`{"epoch": null}`, false, `null for "epoch", where a value is required`},
		{`{"Note": null}`, false, `null for "Note"`},
		{`{"epoch": 1, "running": [{"task_id": 1, "attempt": null}]}`, false, `null for "attempt"`},
		{`{"epoch": 1, "running": [{"task_id": 1, "attempt": 1}, null]}`, false, `null for an element of "running"`},
		{`{"labels": {"a": null}}`, false, `null for "a"`},
		{`{"grid": [[1], [2, null]]}`, false, `null for an element of a list`},
		{`{"named": {"x": [{"task_id": null}]}}`, false, `null for "task_id"`},
		{`{"next": {"epoch": null}}`, false, `null for "epoch"`},
		{`null`, false, `null for the body`},
		// where a Go nil is a value, null is one
		{`{"epoch": 1, "running": null, "opt": null, "labels": null, "extra": null, "any": null, "next": null, "grid": [null], "named": {"x": null}}`, false, ""},
		{`{"any": {"a": null, "b": [null]}, "extra": {"a": null}}`, false, ""},
		{`{"epoch": 1, "bonus": null, "Note": "null"}`, true, ""},
		{`{"running": [{"task_id": 1, "attempt": 1}, {"task_id": 2, "attempt": 1}], "epoch": null}`, false, `"epoch"`},
	} {
		err := For(reflect.TypeFor[beat](), tc.unknown).Check([]byte(tc.body))
		if (err == nil) != (tc.err == "") || (err != nil && !strings.Contains(err.Error(), tc.err)) {
			t.Errorf("%s: %v, want %q", tc.body, err, tc.err)
		}
		if !json.Valid([]byte(tc.body)) {
			t.Errorf("%s: not valid JSON", tc.body)
		}
	}
	var b strings.Builder
	b.WriteString("{")
	for i := range MaxKeys + 1 {
		if i > 0 {
			b.WriteString(",")
		}
		b.WriteString(`"k` + strings.Repeat("x", i) + `": 1`)
	}
	b.WriteString("}")
	if err := For(reflect.TypeFor[beat](), true).Check([]byte(b.String())); err == nil || !strings.Contains(err.Error(), "more than") {
		t.Errorf("%d keys in one object: %v", MaxKeys+1, err)
	}
}

// The scan against decoding the same heartbeat of 10,000 running tasks.
func heartbeat() []byte {
	hb := beat{Epoch: 3}
	for i := range 10000 {
		hb.Running = append(hb.Running, ref{ID: int64(1e6 + i), Attempt: 1})
	}
	b, _ := json.Marshal(hb)
	return b
}

func BenchmarkCheckHeartbeat(b *testing.B) {
	body, s := heartbeat(), For(reflect.TypeFor[beat](), false)
	b.SetBytes(int64(len(body)))
	for b.Loop() {
		if err := s.Check(body); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkDecodeHeartbeat(b *testing.B) {
	body := heartbeat()
	b.SetBytes(int64(len(body)))
	for b.Loop() {
		var hb beat
		if err := json.Unmarshal(body, &hb); err != nil {
			b.Fatal(err)
		}
	}
}
