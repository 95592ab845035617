// Package sim replays a workload on the simulated cluster (adapters/sim) in
// one of three modes (baseline, harvest, fixed) and measures what happened:
// utilisation, useful utilisation, foreign jobs' waits, harvest work done
// and lost. Readers for the thesis submit-list format and the Standard
// Workload Format are pure functions from text to a Workload.
package sim

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"github.com/harvest-hpc/harvest/cluster"
)

// ErrBadWorkload is wrapped by every reader error.
var ErrBadWorkload = errors.New("bad workload")

// Job is one job of a workload.
type Job struct {
	// ID is the job's id in the workload (SWF job number, thesis line index).
	ID    string
	User  string
	Nodes int
	// TimeLimit is the requested time; the job is killed when it reaches it.
	TimeLimit cluster.Limit
	// RunTime is how long the job really ran, in seconds.
	RunTime int64
	// Wait is how long the job waited on the traced machine (SWF field
	// 3), -1 if unknown: for a warm start and to compare with.
	Wait int64
	// Submit is the arrival time in seconds from the start of the trace.
	Submit int64
	// Calibration marks a thesis harvest job (NodeNum x RealTime node-seconds
	// of splittable work).
	Calibration bool
}

// Workload is a parsed workload, jobs in submit order.
type Workload struct {
	Format string
	Jobs   []Job
	// Skipped counts lines that were not jobs the simulator can run, by reason.
	Skipped map[string]int
	// Adjusted counts jobs kept with a repaired field, by reason.
	Adjusted map[string]int
	// MaxNodes is the machine size from an SWF header (0 = unknown; see
	// Header.Nodes).
	MaxNodes int
	// Header is the SWF header (empty for other formats).
	Header Header
}

// Summary says in one line what was read and what was skipped.
func (w Workload) Summary() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d jobs read (%s)", len(w.Jobs), w.Format)
	for _, m := range []struct {
		what string
		m    map[string]int
	}{{"skipped", w.Skipped}, {"adjusted", w.Adjusted}} {
		if len(m.m) == 0 {
			continue
		}
		keys := make([]string, 0, len(m.m))
		for k := range m.m {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		parts := make([]string, len(keys))
		for i, k := range keys {
			parts[i] = fmt.Sprintf("%d %s", m.m[k], k)
		}
		fmt.Fprintf(&b, "; %s: %s", m.what, strings.Join(parts, ", "))
	}
	return b.String()
}

func (w *Workload) skip(reason string) {
	if w.Skipped == nil {
		w.Skipped = map[string]int{}
	}
	w.Skipped[reason]++
}

func (w *Workload) adjust(reason string) {
	if w.Adjusted == nil {
		w.Adjusted = map[string]int{}
	}
	w.Adjusted[reason]++
}

// sortJobs orders jobs by submit time, stably (file order breaks ties).
func (w *Workload) sortJobs() {
	sort.SliceStable(w.Jobs, func(a, b int) bool { return w.Jobs[a].Submit < w.Jobs[b].Submit })
}

// ReadThesis parses the thesis submit-list format: one job a line,
// "NodeNum=4 Type=Normal|Calibration TimeLimit=h:mm:ss|UNLIMITED
// RealTime=seconds SubmitTimeStamp=milliseconds"; '#' starts a comment.
// The format is hand-written, so any malformed line is an error.
func ReadThesis(r io.Reader) (Workload, error) {
	w := Workload{Format: "thesis"}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	n := 0
	for sc.Scan() {
		n++
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		j, err := parseThesisLine(line)
		if err != nil {
			return Workload{}, fmt.Errorf("%w: line %d: %v", ErrBadWorkload, n, err)
		}
		j.ID = strconv.Itoa(len(w.Jobs))
		j.Wait = -1
		w.Jobs = append(w.Jobs, j)
	}
	if err := sc.Err(); err != nil {
		return Workload{}, fmt.Errorf("%w: %v", ErrBadWorkload, err)
	}
	if len(w.Jobs) == 0 {
		return Workload{}, fmt.Errorf("%w: no jobs", ErrBadWorkload)
	}
	w.sortJobs()
	return w, nil
}

func parseThesisLine(line string) (Job, error) {
	var j Job
	seen := map[string]bool{}
	for _, f := range strings.Fields(line) {
		k, v, ok := strings.Cut(f, "=")
		if !ok {
			return j, fmt.Errorf("field %q is not key=value", f)
		}
		if seen[k] {
			return j, fmt.Errorf("field %s appears twice", k)
		}
		seen[k] = true
		var err error
		switch k {
		case "NodeNum":
			j.Nodes, err = strconv.Atoi(v)
			if err == nil && j.Nodes <= 0 {
				err = errors.New("must be positive")
			}
		case "Type":
			switch v {
			case "Normal":
			case "Calibration":
				j.Calibration = true
			default:
				err = errors.New("must be Normal or Calibration")
			}
		case "TimeLimit":
			j.TimeLimit, err = parseHMS(v)
		case "RealTime":
			j.RunTime, err = strconv.ParseInt(v, 10, 64)
			if err == nil && j.RunTime < 0 {
				err = errors.New("must not be negative")
			}
		case "SubmitTimeStamp":
			var ms int64
			ms, err = strconv.ParseInt(v, 10, 64)
			if err == nil && ms < 0 {
				err = errors.New("must not be negative")
			}
			j.Submit = ms / 1000
		default:
			err = errors.New("unknown field")
		}
		if err != nil {
			return j, fmt.Errorf("%s=%q: %v", k, v, err)
		}
	}
	for _, k := range []string{"NodeNum", "Type", "TimeLimit", "RealTime", "SubmitTimeStamp"} {
		if !seen[k] {
			return j, fmt.Errorf("missing %s", k)
		}
	}
	return j, nil
}

// parseHMS reads h:mm:ss (or UNLIMITED) as a limit.
func parseHMS(v string) (cluster.Limit, error) {
	if strings.EqualFold(v, "UNLIMITED") {
		return cluster.Unlimited, nil
	}
	parts := strings.Split(v, ":")
	if len(parts) != 3 {
		return 0, errors.New("want h:mm:ss or UNLIMITED")
	}
	var s int64
	for i, p := range parts {
		n, err := strconv.ParseInt(p, 10, 64)
		if err != nil || n < 0 || (i > 0 && n >= 60) || n > 1e6 {
			return 0, errors.New("want h:mm:ss or UNLIMITED")
		}
		s = s*60 + n
	}
	if s == 0 {
		return 0, errors.New("a zero time limit")
	}
	return cluster.Seconds(s), nil
}

// ReadSWF parses the Standard Workload Format: ';' header lines, then 18
// whitespace-separated fields per job, -1 meaning unknown. Processors are
// nodes (true of the SP2 traces); requested processors win over allocated
// ones. Requested time is the limit; a job without one gets its run time
// as its limit (counted in Adjusted). Lines the simulator cannot run are
// skipped and counted by reason in Skipped.
func ReadSWF(r io.Reader) (Workload, error) {
	w := Workload{Format: "swf"}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	field := -1 // the header field a continuation line extends
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" {
			continue
		}
		if c, ok := strings.CutPrefix(line, ";"); ok {
			field = w.Header.line(c, field)
			continue
		}
		field = -1
		f := strings.Fields(line)
		if len(f) != 18 {
			w.skip("lines without 18 fields")
			continue
		}
		var v [18]int64
		bad := false
		for i, s := range f {
			x, err := strconv.ParseFloat(s, 64)
			if err != nil || x != x || x > 1e15 || x < -1e15 {
				bad = true
				break
			}
			v[i] = int64(x)
		}
		if bad {
			w.skip("lines with a non-numeric field")
			continue
		}
		j := Job{ID: f[0], Submit: v[1], Wait: max(v[2], -1), RunTime: v[3], User: f[11]}
		j.Nodes = int(v[7])
		if j.Nodes <= 0 {
			j.Nodes = int(v[4])
		}
		switch {
		case j.Submit < 0:
			w.skip("jobs without a submit time")
			continue
		case j.Nodes <= 0:
			w.skip("jobs without a processor count")
			continue
		case j.RunTime <= 0:
			w.skip("jobs without a run time")
			continue
		}
		if v[8] > 0 {
			j.TimeLimit = cluster.Seconds(v[8])
		} else {
			j.TimeLimit = cluster.Seconds(j.RunTime)
			w.adjust("jobs without a time limit (run time used)")
		}
		w.Jobs = append(w.Jobs, j)
	}
	if err := sc.Err(); err != nil {
		return Workload{}, fmt.Errorf("%w: %v", ErrBadWorkload, err)
	}
	if len(w.Jobs) == 0 {
		return Workload{}, fmt.Errorf("%w: no usable jobs (%s)", ErrBadWorkload, w.Summary())
	}
	w.MaxNodes, _ = w.Header.Nodes()
	w.sortJobs()
	return w, nil
}

// DetectFormat guesses the format from the file name: .swf and .swf.gz are
// SWF, .txt is the thesis format.
func DetectFormat(path string) (string, error) {
	p := strings.ToLower(strings.TrimSuffix(strings.ToLower(path), ".gz"))
	switch filepath.Ext(p) {
	case ".swf":
		return "swf", nil
	case ".txt":
		return "thesis", nil
	}
	return "", fmt.Errorf("%w: cannot tell the format of %s from its name; use --format thesis|swf", ErrBadWorkload, path)
}

// ReadFile reads a workload file, gunzipping it if it is compressed.
func ReadFile(path, format string) (Workload, error) {
	if format == "" {
		var err error
		if format, err = DetectFormat(path); err != nil {
			return Workload{}, err
		}
	}
	f, err := os.Open(path)
	if err != nil {
		return Workload{}, fmt.Errorf("read workload: %w", err)
	}
	defer f.Close()
	br := bufio.NewReader(f)
	var r io.Reader = br
	if magic, _ := br.Peek(2); bytes.Equal(magic, []byte{0x1f, 0x8b}) {
		gz, err := gzip.NewReader(br)
		if err != nil {
			return Workload{}, fmt.Errorf("%w: %s: %v", ErrBadWorkload, path, err)
		}
		defer gz.Close()
		r = gz
	}
	switch format {
	case "swf":
		return ReadSWF(r)
	case "thesis":
		return ReadThesis(r)
	}
	return Workload{}, fmt.Errorf("%w: unknown format %q (want thesis or swf)", ErrBadWorkload, format)
}
