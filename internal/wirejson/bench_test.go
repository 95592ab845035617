package wirejson

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"testing"

	"github.com/harvest-hpc/harvest/pilotproto"
	"github.com/harvest-hpc/harvest/workerproto"
)

// benchMessages are the messages of one dispatch round of `harvest bench
// dispatch` (batch size 100): the queue's pull answer of 100 tasks, a
// worker's pull answer of one 100-task batch, and 100 results each way.
func benchMessages() map[string]any {
	tasks := make([]pilotproto.Task, 100)
	results := make([]pilotproto.Result, 100)
	for i := range tasks {
		tasks[i] = pilotproto.Task{ID: int64(1e6 + i), JobID: 4711, Owner: "user0042", Attempt: 1,
			Name: fmt.Sprintf("entry-%06d", i), Input: fmt.Sprintf("/data/set/entry-%06d", i),
			Output: fmt.Sprintf("/out/job-4711/entry-%06d", i), OutputDir: "/out/job-4711",
			Command: []string{"true", "{input}", "{output}"}, BatchSize: 100, Cores: 1}
		results[i] = pilotproto.Result{TaskID: int64(1e6 + i), Attempt: 1, Status: pilotproto.StatusDone,
			StartedAt: 1795000000000 + int64(i), DurationMS: 3, Pilot: "1234567"}
	}
	return map[string]any{
		"PilotPull":     &pilotproto.PullResponse{Tasks: tasks},
		"WorkerPull":    &workerproto.PullResponse{Batches: []workerproto.Batch{{ID: 9, Tasks: tasks}}},
		"PilotResults":  &pilotproto.ResultsRequest{Epoch: 3, Results: results},
		"WorkerResults": &workerproto.ResultsRequest{WorkerID: "w-1234567-0", Results: results},
	}
}

var benchOrder = []string{"PilotPull", "WorkerPull", "PilotResults", "WorkerResults"}

// BenchmarkEncode: one 100-task or 100-result message, encoding/json's
// Encoder against Encode.
func BenchmarkEncode(b *testing.B) {
	msgs := benchMessages()
	for _, name := range benchOrder {
		v := msgs[name]
		b.Run(name+"/encoding_json", func(b *testing.B) {
			var buf bytes.Buffer
			b.ReportAllocs()
			for b.Loop() {
				buf.Reset()
				if err := json.NewEncoder(&buf).Encode(v); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(name+"/wirejson", func(b *testing.B) {
			var buf []byte
			b.ReportAllocs()
			for b.Loop() {
				buf, _ = Encode(buf[:0], v)
			}
		})
	}
}

// BenchmarkDecode: one 100-task or 100-result message, encoding/json's
// Unmarshal against Decode.
func BenchmarkDecode(b *testing.B) {
	msgs := benchMessages()
	for _, name := range benchOrder {
		v := msgs[name]
		data, _ := json.Marshal(v)
		b.Run(name+"/encoding_json", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if err := json.Unmarshal(data, reflect.New(reflect.TypeOf(v).Elem()).Interface()); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(name+"/wirejson", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if err := Decode(data, reflect.New(reflect.TypeOf(v).Elem()).Interface(), nil); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
