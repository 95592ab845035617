package core_test

import (
	"testing"
	"time"

	"github.com/harvest-hpc/harvest/master/core"
	"github.com/harvest-hpc/harvest/pilotproto"
	"github.com/harvest-hpc/harvest/workerproto"
)

// Only the ops whose loss a crash makes good are lazy: fresh tasks pulled
// (the queue requeues what a new master does not list) and results the
// queue acknowledged (a new master's report of them is a duplicate).
// Handing a batch out, storing a result and replacing a held attempt's
// row must be on disk before the master acts on them.
func TestReadyIsLazyOnlyForFreshAddsAndAcknowledgedResults(t *testing.T) {
	now := time.Unix(1000, 0)
	c := core.New(core.Config{PilotID: "p1", Epoch: 1, PullWait: 10 * time.Second, Prefetch: 1, MinBuffer: 4,
		MaxBuffer: 100, MaxPull: 100, IdlePoll: time.Second, RetryInterval: time.Second, HeartbeatInterval: time.Hour,
		LeaseRenewInterval: time.Hour, WorkerTimeout: time.Minute, ReconnectGrace: time.Minute, ReportBatch: 100}, nil, nil, now)
	c.Ready()
	step := func(what string, ev core.Event, lazy bool) core.Ready {
		t.Helper()
		c.Step(now, ev)
		rd := c.Ready()
		if len(rd.Ops) == 0 {
			t.Fatalf("%s: no ops", what)
		}
		if rd.Lazy != lazy {
			t.Fatalf("%s: Lazy %v, want %v (ops %+v)", what, rd.Lazy, lazy, rd.Ops)
		}
		return rd
	}
	task := func(id int64) pilotproto.Task {
		return pilotproto.Task{ID: id, JobID: 7, Attempt: 1, BatchSize: 2, Command: []string{"true"}}
	}
	step("a pull of fresh tasks", core.Pulled{Resp: pilotproto.PullResponse{Tasks: []pilotproto.Task{task(1), task(2)}}}, true)
	step("a registration", core.Register{Req: 1, RegisterRequest: workerproto.RegisterRequest{WorkerID: "w", Slots: 1, Capacity: 1, Address: "http://w"}}, false)
	rd := step("a batch handed out", core.Pull{Req: 2, PullRequest: workerproto.PullRequest{WorkerID: "w", Free: 1}}, false)
	if len(rd.Replies) != 1 || rd.Replies[0].Pull == nil || len(rd.Replies[0].Pull.Batches) != 1 {
		t.Fatalf("pull answered %+v", rd.Replies)
	}
	res := []pilotproto.Result{{TaskID: 1, Attempt: 1, Status: pilotproto.StatusDone}, {TaskID: 2, Attempt: 1, Status: pilotproto.StatusInterrupted}}
	// Stored, and reported at once (no report delay here).
	if rd := step("results stored", core.Results{Req: 3, ResultsRequest: workerproto.ResultsRequest{WorkerID: "w", Results: res}}, false); rd.Report == nil {
		t.Fatalf("no report: %+v", rd)
	}
	// Task 2's interrupted attempt comes back before the acknowledgement:
	// its row is replaced, not added.
	step("a pull of a held attempt", core.Pulled{Resp: pilotproto.PullResponse{Tasks: []pilotproto.Task{task(2)}}}, false)
	step("an acknowledgement", core.Reported{}, true)
}
