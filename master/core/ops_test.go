package core_test

import (
	"slices"
	"testing"
	"time"

	"github.com/harvest-hpc/harvest/master/core"
	"github.com/harvest-hpc/harvest/pilotproto"
)

// Each Ready's ops are its own: the ops of later steps (in the same chunk
// of memory or in a new one, some Readies larger than a chunk) neither show
// in it nor overwrite it, and appending to it cannot overwrite later ops.
// (The checkpoint keeps the Readies' ops for about a second.)
func TestAReadysOpsAreNotChangedByLaterSteps(t *testing.T) {
	now := time.Unix(1000, 0)
	c := core.New(core.Config{PilotID: "p1", Epoch: 1, PullWait: 10 * time.Second, Prefetch: 1, MinBuffer: 4,
		MaxBuffer: 100, MaxPull: 100, IdlePoll: time.Second, RetryInterval: time.Second, HeartbeatInterval: time.Minute,
		LeaseRenewInterval: time.Minute, WorkerTimeout: time.Minute, ReconnectGrace: time.Minute, ReportBatch: 100}, nil, nil, now)
	c.Ready()
	type kept struct {
		ops, copied []core.Op
		first, n    int64
	}
	var readies []kept
	next := int64(1)
	for _, n := range []int64{1, 700, 700, 5, 3000, 200, 1500, 1} {
		var tasks []pilotproto.Task
		for i := range n {
			tasks = append(tasks, pilotproto.Task{ID: next + i, JobID: 7, Attempt: 1, BatchSize: 3})
		}
		c.Step(now, core.Pulled{Resp: pilotproto.PullResponse{Tasks: tasks}})
		ops := c.Ready().Ops
		readies = append(readies, kept{ops: ops, copied: slices.Clone(ops), first: next, n: n})
		next += n
		if len(ops) > 0 {
			_ = append(ops, core.Op{Kind: core.OpDelete}) // a careless holder: must not reach the core's ops
		}
	}
	for i, r := range readies {
		if len(r.ops) != cap(r.ops) {
			t.Errorf("Ready %d: ops of length %d and capacity %d: appending to them would write over the next Ready's", i, len(r.ops), cap(r.ops))
		}
		if !slices.EqualFunc(r.ops, r.copied, func(a, b core.Op) bool { return a.Kind == b.Kind && a.Ref == b.Ref && a.Task == b.Task }) {
			t.Errorf("Ready %d: its ops changed after later steps", i)
		}
		var adds []int64
		for _, o := range r.ops {
			if o.Kind == core.OpAdd {
				adds = append(adds, o.Ref.TaskID)
			}
		}
		if int64(len(adds)) != r.n || adds[0] != r.first || adds[len(adds)-1] != r.first+r.n-1 {
			t.Errorf("Ready %d: adds %d of tasks %v..., want %d from task %d", i, len(adds), adds[:min(len(adds), 3)], r.n, r.first)
		}
	}
}
