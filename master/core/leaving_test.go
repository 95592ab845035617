package core_test

import (
	"errors"
	"testing"
	"time"

	"github.com/harvest-hpc/harvest/master/core"
	"github.com/harvest-hpc/harvest/pilotproto"
	"github.com/harvest-hpc/harvest/workerproto"
)

// TestALeavingWorkerHandsEverythingBackAtOnce is issue 13 item 11: a
// stopping worker deregisters, so what the master still lists for it (a
// batch whose pull answer never reached it) is requeued at once and the
// worker is forgotten, not after the worker timeout.
func TestALeavingWorkerHandsEverythingBackAtOnce(t *testing.T) {
	now := time.Unix(1000, 0)
	c := core.New(core.Config{PilotID: "p1", Epoch: 1, PullWait: 10 * time.Second, Prefetch: 1, MinBuffer: 4,
		MaxBuffer: 100, MaxPull: 100, IdlePoll: time.Second, RetryInterval: time.Second, HeartbeatInterval: time.Minute,
		LeaseRenewInterval: time.Minute, WorkerTimeout: time.Minute, ReconnectGrace: time.Minute, ReportBatch: 100}, nil, nil, now)
	c.Step(now, core.Register{Req: 1, RegisterRequest: workerproto.RegisterRequest{WorkerID: "w1", PilotID: "p2", Slots: 1, Capacity: 4}})
	if rd := c.Ready(); rd.Pull == nil {
		t.Fatal("the master did not pull from the queue")
	}
	var tasks []pilotproto.Task
	for i := int64(1); i <= 3; i++ {
		tasks = append(tasks, pilotproto.Task{ID: i, JobID: 7, Attempt: 1, BatchSize: 3, Command: []string{"true"}})
	}
	c.Step(now, core.Pulled{Resp: pilotproto.PullResponse{Tasks: tasks}})
	c.Ready()
	c.Step(now, core.Pull{Req: 2, PullRequest: workerproto.PullRequest{WorkerID: "w1", Free: 4}})
	rd := c.Ready()
	if len(rd.Replies) != 1 || rd.Replies[0].Pull == nil || len(rd.Replies[0].Pull.Batches) != 1 {
		t.Fatalf("no batch handed: %+v", rd.Replies)
	}
	// The worker got the batch, then asks again (parked), then stops: it
	// reports task 1 interrupted; tasks 2 and 3 it had queued are in the
	// same report. Here the answer with the batch is taken as lost, so the
	// report holds task 1 only.
	c.Step(now, core.Pull{Req: 3, PullRequest: workerproto.PullRequest{WorkerID: "w1", Free: 4}})
	c.Ready()
	later := now.Add(time.Second)
	c.Step(later, core.Results{Req: 4, ResultsRequest: workerproto.ResultsRequest{WorkerID: "w1", Leaving: true,
		Results: []pilotproto.Result{{TaskID: 1, Attempt: 1, Status: pilotproto.StatusInterrupted}}}})
	rd = c.Ready()
	// Task 1 ran: it goes back to the queue as interrupted, so its next
	// run has a new attempt (issue 35.4). Tasks 2 and 3 never reached
	// the worker: pending again here at once.
	requeued, interrupted := map[int64]bool{}, map[int64]bool{}
	for _, op := range rd.Ops {
		switch {
		case op.Kind == core.OpRequeue:
			requeued[op.Ref.TaskID] = true
		case op.Kind == core.OpFinish && op.Result.Status == pilotproto.StatusInterrupted:
			interrupted[op.Ref.TaskID] = true
		}
	}
	if len(requeued) != 2 || !requeued[2] || !requeued[3] || len(interrupted) != 1 || !interrupted[1] {
		t.Errorf("requeued at once: %v, back to the queue as interrupted: %v; want 2 and 3, and 1", requeued, interrupted)
	}
	if s := c.Stats(); s.Workers != 0 || s.Assigned != 0 || s.Pending != 2 || s.Unreported != 1 {
		t.Errorf("after the worker left: %+v, want no worker, nothing assigned, 2 pending, 1 unreported", s)
	}
	parked := false
	for _, r := range rd.Replies {
		if r.Req == 3 {
			parked = errors.Is(r.Err, core.ErrUnknownWorker)
		}
	}
	if !parked {
		t.Errorf("the leaving worker's parked pull was not answered: %+v", rd.Replies)
	}
}

// TestTheQueueHearsWhetherAPilotsTasksAreConfined: the worker says how it
// isolates its tasks when it registers; the master's heartbeat carries it
// to the queue, for the agent's status page (issue 13 item 2).
func TestTheQueueHearsWhetherAPilotsTasksAreConfined(t *testing.T) {
	now := time.Unix(1000, 0)
	c := core.New(core.Config{PilotID: "p1", Epoch: 1, PullWait: 10 * time.Second, Prefetch: 1, MinBuffer: 4,
		MaxBuffer: 100, MaxPull: 100, IdlePoll: time.Second, RetryInterval: time.Second, HeartbeatInterval: time.Minute,
		LeaseRenewInterval: time.Minute, WorkerTimeout: time.Minute, ReconnectGrace: time.Minute, ReportBatch: 100}, nil, nil, now)
	c.Step(now, core.Register{Req: 1, RegisterRequest: workerproto.RegisterRequest{WorkerID: "w1", PilotID: "p2", Slots: 1, Capacity: 2,
		Confinement: "yes (Landlock ABI 7)"}})
	rd := c.Ready()
	if rd.Beat == nil || len(rd.Beat.Heartbeat.Pilots) != 1 || rd.Beat.Heartbeat.Pilots[0].Confinement != "yes (Landlock ABI 7)" {
		t.Fatalf("heartbeat %+v does not say the pilot's tasks are confined", rd.Beat)
	}
}
