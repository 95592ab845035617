package queue

// SetBeforeWrite installs the hook that runs before each fenced write of a
// master (outside every lock), so a test can interleave a lease takeover
// at exactly the point where a check-then-act fence would let a deposed
// master through, and before a submission stores its tasks ("store"), so
// a test can hold a submission half way.
func SetBeforeWrite(q *Queue, f func(op string)) { q.beforeWrite = f }
