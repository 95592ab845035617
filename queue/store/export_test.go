package store

import "database/sql"

// The store's test helpers, for its tests of package store_test (those of
// dbcopy, which imports the store, run on the store's histories).
var (
	T0          = t0
	OpenWithJob = openWithJob
	TakeTasks   = take
	TakeIn      = takeIn
	ReportIn    = reportIn
	MakeJob     = job
)

// Readers is the store's reader pool, for a test's dump of its tables.
func Readers(s *Store) *sql.DB { return s.r }
