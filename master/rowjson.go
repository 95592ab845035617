package master

import (
	"encoding/json"
	"strconv"

	"github.com/harvest-hpc/harvest/pilotproto"
)

// The tasks table's body and result columns hold a task and a result as
// encoding/json writes them; the compaction writes them by hand, byte for
// byte the same (TestRowJSONIsWhatEncodingJSONWrites), without reflection.

func appendTaskJSON(b []byte, t *pilotproto.Task) []byte {
	b = append(b, `{"id":`...)
	b = strconv.AppendInt(b, t.ID, 10)
	b = append(b, `,"job_id":`...)
	b = strconv.AppendInt(b, t.JobID, 10)
	b = append(b, `,"owner":`...)
	b = appendJSONString(b, t.Owner)
	b = append(b, `,"attempt":`...)
	b = strconv.AppendInt(b, int64(t.Attempt), 10)
	b = append(b, `,"name":`...)
	b = appendJSONString(b, t.Name)
	b = append(b, `,"input":`...)
	b = appendJSONString(b, t.Input)
	b = append(b, `,"output":`...)
	b = appendJSONString(b, t.Output)
	b = append(b, `,"output_dir":`...)
	b = appendJSONString(b, t.OutputDir)
	if t.WorkDir != "" {
		b = append(b, `,"work_dir":`...)
		b = appendJSONString(b, t.WorkDir)
	}
	b = append(b, `,"command":`...)
	b = appendJSONStrings(b, t.Command)
	if len(t.Env) > 0 {
		b = append(b, `,"env":`...)
		b = appendJSONStrings(b, t.Env)
	}
	b = append(b, `,"batch_size":`...)
	b = strconv.AppendInt(b, int64(t.BatchSize), 10)
	b = append(b, `,"cores":`...)
	b = strconv.AppendInt(b, int64(t.Cores), 10)
	if t.TimeoutS != 0 {
		b = append(b, `,"timeout_s":`...)
		b = strconv.AppendInt(b, t.TimeoutS, 10)
	}
	return append(b, '}')
}

func appendResultJSON(b []byte, r *pilotproto.Result) []byte {
	b = append(b, `{"task_id":`...)
	b = strconv.AppendInt(b, r.TaskID, 10)
	b = append(b, `,"attempt":`...)
	b = strconv.AppendInt(b, int64(r.Attempt), 10)
	b = append(b, `,"status":`...)
	b = appendJSONString(b, r.Status)
	b = append(b, `,"exit_code":`...)
	b = strconv.AppendInt(b, int64(r.ExitCode), 10)
	b = append(b, `,"started_at":`...)
	b = strconv.AppendInt(b, r.StartedAt, 10)
	b = append(b, `,"duration_ms":`...)
	b = strconv.AppendInt(b, r.DurationMS, 10)
	if r.Pilot != "" {
		b = append(b, `,"pilot":`...)
		b = appendJSONString(b, r.Pilot)
	}
	if r.ErrorTail != "" {
		b = append(b, `,"error_tail":`...)
		b = appendJSONString(b, r.ErrorTail)
	}
	return append(b, '}')
}

func appendJSONStrings(b []byte, ss []string) []byte {
	if ss == nil {
		return append(b, "null"...)
	}
	b = append(b, '[')
	for i, s := range ss {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendJSONString(b, s)
	}
	return append(b, ']')
}

// appendJSONString appends s as encoding/json writes it: as it is when no
// byte needs an escape (the usual ids, paths and states), else through
// encoding/json (control characters, quotes, HTML's <>&, non-ASCII and
// invalid UTF-8).
func appendJSONString(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c > 0x7e || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			enc, _ := json.Marshal(s) // a string always encodes
			return append(b, enc...)
		}
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"')
}
