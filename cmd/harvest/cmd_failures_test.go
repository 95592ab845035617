package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"unicode"

	"github.com/harvest-hpc/harvest/pilotproto"
	"github.com/harvest-hpc/harvest/queue/api"
)

// A job with one task failing for good: `harvest failures` names the
// entry, the exit code and the error's last line; --tail the whole tail
// and the log file; --json the same as data; `harvest status` points to
// it; bad arguments get a usage error.
func TestFailuresCommandShowsWhyATaskFailed(t *testing.T) {
	q := startCLIQueue(t)
	conn := []string{"--queue", q.url, "--token", q.token}
	out, errOut, code := run(t, append([]string{"submit", filepath.Join(q.data, "ds"), "--max-attempts", "1", "--json"}, append(conn, "--", "prog", "{input}")...)...)
	var j api.Job
	if code != 0 || json.Unmarshal([]byte(out), &j) != nil {
		t.Fatalf("submit: exit %d %q %q", code, out, errOut)
	}
	ctx := context.Background()
	l, err := q.pilot.Lease(ctx, pilotproto.LeaseRequest{PilotID: "p"})
	if err != nil {
		t.Fatal(err)
	}
	p, err := q.pilot.Pull(ctx, pilotproto.PullRequest{Epoch: l.Epoch, Max: 4})
	if err != nil || len(p.Tasks) != 4 {
		t.Fatalf("pull: %d %v", len(p.Tasks), err)
	}
	var rs []pilotproto.Result
	for i, tk := range p.Tasks {
		r := pilotproto.Result{TaskID: tk.ID, Attempt: tk.Attempt, Status: pilotproto.StatusDone, StartedAt: 1_767_268_800_000, DurationMS: 100}
		if i == 2 {
			r.Status, r.ExitCode, r.ErrorTail = pilotproto.StatusFailed, 3, "\x1b[31mopening e2\x1b[0m\a\nprog: e2: bad\tinput\n"
		}
		rs = append(rs, r)
	}
	if _, err := q.pilot.Results(ctx, pilotproto.ResultsRequest{Epoch: l.Epoch, Results: rs}); err != nil {
		t.Fatal(err)
	}
	failed := p.Tasks[2]

	out, errOut, code = run(t, append([]string{"failures", "1"}, conn...)...)
	if code != 0 {
		t.Fatalf("failures: exit %d %q", code, errOut)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 2 || !strings.HasPrefix(lines[0], "TASK") {
		t.Fatalf("failures: want a header and one line, got %q", out)
	}
	// The task column is the entry's index within its job (the third).
	if !strings.HasPrefix(lines[1], "2 ") {
		t.Errorf("failures line %q: want the entry's index 2 first", lines[1])
	}
	for _, f := range []string{failed.Name, "ERROR_E", "failed", " 3 ", "local", "prog: e2: bad input"} {
		if !strings.Contains(lines[1], f) {
			t.Errorf("failures line %q: no %q", lines[1], f)
		}
	}
	out, _, _ = run(t, append([]string{"failures", "1", "--tail"}, conn...)...)
	logFile := filepath.Join(j.OutputDir, ".harvest", "logs", fmt.Sprintf("%d.1.err", failed.ID))
	// The whole tail, lines and tabs kept, and nothing a terminal would act on.
	if !strings.Contains(out, "log "+logFile) || !strings.Contains(out, "?[31mopening e2?[0m?\nprog: e2: bad\tinput\n") || strings.ContainsAny(out, "\x1b\a") {
		t.Errorf("failures --tail: no log %s or whole, safe tail in %q", logFile, out)
	}
	out, _, _ = run(t, append([]string{"failures", "1", "--json"}, conn...)...)
	var fl api.FailureList
	if err := json.Unmarshal([]byte(out), &fl); err != nil || len(fl.Failures) != 1 || fl.NextCursor != 0 ||
		fl.Failures[0].TaskID != failed.ID || fl.Failures[0].ExitCode != 3 || fl.Failures[0].Log != logFile {
		t.Errorf("failures --json: %v %+v", err, fl)
	}
	out, _, _ = run(t, append([]string{"status", "1"}, conn...)...)
	if !strings.Contains(out, "1 failed attempts: harvest failures 1") {
		t.Errorf("status does not point to the failures: %q", out)
	}

	for _, bad := range [][]string{{"failures"}, {"failures", "x"}, {"failures", "1", "2"}, {"failures", "1", "--limit", "0"}, {"failures", "1", "--after", "-1"}} {
		if _, errOut, code := run(t, append(bad, conn...)...); code != 2 || !strings.Contains(errOut, "harvest failures") {
			t.Errorf("%v: exit %d, stderr %q; want 2 with a usage line", bad, code, errOut)
		}
	}
	if _, errOut, code := run(t, append([]string{"failures", "99"}, conn...)...); code != 1 || !strings.Contains(errOut, "job 99") {
		t.Errorf("an unknown job: exit %d, stderr %q", code, errOut)
	}
}

// A task that failed without a word on stderr has no log file (its
// runner makes none for an empty stream): --tail and --json point to none.
func TestFailuresOfASilentTaskNameNoLog(t *testing.T) {
	q := startCLIQueue(t)
	conn := []string{"--queue", q.url, "--token", q.token}
	if out, errOut, code := run(t, append([]string{"submit", filepath.Join(q.data, "ds"), "--max-attempts", "1"}, append(conn, "--", "prog", "{input}")...)...); code != 0 {
		t.Fatalf("submit: exit %d %q %q", code, out, errOut)
	}
	ctx := context.Background()
	l, err := q.pilot.Lease(ctx, pilotproto.LeaseRequest{PilotID: "p"})
	if err != nil {
		t.Fatal(err)
	}
	p, err := q.pilot.Pull(ctx, pilotproto.PullRequest{Epoch: l.Epoch, Max: 1})
	if err != nil || len(p.Tasks) != 1 {
		t.Fatalf("pull: %d %v", len(p.Tasks), err)
	}
	tk := p.Tasks[0]
	r := pilotproto.Result{TaskID: tk.ID, Attempt: tk.Attempt, Status: pilotproto.StatusFailed, ExitCode: 1, StartedAt: 1_767_268_800_000, DurationMS: 10}
	if _, err := q.pilot.Results(ctx, pilotproto.ResultsRequest{Epoch: l.Epoch, Results: []pilotproto.Result{r}}); err != nil {
		t.Fatal(err)
	}
	out, _, _ := run(t, append([]string{"failures", "1", "--tail"}, conn...)...)
	if strings.Contains(out, ", log ") || !strings.Contains(out, "(no stderr)") {
		t.Errorf("failures --tail of a silent task: %q; want (no stderr) and no log", out)
	}
	out, _, _ = run(t, append([]string{"failures", "1", "--json"}, conn...)...)
	var fl api.FailureList
	if err := json.Unmarshal([]byte(out), &fl); err != nil || len(fl.Failures) != 1 || fl.Failures[0].Log != "" || fl.Failures[0].ExitCode != 1 {
		t.Errorf("failures --json of a silent task: %v %+v", err, fl)
	}
}

// What users wrote reaches other people's terminals as text: a dataset
// directory and a command with escape sequences are shown by status and
// jobs without a single control byte.
func TestStatusAndJobsSendNoControlCharactersToTheTerminal(t *testing.T) {
	q := startCLIQueue(t)
	conn := []string{"--queue", q.url, "--token", q.token}
	ds := filepath.Join(q.data, "ds\x1b[2J\x1b]0;pwned\x07")
	if err := os.MkdirAll(filepath.Join(ds, "e0"), 0o755); err != nil {
		t.Fatal(err)
	}
	out, errOut, code := run(t, append([]string{"submit", ds, "--name", "plain"}, append(conn, "--", "prog", "\x1b[31m{input}")...)...)
	if code != 0 {
		t.Fatalf("submit: exit %d %q %q", code, out, errOut)
	}
	for _, args := range [][]string{{"status", "1"}, {"jobs"}, {"status"}} {
		out, errOut, code := run(t, append(args, conn...)...)
		if code != 0 || strings.IndexFunc(out+errOut, func(r rune) bool { return unicode.IsControl(r) && r != '\n' }) >= 0 {
			t.Errorf("%v: exit %d, control bytes in %q", args, code, out)
		}
	}
	out, _, _ = run(t, append([]string{"status", "1"}, conn...)...)
	if !strings.Contains(out, "ds [2J ]0;pwned") || !strings.Contains(out, "prog  [31m{input}") {
		t.Errorf("status does not show the path and command as text: %q", out)
	}
	if _, errOut, code := run(t, append([]string{"submit", ds, "--name", "x\x1b[2J"}, append(conn, "--", "prog")...)...); code != 1 || !strings.Contains(errOut, "control characters") || strings.Contains(errOut, "--idempotency-key") {
		t.Errorf("a name with an escape: exit %d, stderr %q; want the queue's refusal, without a retry hint (a retry is refused too)", code, errOut)
	}
}
