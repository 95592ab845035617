package pilotproto

import (
	"path/filepath"
	"strconv"
)

// LogDir is where, under a job's output directory (Task.OutputDir), the
// worker writes each task attempt's stdout and stderr, in files named by
// LogName. The queue names them to users (GET /v1/jobs/{id}/failures).
const LogDir = ".harvest/logs"

// LogName is the base name of a task attempt's log of stream "out" or
// "err": <task id>.<attempt>.<stream>.
func LogName(task int64, attempt int, stream string) string {
	return strconv.FormatInt(task, 10) + "." + strconv.Itoa(attempt) + "." + stream
}

// LogPath is the whole path of that log under the job's output directory.
func LogPath(outputDir string, task int64, attempt int, stream string) string {
	return filepath.Join(outputDir, LogDir, LogName(task, attempt, stream))
}
