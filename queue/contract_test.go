package queue_test

import (
	"testing"
	"time"

	"github.com/harvest-hpc/harvest/internal/testqueue"
	"github.com/harvest-hpc/harvest/pilotproto"
	"github.com/harvest-hpc/harvest/pilotproto/queuetest"
	"github.com/harvest-hpc/harvest/queue"
	"github.com/harvest-hpc/harvest/queue/api"
)

// harness wraps a real queue; over selects how the suite reaches it.
func harness(t *testing.T, over func(t *testing.T, e *testqueue.Env) pilotproto.Queue) queuetest.Harness {
	const ttl = 5 * time.Second
	e := testqueue.Start(t, func(c *queue.Config) { c.LeaseTTL = ttl })
	return queuetest.Harness{
		Queue: over(t, e), TTL: ttl, Advance: e.Clock.Advance,
		Submit: func(t *testing.T, n, batch, attempts int) int64 {
			return e.Submit(t, n, batch, func(s *api.JobSpec) { s.MaxAttempts = &attempts }).ID
		},
		Cancel: func(t *testing.T, job int64) { e.Cancel(t, job) },
	}
}

func TestQueueInProcessKeepsThePilotContract(t *testing.T) {
	queuetest.Run(t, func(t *testing.T) queuetest.Harness {
		return harness(t, func(_ *testing.T, e *testqueue.Env) pilotproto.Queue { return e.Q })
	})
}

func TestQueueOverHTTPKeepsThePilotContract(t *testing.T) {
	queuetest.Run(t, func(t *testing.T) queuetest.Harness {
		return harness(t, func(t *testing.T, e *testqueue.Env) pilotproto.Queue {
			return testqueue.Client(t, e.Serve(t), testqueue.PilotToken)
		})
	})
}
