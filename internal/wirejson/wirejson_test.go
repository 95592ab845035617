package wirejson

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"

	"github.com/harvest-hpc/harvest/pilotproto"
	"github.com/harvest-hpc/harvest/workerproto"
)

// gen makes random messages; big records whether an integer longer than
// the fast path's 18 digits went in (the decoders leave those to
// encoding/json).
type gen struct {
	r   *rand.Rand
	big bool
}

var pieces = []string{"a", "Z", "/", " ", "-", "é", "日本", "😀", "\"", "\\", "\n", "\t", "\x00", "\x1f", "\x7f",
	"<", ">", "&", "\u2028", "\u2029", "\xff", "\xc3", "{input}", "{output}", "\ufffd"}

func (g *gen) str() string {
	if g.r.IntN(4) == 0 {
		return ""
	}
	var b strings.Builder
	for range g.r.IntN(12) {
		if g.r.IntN(3) == 0 {
			b.WriteString(pieces[g.r.IntN(len(pieces))])
		} else {
			b.WriteByte(byte('a' + g.r.IntN(26)))
		}
	}
	return b.String()
}

func (g *gen) int64() int64 {
	switch g.r.IntN(6) {
	case 0:
		return 0
	case 1:
		g.big = true
		return []int64{math.MaxInt64, math.MinInt64, math.MaxInt64 - 1, -1e18 - 1}[g.r.IntN(4)]
	case 2:
		return -g.r.Int64N(1e18)
	}
	return g.r.Int64N(1e18)
}

func (g *gen) int() int { return int(g.int64()) }

func (g *gen) strs() []string {
	switch g.r.IntN(4) {
	case 0:
		return nil
	case 1:
		return []string{}
	}
	out := make([]string, 1+g.r.IntN(4))
	for i := range out {
		out[i] = g.str()
	}
	return out
}

func (g *gen) ints() []int64 {
	if g.r.IntN(3) == 0 {
		return nil
	}
	out := make([]int64, g.r.IntN(4))
	for i := range out {
		out[i] = g.int64()
	}
	return out
}

func (g *gen) task() pilotproto.Task {
	return pilotproto.Task{ID: g.int64(), JobID: g.int64(), Owner: g.str(), Attempt: g.int(), Name: g.str(),
		Input: g.str(), Output: g.str(), OutputDir: g.str(), WorkDir: g.str(), Command: g.strs(), Env: g.strs(),
		BatchSize: g.int(), Cores: g.int(), TimeoutS: g.int64()}
}

func (g *gen) tasks() []pilotproto.Task {
	if g.r.IntN(5) == 0 {
		return nil
	}
	out := make([]pilotproto.Task, g.r.IntN(5))
	for i := range out {
		out[i] = g.task()
		if i > 0 && g.r.IntN(2) == 0 { // a batch's tasks share strings
			out[i].Owner, out[i].OutputDir, out[i].Command = out[i-1].Owner, out[i-1].OutputDir, out[i-1].Command
		}
	}
	return out
}

func (g *gen) results() []pilotproto.Result {
	if g.r.IntN(5) == 0 {
		return nil
	}
	out := make([]pilotproto.Result, g.r.IntN(5))
	statuses := []string{pilotproto.StatusDone, pilotproto.StatusFailed, pilotproto.StatusKilled}
	for i := range out {
		out[i] = pilotproto.Result{TaskID: g.int64(), Attempt: g.int(), Status: statuses[g.r.IntN(3)], ExitCode: g.int(),
			StartedAt: g.int64(), DurationMS: g.int64(), Pilot: g.str(), ErrorTail: g.str()}
		if g.r.IntN(4) == 0 {
			out[i].Status = g.str()
		}
	}
	return out
}

// messages returns one random message of each hot type.
func (g *gen) messages() []any {
	batches := make([]workerproto.Batch, g.r.IntN(3))
	for i := range batches {
		batches[i] = workerproto.Batch{ID: g.int64(), Tasks: g.tasks()}
	}
	return []any{
		pilotproto.PullResponse{Tasks: g.tasks(), CancelledJobs: g.ints()},
		pilotproto.ResultsRequest{Epoch: g.int64(), Results: g.results()},
		workerproto.PullResponse{Batches: batches, KillJobs: g.ints()},
		workerproto.ResultsRequest{WorkerID: g.str(), Results: g.results(), Leaving: g.r.IntN(2) == 0},
	}
}

func encodingJSON(t testing.TB, v any) []byte {
	var b bytes.Buffer
	if err := json.NewEncoder(&b).Encode(v); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// fresh returns a new pointer to the zero value of v's type.
func fresh(v any) any { return reflect.New(reflect.TypeOf(v)).Interface() }

func TestEncodeWritesWhatEncodingJSONWrites(t *testing.T) {
	g := &gen{r: rand.New(rand.NewPCG(1, 2))}
	for range 3000 {
		for _, v := range g.messages() {
			want := encodingJSON(t, v)
			got, ok := Encode(nil, v)
			if !ok {
				t.Fatalf("%T: not encoded", v)
			}
			if !bytes.Equal(got, want) {
				t.Fatalf("%T:\n got %s\nwant %s", v, got, want)
			}
			ptr := reflect.New(reflect.TypeOf(v))
			ptr.Elem().Set(reflect.ValueOf(v))
			if got, _ := Encode(nil, ptr.Interface()); !bytes.Equal(got, want) {
				t.Fatalf("*%T:\n got %s\nwant %s", v, got, want)
			}
		}
	}
	if _, ok := Encode(nil, pilotproto.Lease{}); ok {
		t.Fatal("a type off the hot path was encoded")
	}
}

func TestAppendStringWritesWhatEncodingJSONWrites(t *testing.T) {
	for _, s := range append(pieces, "", "plain/path-1", "a\u2028b", "caf\xe9", "\xed\xa0\x80", "ok😀ok") {
		want, _ := json.Marshal(s)
		if got := AppendString([]byte("x"), s); string(got) != "x"+string(want) {
			t.Errorf("%q: got %s, want %s", s, got, want)
		}
	}
}

func TestDecodeReadsWhatEncodingJSONReadsAndTakesTheFastPath(t *testing.T) {
	g := &gen{r: rand.New(rand.NewPCG(3, 4))}
	slowCalls := 0
	slow := func(data []byte, v any) error { slowCalls++; return json.Unmarshal(data, v) }
	for range 3000 {
		g.big = false
		for _, v := range g.messages() {
			data := encodingJSON(t, v)
			want := fresh(v)
			if err := json.Unmarshal(data, want); err != nil {
				t.Fatal(err)
			}
			got := fresh(v)
			before := slowCalls
			if err := Decode(data, got, slow); err != nil {
				t.Fatalf("%s: %v", data, err)
			}
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("%s:\n got %+v\nwant %+v", data, got, want)
			}
			if !g.big && slowCalls != before {
				t.Fatalf("%T left the fast path on encoding/json's own output: %s", v, data)
			}
		}
	}
}

// Inputs off the fast path: each must reach the slow decoder, which
// decides (the strict httpapi decoder refuses most of them).
var oddInputs = []string{
	``, ` `, `null`, `[]`, `"x"`, `{`, `{"tasks":[}`, `{"tasks":[{"id":1}]`,
	`{"tasks":[{"ID":1}]}`, `{"Tasks":[]}`, `{"tasks":[{"id":1,"id":2}]}`, `{"tasks":[],"tasks":[]}`,
	`{"tasks":[{"id":1.5}]}`, `{"tasks":[{"id":1e3}]}`, `{"tasks":[{"id":01}]}`, `{"tasks":[{"id":-}]}`,
	`{"tasks":[{"id":9223372036854775807}]}`, `{"tasks":[{"id":9223372036854775808}]}`,
	`{"tasks":[{"id":"1"}]}`, `{"tasks":[{"owner":null}]}`, `{"tasks":[{"owner":1}]}`, `{"tasks":[null]}`,
	`{"tasks":[{"owner":"a` + "\xff" + `"}]}`, `{"tasks":[{"owner":"a` + "\n" + `"}]}`, `{"tasks":[{"owner":"\x"}]}`,
	`{"tasks":[],"extra":1}`, `{"tasks":[]} x`, `{"tasks":[]}{}`, `{"tasks":[]},`, `{"tasks":[{"command":["a",1]}]}`,
	`{"ta\u0073ks":[]}`, `{"tasks":[{"id":1,}]}`, `{,}`,
	`{"worker_id":"w","leaving":tru}`, `{"worker_id":"w","leaving":1}`, `{"batches":[{"id":1,"tasks":null,"x":0}]}`,
	`{"cancelled_jobs":[1,2,]}`, `{"epoch":1,"results":[{"status":"done"}]}x`,
}

// fastInputs are on the fast path for one of the types.
var fastInputs = []string{
	`{"epoch":-0,"results":null}`, `{"kill_jobs":null}`, "{\"tasks\":[]}\n\t ", `{}`,
	`{"results":[{"status":"done","pilot":"p"},{"status":"done","pilot":"p\u0041"}]}`,
}

// FuzzDecode checks that Decode, with a strict or a lenient encoding/json
// decoder behind it, accepts, refuses and fills exactly what that decoder
// alone does.
func FuzzDecode(f *testing.F) {
	g := &gen{r: rand.New(rand.NewPCG(5, 6))}
	for range 20 {
		for _, v := range g.messages() {
			f.Add(encodingJSON(f, v))
		}
	}
	for _, s := range append(oddInputs, fastInputs...) {
		f.Add([]byte(s))
	}
	strict := func(data []byte, v any) error {
		dec := json.NewDecoder(bytes.NewReader(data))
		dec.DisallowUnknownFields()
		if err := dec.Decode(v); err != nil {
			return err
		}
		if dec.More() {
			return errors.New("data after the value")
		}
		return nil
	}
	types := []any{pilotproto.PullResponse{}, pilotproto.ResultsRequest{}, workerproto.PullResponse{}, workerproto.ResultsRequest{}}
	f.Fuzz(func(t *testing.T, data []byte) {
		for _, slow := range []func([]byte, any) error{strict, json.Unmarshal} {
			for _, typ := range types {
				want := fresh(typ)
				wantErr := slow(data, want)
				got := fresh(typ)
				gotErr := Decode(data, got, slow)
				if fmt.Sprint(gotErr) != fmt.Sprint(wantErr) {
					t.Fatalf("%T %q: error %v, encoding/json's %v", typ, data, gotErr, wantErr)
				}
				if !reflect.DeepEqual(got, want) {
					t.Fatalf("%T %q:\n got %+v\nwant %+v", typ, data, got, want)
				}
			}
		}
	})
}

func TestOddInputsGoToTheSlowDecoder(t *testing.T) {
	for _, s := range oddInputs {
		called := false
		slow := func(data []byte, v any) error { called = true; return nil }
		for _, v := range []any{&pilotproto.PullResponse{}, &workerproto.PullResponse{}, &pilotproto.ResultsRequest{}, &workerproto.ResultsRequest{}} {
			called = false
			Decode([]byte(s), v, slow)
			if !called {
				t.Errorf("%T %q: decoded on the fast path", v, s)
			}
		}
	}
}
