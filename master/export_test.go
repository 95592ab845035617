package master

import "github.com/harvest-hpc/harvest/master/core"

// Kill drops the checkpoint as a kill -9 of its master would: the ops in
// memory are lost, the log stays.
func (c *Checkpoint) Kill() error { return c.db.Close() }

// LogRows counts the rows in the logs (schema 4's and the oplog).
func (c *Checkpoint) LogRows() (n int, err error) {
	err = c.db.QueryRow(`SELECT (SELECT count(*) FROM log) + (SELECT count(*) FROM oplog)`).Scan(&n)
	return n, err
}

// Commits returns the checkpoint transactions m's commits began so far.
func Commits(m *Master) int64 { return m.cp.commits.Load() }

// CommitV4 appends ops to schema 4's log as a master of that schema did
// (the statements' arrays of their fold, one row), for the tests of a
// checkpoint a master of version 4 left.
func (c *Checkpoint) CommitV4(ops []core.Op) error {
	var scratch foldScratch
	f, err := scratch.fold(nil, ops)
	if err != nil {
		return err
	}
	_, err = c.db.Exec(`INSERT INTO log (d, i, u, e, c) VALUES (?, ?, ?, ?, ?)`,
		string(f.deletes), string(f.inserts), string(f.updates), string(f.estimates), string(f.capacity))
	return err
}
