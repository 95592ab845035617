package queue

import (
	"time"

	"github.com/harvest-hpc/harvest/queue/api"
	"github.com/harvest-hpc/harvest/queue/store"
)

// SetBeforeWrite installs the hook that runs before each fenced write of a
// master (outside every lock), so a test can interleave a lease takeover
// at exactly the point where a check-then-act fence would let a deposed
// master through, and before a submission stores its tasks ("store"), so
// a test can hold a submission half way, and before it lists its dataset
// ("list"), so a test can swap the dataset checked for a link.
func SetBeforeWrite(q *Queue, f func(op string)) { q.beforeWrite = f }

// SyncPeers runs the shared database's peer sync at once (the loop runs it
// every ReconcileInterval).
func SyncPeers(q *Queue) error { return q.syncPeers(q.bg) }

// LeaveSubmitting stores a job SUBMITTING under owner's idempotency key
// for spec, as a submission whose store and removal both failed (a full
// disk) leaves it, and returns its id.
func LeaveSubmitting(q *Queue, owner, key string, spec api.JobSpec) (int64, error) {
	return q.st.CreateJob(q.bg, store.NewJob{Owner: owner, Dataset: spec.Dataset, Command: spec.Command, BatchSize: spec.BatchSize,
		Price: 1, Cores: 1, MaxAttempts: 1, Submitted: q.now(), Expires: q.now().Add(time.Hour), IdemKey: key, IdemHash: specHash(spec)})
}
