// Package sqliteconf sets SQLite's process-wide configuration before the
// first connection opens: import it (for its init) in every package that
// opens a database.
//
// It turns off SQLite's memory statistics (SQLITE_CONFIG_MEMSTATUS). With
// them on, every sqlite3_malloc and sqlite3_free of every connection takes
// one process-wide mutex to count bytes nobody reads, so the writer, in
// the middle of its transaction, waited for readers on other threads, and
// for as long as the kernel kept a preempted reader off its core while it
// held that mutex (a perf trace of `harvest bench dispatch` found 130
// such waits in 5 s, half of the writer's sleeps with the lock held).
package sqliteconf

/*
// go-sqlite3 compiles SQLite into the binary (or links the system's with
// its libsqlite3 tag); sqlite3_config is resolved at link time.
int sqlite3_config(int, ...);
long long sqlite3_memory_used(void);

// 9: SQLITE_CONFIG_MEMSTATUS
static int memstatusOff(void) {
	return sqlite3_config(9, 0);
}
*/
import "C"

import (
	"strconv"

	_ "github.com/mattn/go-sqlite3" // the SQLite this configures
)

// Err is what sqlite3_config answered at init: nil, or the SQLite result
// code (SQLITE_MISUSE: a connection had opened before this package's init).
var Err error

func init() {
	if rc := C.memstatusOff(); rc != 0 {
		Err = sqliteError{"SQLITE_CONFIG_MEMSTATUS", int(rc)}
	}
}

type sqliteError struct {
	option string
	rc     int
}

func (e sqliteError) Error() string {
	return "sqlite3_config(" + e.option + "): result code " + strconv.Itoa(e.rc)
}

// memoryUsed is sqlite3_memory_used(): 0 while the statistics are off.
func memoryUsed() int64 { return int64(C.sqlite3_memory_used()) }
