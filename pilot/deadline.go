package pilot

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// ErrNoDeadline: the source knows no end for this pilot (unlimited).
var ErrNoDeadline = errors.New("no deadline")

// ParseSqueueEnd parses `squeue -h -j ID -o %e` output. With
// SLURM_TIME_FORMAT=%s it is Unix seconds; otherwise SLURM's ISO form
// (2026-11-21T20:00:00, local time). N/A, NONE, Unknown and UNLIMITED mean
// no deadline.
func ParseSqueueEnd(out string, loc *time.Location) (time.Time, error) {
	s := strings.TrimSpace(out)
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = strings.TrimSpace(s[:i])
	}
	switch strings.ToUpper(s) {
	case "", "N/A", "NONE", "UNKNOWN", "UNLIMITED", "INFINITE":
		return time.Time{}, ErrNoDeadline
	}
	if n, err := strconv.ParseInt(s, 10, 64); err == nil {
		if n <= 0 {
			return time.Time{}, ErrNoDeadline
		}
		return time.Unix(n, 0), nil
	}
	t, err := time.ParseInLocation("2006-01-02T15:04:05", s, loc)
	if err != nil {
		return time.Time{}, fmt.Errorf("squeue end time %q: not Unix seconds nor YYYY-MM-DDTHH:MM:SS", s)
	}
	return t, nil
}

// DeadlineSources are the inputs of ResolveDeadline, so that it stays pure.
type DeadlineSources struct {
	Explicit  time.Time     // --deadline
	TimeLimit time.Duration // --time-limit, counted from Start
	Start     time.Time
	Getenv    func(string) string
	// Squeue runs `squeue -h -j ID -o %e` with SLURM_TIME_FORMAT=%s and
	// returns its output (nil: not available).
	Squeue func(jobID string) (string, error)
}

// ResolveDeadline returns the pilot's deadline and where it came from:
// --deadline; else SLURM_JOB_END_TIME; else squeue for SLURM_JOB_ID; else
// --time-limit from the start; else none (zero time, "none").
func ResolveDeadline(s DeadlineSources) (time.Time, string, error) {
	if !s.Explicit.IsZero() {
		return s.Explicit, "--deadline", nil
	}
	getenv := s.Getenv
	if getenv == nil {
		getenv = func(string) string { return "" }
	}
	if v := getenv("SLURM_JOB_END_TIME"); v != "" {
		t, err := ParseSqueueEnd(v, time.Local)
		if err == nil {
			return t, "SLURM_JOB_END_TIME", nil
		}
		if !errors.Is(err, ErrNoDeadline) {
			return time.Time{}, "", fmt.Errorf("SLURM_JOB_END_TIME: %w", err)
		}
	}
	if id := getenv("SLURM_JOB_ID"); id != "" && s.Squeue != nil {
		out, err := s.Squeue(id)
		if err == nil {
			t, perr := ParseSqueueEnd(out, time.Local)
			if perr == nil {
				return t, "squeue", nil
			}
			if !errors.Is(perr, ErrNoDeadline) {
				return time.Time{}, "", perr
			}
		}
	}
	if s.TimeLimit > 0 {
		return s.Start.Add(s.TimeLimit), "--time-limit", nil
	}
	return time.Time{}, "none", nil
}
