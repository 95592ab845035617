package confine

import (
	"reflect"
	"testing"
)

func TestRunnerPacketsRoundTrip(t *testing.T) {
	for _, q := range []request{
		{Op: "start", Seq: 1 << 40, Path: "/bin/true", Argv: []string{"true", "", "a b"}, Env: []string{"PATH=/bin", ""}},
		{Op: "start", Seq: 2, Path: "/bin/x", Argv: []string{"x"}},
		{Op: "signal", Seq: 3, Sig: 15},
	} {
		got, err := decodeRequest(encodeRequest(q))
		if len(q.Argv) == 0 {
			q.Argv = []string{}
		}
		if len(q.Env) == 0 {
			q.Env = []string{}
		}
		if err != nil || !reflect.DeepEqual(got, q) {
			t.Errorf("request %+v came back as %+v, %v", q, got, err)
		}
	}
	for _, e := range []event{{Ready: true}, {Seq: 7, Done: true, Status: 0x0f00}, {Seq: -1, Done: true, Code: 127, Err: "start x: no such file"}} {
		var got event
		if err := decodeEvent(encodeEvent(e), &got); err != nil || got != e {
			t.Errorf("event %+v came back as %+v, %v", e, got, err)
		}
	}
	for _, bad := range []string{"", "start\x001", "start\x00x\x000\x00/p\x000", "start\x001\x000\x00/p\x009\x00a"} {
		if _, err := decodeRequest([]byte(bad)); err == nil {
			t.Errorf("request %q decoded", bad)
		}
	}
	if err := decodeEvent([]byte{}, new(event)); err == nil {
		t.Error("an empty event decoded")
	}
}
