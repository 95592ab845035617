package master_test

import (
	"testing"
	"time"

	"github.com/harvest-hpc/harvest/master"
	"github.com/harvest-hpc/harvest/master/core"
	"github.com/harvest-hpc/harvest/pilotproto"
	"github.com/harvest-hpc/harvest/workerproto"
)

// With the default refill rule a buffer of four batches is topped up two
// batches at a time, not after every batch handed out: half as many
// queue pulls (each a transaction at the queue) for real tasks.
func TestDefaultRefillPullsTwoBatchesAtATime(t *testing.T) {
	d := master.DefaultConfig()
	now := time.Unix(1000, 0)
	c := core.New(core.Config{PilotID: "p1", Epoch: 1, PullWait: d.PullWait, Prefetch: d.Prefetch, MinBuffer: 400,
		MaxBuffer: d.MaxBuffer, MaxPull: d.MaxPull, IdlePoll: d.IdlePoll, RetryInterval: d.RetryInterval,
		HeartbeatInterval: time.Hour, LeaseRenewInterval: time.Hour, WorkerTimeout: d.WorkerTimeout,
		ReconnectGrace: d.ReconnectGrace, ReportBatch: d.ReportBatch, RefillPercent: d.RefillPercent}, nil, nil, now)
	c.Step(now, core.Tick{})
	rd := c.Ready()
	if rd.Pull == nil || rd.Pull.Max != 400 {
		t.Fatalf("first pull %+v, want 400 tasks", rd.Pull)
	}
	tasks := make([]pilotproto.Task, 400)
	for i := range tasks {
		tasks[i] = pilotproto.Task{ID: int64(i + 1), JobID: 1, Attempt: 1, BatchSize: 100, Command: []string{"true"}}
	}
	c.Step(now, core.Pulled{Resp: pilotproto.PullResponse{Tasks: tasks}})
	c.Step(now, core.Register{Req: 1, RegisterRequest: workerproto.RegisterRequest{WorkerID: "w", Slots: 1, Capacity: 1}})
	c.Ready()
	var pulls []int
	for i := range 4 {
		c.Step(now, core.Pull{Req: core.ReqID(2 + i), PullRequest: workerproto.PullRequest{WorkerID: "w", Free: 1}})
		rd := c.Ready()
		if len(rd.Replies) != 1 || rd.Replies[0].Pull == nil || len(rd.Replies[0].Pull.Batches) != 1 {
			t.Fatalf("hand-out %d: %+v", i, rd.Replies)
		}
		if rd.Pull != nil {
			pulls = append(pulls, rd.Pull.Max)
			c.Step(now, core.Pulled{}) // empty: the queue has no more
			c.Ready()
		}
	}
	if len(pulls) != 1 || pulls[0] != 200 {
		t.Errorf("four batches of 100 handed from a buffer of 400 made pulls of %v, want one of 200", pulls)
	}
}
