package queue

// SetBeforeWrite installs the hook that runs before each fenced write of a
// master (outside every lock), so a test can interleave a lease takeover
// at exactly the point where a check-then-act fence would let a deposed
// master through, and before a submission stores its tasks ("store"), so
// a test can hold a submission half way.
func SetBeforeWrite(q *Queue, f func(op string)) { q.beforeWrite = f }

// SyncPeers runs the shared database's peer sync at once (the loop runs it
// every ReconcileInterval).
func SyncPeers(q *Queue) error { return q.syncPeers(q.bg) }
