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
	Epoch   int64 `json:"epoch"`
	Running []ref `json:"running"`
	Note    string
}

func TestCheck(t *testing.T) {
	names := Names(reflect.TypeFor[beat]())
	for _, n := range []string{"epoch", "running", "task_id", "attempt", "Note"} {
		if !names[n] {
			t.Errorf("Names lacks %q: %v", n, names)
		}
	}
	for _, tc := range []struct {
		body  string
		names bool
		err   string
	}{
		{`{"epoch": 1, "running": [{"task_id": 1, "attempt": 1}, {"task_id": 2, "attempt": 1}], "Note": "a \"epoch\": {"}`, true, ""},
		{`{"epoch": 1, "epoch": 2}`, true, `duplicate key "epoch"`},
		{`{"epoch": 1, "running": [{"task_id": 1, "attempt": 1, "task_id": 2}]}`, true, `duplicate key "task_id"`},
		{`{"ep\u006fch": 1, "epoch": 2}`, true, `duplicate key "epoch"`},
		{`{"EPOCH": 1}`, true, `unknown field "EPOCH"`},
		{`{"epoch": 1, "EPOCH": 1}`, false, `keys "epoch" and "EPOCH" differ only in case`},
		{`{"a": {"x": 1}, "b": {"x": 1}, "c": [{"x": 1}, {"x": 2}]}`, false, ""},
		{`{"a": {"x": 1, "y": {}}, "a": 2}`, false, `duplicate key "a"`},
		{`[{"x": 1}, {"x": 1, "x": 2}]`, false, `duplicate key "x"`},
		{`{"s": "\\", "t": "\\\"", "s": 1}`, false, `duplicate key "s"`},
	} {
		var n map[string]bool
		if tc.names {
			n = names
		}
		err := Check([]byte(tc.body), n)
		if (err == nil) != (tc.err == "") || (err != nil && !strings.Contains(err.Error(), tc.err)) {
			t.Errorf("%s: %v, want %q", tc.body, err, tc.err)
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
	if err := Check([]byte(b.String()), nil); err == nil || !strings.Contains(err.Error(), "more than") {
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
	body, names := heartbeat(), Names(reflect.TypeFor[beat]())
	b.SetBytes(int64(len(body)))
	for b.Loop() {
		if err := Check(body, names); err != nil {
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
