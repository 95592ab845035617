// Package logcap bounds a running task's log file without stopping the
// task: past the limit, the log keeps its first Max bytes, a marker line
// and the last KeepTail bytes the task wrote. A task writing gigabytes
// filled the disk under its output directory; now it runs on, its output
// beyond the limit dropped.
//
// The task writes through a descriptor that shares its open file
// description (and so its file offset) with the one Cut is given: the
// worker's for an unconfined task, the task runner's for a confined one.
// Cut reads the end of what the task wrote at that offset, writes the
// marker and that end after the first Max bytes, truncates the file there
// and moves the shared offset to its end: the task's next write follows
// on, no hole is left. Cut is called every Interval while the task runs
// and once after it ended (then the file is final). A write that lands
// while Cut works may be lost; it is in the part being dropped.
package logcap

import (
	"strconv"
	"time"

	"golang.org/x/sys/unix"
)

// KeepTail is how much of the end of the output a cut log keeps: what a
// failing task printed last (the error tail reads it) is at the end.
const KeepTail = 8 << 10

// Interval is how often a running task's logs are checked: the disk the
// log takes beyond its limit is what the task writes in that time.
const Interval = 250 * time.Millisecond

// Marker is the line that replaces what a cut log dropped.
func Marker(max int64) string {
	return "\n[harvest] log cut at " + strconv.FormatInt(max, 10) + " bytes (the task log limit: harvest pilot --task-log-max-mb): what followed is dropped except its last " +
		strconv.Itoa(KeepTail) + " bytes, below\n"
}

// Cut bounds the log fd (read and write) at max bytes: see the package
// comment. It reports whether the log was cut now. max <= 0: no limit.
func Cut(fd int, max int64) (bool, error) {
	if max <= 0 {
		return false, nil
	}
	off, err := unix.Seek(fd, 0, 1) // where the task writes next
	if err != nil {
		return false, err
	}
	if off <= max {
		return false, nil // (the marker not built for every check)
	}
	marker := Marker(max)
	end := max + int64(len(marker)) + KeepTail
	if off <= end {
		return false, nil
	}
	tail := make([]byte, KeepTail)
	n, err := unix.Pread(fd, tail, off-KeepTail)
	if err != nil {
		return false, err
	}
	tail = append([]byte(marker), tail[:n]...)
	if _, err := unix.Pwrite(fd, tail, max); err != nil {
		return false, err
	}
	end = max + int64(len(tail))
	if err := unix.Ftruncate(fd, end); err != nil {
		return false, err
	}
	_, err = unix.Seek(fd, end, 0)
	return true, err
}
