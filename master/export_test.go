package master

// Commits returns the checkpoint transactions m's commits began so far.
func Commits(m *Master) int64 { return m.cp.commits.Load() }

// Gate makes m's checkpoint commits wait until the returned func is
// called: a commit that takes its time (the shared file system is slow).
func Gate(m *Master) (open func()) {
	ch := make(chan struct{})
	m.cp.gate.Store(&ch)
	return func() { close(ch) }
}

// Migrations are the checkpoint's schema migrations.
var Migrations = migrations
