package core_test

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/harvest-hpc/harvest/master/core"
	"github.com/harvest-hpc/harvest/pilotproto"
	"github.com/harvest-hpc/harvest/workerproto"
)

// The pool's size, which every task handed out records, is counted again
// only when workers change: after every step of random registrations
// (new workers, workers coming back under another pilot), departures,
// silent workers forgotten and pulls, it is what a fresh count gives.
func TestThePoolSizeFollowsTheWorkers(t *testing.T) {
	for seed := uint64(1); seed <= 20; seed++ {
		r := rand.New(rand.NewPCG(seed, 29))
		now := time.Unix(1000, 0)
		c := core.New(core.Config{PilotID: "p1", Epoch: 1, PullWait: 10 * time.Second, Prefetch: 1, MinBuffer: 4,
			MaxBuffer: 100, MaxPull: 100, IdlePoll: time.Second, RetryInterval: time.Second, HeartbeatInterval: time.Minute,
			LeaseRenewInterval: time.Minute, WorkerTimeout: time.Minute, ReconnectGrace: time.Minute, ReportBatch: 100}, nil, nil, now)
		var tasks []pilotproto.Task
		for i := int64(1); i <= 200; i++ {
			tasks = append(tasks, pilotproto.Task{ID: i, JobID: i % 3, Attempt: 1, BatchSize: 2})
		}
		c.Step(now, core.Pulled{Resp: pilotproto.PullResponse{Tasks: tasks}})
		req := core.ReqID(0)
		for step := range 300 {
			req++
			id := fmt.Sprintf("w%d", r.IntN(6))
			switch r.IntN(5) {
			case 0, 1:
				pilot := []string{"", "pA", "pB", "pC"}[r.IntN(4)]
				c.Step(now, core.Register{Req: req, RegisterRequest: workerproto.RegisterRequest{WorkerID: id, PilotID: pilot, Slots: 2, Capacity: 4}})
			case 2:
				c.Step(now, core.Pull{Req: req, PullRequest: workerproto.PullRequest{WorkerID: id, Free: 2}})
			case 3:
				c.Step(now, core.Results{Req: req, ResultsRequest: workerproto.ResultsRequest{WorkerID: id, Leaving: true}})
			case 4:
				now = now.Add(time.Duration(r.IntN(40)) * time.Second)
				c.Step(now, core.Tick{})
			}
			c.Ready()
			if got, want := c.PoolSize(), c.CountPool(); got != want {
				t.Fatalf("seed %d, step %d: pool size %d, counted afresh %d", seed, step, got, want)
			}
		}
	}
}
