package master

// Kill drops the checkpoint as a kill -9 of its master would: the ops in
// memory are lost, the log stays.
func (c *Checkpoint) Kill() error { return c.db.Close() }

// LogRows counts the rows in the log.
func (c *Checkpoint) LogRows() (n int, err error) {
	err = c.db.QueryRow(`SELECT count(*) FROM log`).Scan(&n)
	return n, err
}

// Commits returns the checkpoint transactions m's commits began so far.
func Commits(m *Master) int64 { return m.cp.commits.Load() }
