package replay

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"
)

// ErrBadJobComp is wrapped by the job completion log reader's errors.
var ErrBadJobComp = errors.New("bad job completion log")

// Completion is one line of SLURM's job completion log
// (JobCompType=jobcomp/filetxt): a job that ended, with its submit, start
// and end to the second. The log is written by slurmctld as each job
// ends, so it misses no job, however short (squeue polling does).
type Completion struct {
	JobID              string
	User, Name, State  string
	Partition          string
	Nodes              int
	Submit, Start, End time.Time
	TimeLimitMin       int64 // 0 = unlimited
	nodeList           string
	hasStart, hasEnd   bool
}

// Started reports whether the job ran at all: a job cancelled while
// pending is logged with StartTime = EndTime and NodeList=(null).
func (c Completion) Started() bool { return c.hasStart && c.nodeList != "" && c.nodeList != "(null)" }

// jobCompTime is the format of the log's times (local time, seconds).
const jobCompTime = "2006-01-02T15:04:05"

// ParseJobComp reads a job completion log: one job a line of key=value
// fields, as slurmctld 22.05 writes them (see testdata). Times are read
// in loc (slurmctld's time zone). A line without a JobId, or with a
// malformed time or count, is an error: the log is machine-written.
func ParseJobComp(r io.Reader, loc *time.Location) ([]Completion, error) {
	var out []Completion
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	n := 0
	for sc.Scan() {
		n++
		line := strings.TrimSpace(sc.Text())
		if line == "" {
			continue
		}
		c, err := parseCompletion(line, loc)
		if err != nil {
			return nil, fmt.Errorf("%w: line %d: %v", ErrBadJobComp, n, err)
		}
		out = append(out, c)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrBadJobComp, err)
	}
	return out, nil
}

func parseCompletion(line string, loc *time.Location) (Completion, error) {
	var c Completion
	for _, f := range strings.Fields(line) {
		k, v, ok := strings.Cut(f, "=")
		if !ok {
			continue // a value with spaces (a job name): its words carry no key
		}
		var err error
		switch k {
		case "JobId":
			c.JobID = v
		case "UserId":
			c.User, _, _ = strings.Cut(v, "(")
		case "Name":
			c.Name = v
		case "JobState":
			c.State = v
		case "Partition":
			c.Partition = v
		case "NodeList":
			c.nodeList = v
		case "NodeCnt":
			c.Nodes, err = strconv.Atoi(v)
		case "TimeLimit":
			if v != "UNLIMITED" && v != "Partition_Limit" {
				c.TimeLimitMin, err = strconv.ParseInt(v, 10, 64)
			}
		case "SubmitTime", "StartTime", "EndTime":
			var t time.Time
			if v != "Unknown" && v != "None" {
				if t, err = time.ParseInLocation(jobCompTime, v, loc); err != nil {
					break
				}
			}
			switch k {
			case "SubmitTime":
				c.Submit = t
			case "StartTime":
				c.Start, c.hasStart = t, !t.IsZero()
			default:
				c.End, c.hasEnd = t, !t.IsZero()
			}
		}
		if err != nil {
			return c, fmt.Errorf("%s=%q: %v", k, v, err)
		}
	}
	if c.JobID == "" {
		return c, errors.New("no JobId")
	}
	if !c.hasEnd {
		return c, fmt.Errorf("job %s: no EndTime", c.JobID)
	}
	return c, nil
}
