package queue_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/harvest-hpc/harvest/pilotproto"
	"github.com/harvest-hpc/harvest/pilotproto/contract"
	"github.com/harvest-hpc/harvest/queue"
	"github.com/harvest-hpc/harvest/queue/api"
	"github.com/harvest-hpc/harvest/queue/queuetest"
)

// harness wraps a real queue; over selects how the suite reaches it.
func harness(t *testing.T, over func(e *queuetest.Env) pilotproto.Queue) contract.Harness {
	const ttl = 5 * time.Second
	e := queuetest.New(t, func(c *queue.Config) { c.LeaseTTL = ttl })
	n := 0
	return contract.Harness{
		Queue: over(e), TTL: ttl, Advance: e.Clock.Advance,
		Submit: func(t *testing.T, tasks, batch, attempts int) int64 {
			n++
			j, err := e.Q.Submit(t.Context(), "alice", api.JobSpec{Dataset: e.Dataset(fmt.Sprintf("ds%d", n), tasks),
				Command: []string{"true"}, BatchSize: batch, MaxAttempts: &attempts})
			if err != nil {
				t.Fatal(err)
			}
			return j.ID
		},
		Cancel: func(t *testing.T, job int64) {
			if _, err := e.Q.Cancel(t.Context(), "alice", false, job); err != nil {
				t.Fatal(err)
			}
		},
	}
}

func TestQueueInProcessKeepsThePilotContract(t *testing.T) {
	contract.Run(t, func(t *testing.T) contract.Harness {
		return harness(t, func(e *queuetest.Env) pilotproto.Queue { return e.Q })
	})
}

func TestQueueOverHTTPKeepsThePilotContract(t *testing.T) {
	contract.Run(t, func(t *testing.T) contract.Harness {
		return harness(t, func(e *queuetest.Env) pilotproto.Queue { return e.Client("pilot") })
	})
}

// A second site's pilots reach the queue with their own token and keep the
// same contract in their own pool.
func TestAnotherSitesPoolKeepsThePilotContract(t *testing.T) {
	contract.Run(t, func(t *testing.T) contract.Harness {
		return harness(t, func(e *queuetest.Env) pilotproto.Queue {
			e.AddSite(t, "b", "b-pilot-token-0123456789abcdef0123456789")
			return e.Client("pilot-b")
		})
	})
}
