package slurm

import (
	"bytes"
	"context"
	"errors"
	"testing"

	"github.com/harvest-hpc/harvest/adapters"
)

// sdiagWith is the captured sdiag output (22.05.8 on the mini-cluster)
// with its job counters set.
func sdiagWith(t *testing.T, submitted, started, completed, canceled, failed string) []byte {
	t.Helper()
	out := fixture(t, "sdiag.txt")
	for _, r := range []struct{ line, v string }{
		{"Jobs submitted: 0", "Jobs submitted: " + submitted},
		{"Jobs started:   0", "Jobs started:   " + started},
		{"Jobs completed: 0", "Jobs completed: " + completed},
		{"Jobs canceled:  0", "Jobs canceled:  " + canceled},
		{"Jobs failed:    0", "Jobs failed:    " + failed},
	} {
		if !bytes.Contains(out, []byte(r.line)) {
			t.Fatalf("sdiag.txt has no %q line", r.line)
		}
		out = bytes.Replace(out, []byte(r.line), []byte(r.v), 1)
	}
	return out
}

func TestParseSdiag(t *testing.T) {
	if n, err := ParseSdiag(fixture(t, "sdiag.txt")); err != nil || n != 0 {
		t.Fatalf("the captured output: %d, %v; want 0", n, err)
	}
	// Started jobs are not counted: a start frees nothing.
	if n, err := ParseSdiag(sdiagWith(t, "12", "1000", "7", "3", "1")); err != nil || n != 23 {
		t.Fatalf("12 submitted, 7 completed, 3 canceled, 1 failed: %d, %v; want 23", n, err)
	}
	for _, tc := range []struct {
		name string
		out  []byte
	}{
		{"empty", nil},
		{"a counter missing", bytes.Replace(fixture(t, "sdiag.txt"), []byte("Jobs canceled:"), []byte("Jobs cancelled:"), 1)},
		{"not a number", sdiagWith(t, "x", "0", "0", "0", "0")},
		{"negative", sdiagWith(t, "-1", "0", "0", "0", "0")},
		{"twice", append(fixture(t, "sdiag.txt"), "Jobs failed: 2\n"...)},
		{"cut off", bytes.TrimSuffix(fixture(t, "sdiag.txt"), []byte("\n"))},
		{"an error message", []byte("slurm_get_statistics: Unable to contact slurm controller (connect failure)\n")},
	} {
		if n, err := ParseSdiag(tc.out); !errors.Is(err, ErrParse) {
			t.Errorf("%s: %d, %v; want an ErrParse", tc.name, n, err)
		}
	}
}

func TestJobEventsAsksSdiag(t *testing.T) {
	f := &fakeSlurm{sdiag: ok(sdiagWith(t, "5", "4", "2", "1", "0"))}
	a := newTestAdapter(t, f, nil)
	n, err := a.JobEvents(context.Background())
	if err != nil || n != 8 {
		t.Fatalf("JobEvents = %d, %v; want 8", n, err)
	}
	if len(f.calls) != 1 || f.calls[0].name != "sdiag" || len(f.calls[0].args) != 0 {
		t.Errorf("calls %+v, want one sdiag without arguments", f.calls)
	}
	f.sdiag = fail(1, "slurm_get_statistics: Unable to contact slurm controller (connect failure)")
	if _, err := a.JobEvents(context.Background()); !errors.Is(err, adapters.ErrUnreachable) {
		t.Errorf("a dead controller: %v, want ErrUnreachable", err)
	}
	f.sdiag = ok([]byte("garbage\n"))
	if _, err := a.JobEvents(context.Background()); !errors.Is(err, ErrParse) {
		t.Errorf("garbage: %v, want ErrParse", err)
	}
}
