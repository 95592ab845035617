package queue_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/harvest-hpc/harvest/internal/pgtest"
	"github.com/harvest-hpc/harvest/queue"
	"github.com/harvest-hpc/harvest/queue/api"
	"github.com/harvest-hpc/harvest/queue/client"
	"github.com/harvest-hpc/harvest/queue/queuetest"
)

// gate holds every submission at the point where it starts storing its
// tasks until the test opens it.
type gate struct {
	reached chan struct{}
	open    chan struct{}
	once    sync.Once
}

func holdSubmissions(e *queuetest.Env) *gate {
	g := &gate{reached: make(chan struct{}, 16), open: make(chan struct{})}
	queue.SetBeforeWrite(e.Q, func(op string) {
		if op == "store" {
			g.reached <- struct{}{}
			<-g.open
		}
	})
	return g
}

func (g *gate) release() { g.once.Do(func() { close(g.open) }) }

func (g *gate) wait(t *testing.T) {
	t.Helper()
	select {
	case <-g.reached:
	case <-time.After(10 * time.Second):
		t.Fatal("the submission never reached the storing phase")
	}
}

// postStream sends a submission asking for the streamed answer and returns
// the response (the caller reads or drops it).
func postStream(t *testing.T, e *queuetest.Env, key, body string) *http.Response {
	t.Helper()
	req, _ := http.NewRequest("POST", e.URL()+api.PathJobs, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", api.ContentTypeNDJSON)
	req.Header.Set("Authorization", "Bearer "+e.Tokens["alice"])
	if key != "" {
		req.Header.Set(api.HeaderIdempotencyKey, key)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

func TestARetryAfterADeadConnectionGetsTheFirstJob(t *testing.T) {
	e := queuetest.New(t)
	g := holdSubmissions(e)
	defer g.release()
	ds := e.Dataset("big", 300)
	body := jobBody(ds, nil)

	resp := postStream(t, e, "k-1", body)
	g.wait(t) // listed, about to store: the first try is under way
	// The stream reports progress while the submission is held.
	line, err := bufio.NewReader(resp.Body).ReadString('\n')
	var ev api.SubmitEvent
	if err != nil || json.Unmarshal([]byte(line), &ev) != nil || ev.Progress == nil || ev.Progress.Phase != api.PhaseStoring || ev.Progress.Entries != 300 {
		t.Fatalf("first line %q (%v): want progress, storing 300 entries", line, err)
	}
	resp.Body.Close() // the connection dies

	// The retry, with the same key, joins the submission under way.
	done := make(chan api.Job, 1)
	go func() {
		c := e.Client("alice")
		j, err := c.SubmitWith(context.Background(), api.JobSpec{Dataset: ds, Command: []string{"/bin/prog", "{input}", "{output}"}, BatchSize: 2},
			client.SubmitOptions{IdempotencyKey: "k-1"})
		if err != nil {
			t.Error(err)
		}
		done <- j
	}()
	g.release()
	j := <-done
	if j.ID == 0 || j.Tasks.Total != 300 || j.State != api.JobWaiting {
		t.Fatalf("the retry got %+v", j)
	}
	if n := e.Count(`SELECT count(*) FROM jobs`); n != 1 {
		t.Fatalf("%d jobs after a retry, want 1", n)
	}
	// Once stored, the same key is answered from the table, replayed.
	again, err := e.Client("alice").SubmitWith(context.Background(), api.JobSpec{Dataset: ds, Command: []string{"/bin/prog", "{input}", "{output}"}, BatchSize: 2},
		client.SubmitOptions{IdempotencyKey: "k-1"})
	if err != nil || again.ID != j.ID {
		t.Fatalf("a later retry got job %d (%v), want %d", again.ID, err, j.ID)
	}
	if n := e.Count(`SELECT count(*) FROM tasks`); n != 300 {
		t.Fatalf("%d tasks, want 300 (one job's)", n)
	}
	req, _ := http.NewRequest("POST", e.URL()+api.PathJobs, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+e.Tokens["alice"])
	req.Header.Set(api.HeaderIdempotencyKey, "k-1")
	r2, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	r2.Body.Close()
	if r2.StatusCode != http.StatusOK || r2.Header.Get(api.HeaderReplayed) != "true" {
		t.Fatalf("a plain replay: %d, %s=%q; want 200 and true", r2.StatusCode, api.HeaderReplayed, r2.Header.Get(api.HeaderReplayed))
	}
}

func TestASubmissionWhoseClientLeftIsStoredWhole(t *testing.T) {
	e := queuetest.New(t)
	g := holdSubmissions(e)
	defer g.release()
	ds := e.Dataset("d", 50)
	resp := postStream(t, e, "left", jobBody(ds, nil))
	g.wait(t)
	resp.Body.Close()
	if n := e.Count(`SELECT count(*) FROM jobs WHERE state != 'SUBMITTING'`); n != 0 {
		t.Fatalf("%d visible jobs while the submission is held", n)
	}
	// Watch the submission under way (the same key and spec join it).
	sub, err := e.Q.StartSubmit(context.Background(), "alice", api.JobSpec{Dataset: ds, Command: []string{"/bin/prog", "{input}", "{output}"}, BatchSize: 2}, "left")
	if err != nil {
		t.Fatal(err)
	}
	g.release()
	<-sub.Done()
	if n := e.Count(`SELECT count(*) FROM jobs WHERE state = 'WAITING' AND n_total = 50`); n != 1 {
		t.Fatal("the job of a client that left was not stored")
	}
	if n := e.Count(`SELECT count(*) FROM tasks`); n != 50 {
		t.Fatalf("%d tasks, want 50", n)
	}
}

func TestAnIdempotencyKeyReusedForAnotherJobIsAConflict(t *testing.T) {
	e := queuetest.New(t)
	c := e.Client("alice")
	ctx := context.Background()
	spec := api.JobSpec{Dataset: e.Dataset("a", 2), Command: []string{"p"}, BatchSize: 1}
	if _, err := c.SubmitWith(ctx, spec, client.SubmitOptions{IdempotencyKey: "same"}); err != nil {
		t.Fatal(err)
	}
	spec.BatchSize = 2
	if _, err := c.SubmitWith(ctx, spec, client.SubmitOptions{IdempotencyKey: "same"}); !errors.Is(err, api.ErrConflict) {
		t.Fatalf("another spec with the same key: %v, want api.ErrConflict", err)
	}
	// Keys are per user: bob's "same" is another submission.
	if _, err := e.Client("bob").SubmitWith(ctx, api.JobSpec{Dataset: e.Dataset("b", 1), Command: []string{"p"}, BatchSize: 1}, client.SubmitOptions{IdempotencyKey: "same"}); err != nil {
		t.Fatalf("bob's key: %v", err)
	}
	if n := e.Count(`SELECT count(*) FROM jobs WHERE owner = 'alice'`); n != 1 {
		t.Fatalf("alice has %d jobs, want 1", n)
	}
	for _, bad := range []string{strings.Repeat("k", api.MaxIdempotencyKey+1), "tab\there"} {
		if _, err := c.SubmitWith(ctx, spec, client.SubmitOptions{IdempotencyKey: bad}); !errors.Is(err, api.ErrInvalid) {
			t.Fatalf("key %q: %v, want api.ErrInvalid", bad, err)
		}
	}
}

func TestAStreamedSubmissionReportsAnUnusableDatasetAndStoresNothing(t *testing.T) {
	e := queuetest.New(t)
	before := e.Snapshot(t)
	resp := postStream(t, e, "k", jobBody(e.Dataset("empty", 0), nil))
	defer resp.Body.Close()
	var last api.SubmitEvent
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		json.Unmarshal(sc.Bytes(), &last)
	}
	// Known before the first entry: answered with its status, as a plain
	// submit is (issue 35 item 8), in the API's error document.
	if resp.StatusCode != 400 || last.Code != api.CodeInvalid || !strings.Contains(last.Error, "no entries") {
		t.Fatalf("status %d, answer %+v: want 400 and the invalid error", resp.StatusCode, last)
	}
	if after := e.Snapshot(t); after != before {
		t.Fatalf("a refused submission changed stored state:\n%s\n%s", before, after)
	}
}

func jobBody(dataset string, mod func(m map[string]any)) string {
	m := map[string]any{"dataset": dataset, "command": []string{"/bin/prog", "{input}", "{output}"}, "batch_size": 2}
	if mod != nil {
		mod(m)
	}
	b, _ := json.Marshal(m)
	return string(b)
}

// A job's name is printed to other people's terminals (an admin's
// harvest jobs): one with a control character is refused, with why, and
// no job is made.
func TestAJobNameWithAControlCharacterIsRefused(t *testing.T) {
	e := queuetest.New(t)
	ctx := context.Background()
	ds := e.Dataset("named", 2)
	for _, name := range []string{"ok\x1b]0;pwned\x07", "clear\x1b[2J", "c1\u0085", "tab\there", "line\nbreak", strings.Repeat("n", 201)} {
		_, err := e.Q.Submit(ctx, "alice", api.JobSpec{Name: name, Dataset: ds, Command: []string{"p"}, BatchSize: 1})
		if !errors.Is(err, api.ErrInvalid) || !strings.Contains(err.Error(), "control characters") {
			t.Errorf("name %q: %v, want invalid, naming the rule", name, err)
		}
	}
	if n := e.Count(`SELECT count(*) FROM jobs`); n != 0 {
		t.Fatalf("%d jobs stored after refused names", n)
	}
	if _, err := e.Q.Submit(ctx, "alice", api.JobSpec{Name: "genomes 2026 — ünïcødé", Dataset: ds, Command: []string{"p"}, BatchSize: 1}); err != nil {
		t.Fatalf("a printable name: %v", err)
	}
}

// TestARetryAfterAFailedStoreIsStoredNotRefused: a submission whose tasks
// could not be stored, nor its half-stored job removed (the queue's disk
// was full), left the job SUBMITTING under its idempotency key; the
// client's retry with that key was then refused with 409 "is being
// stored" for as long as the queue ran, though nobody stored it. One
// queue alone on its database knows every submission under way: a
// SUBMITTING job it is not storing is a leftover, replaced by the retry.
func TestARetryAfterAFailedStoreIsStoredNotRefused(t *testing.T) {
	e := queuetest.New(t)
	if pgtest.Enabled() {
		t.Skip("a PostgreSQL database is not locked to one queue: its leftover waits for the next start")
	}
	spec := api.JobSpec{Dataset: e.Dataset("ds", 3), Command: []string{"p", "{input}"}, BatchSize: 1}
	left, err := queue.LeaveSubmitting(e.Q, "alice", "k-1", spec)
	if err != nil {
		t.Fatal(err)
	}
	sub, err := e.Q.StartSubmit(t.Context(), "alice", spec, "k-1")
	if err != nil {
		t.Fatalf("the retry with the key of a failed submission: %v", err)
	}
	<-sub.Done()
	j, err := sub.Result()
	if err != nil || j.Tasks.Total != 3 || j.ID == left {
		t.Fatalf("the retry stored %+v, %v; want a new job of 3 tasks", j, err)
	}
	if n := e.Count(`SELECT COUNT(*) FROM jobs WHERE id = $1`, left); n != 0 {
		t.Fatalf("the leftover job %d is still there", left)
	}
	// The same key again is the job just stored.
	again, err := e.Q.StartSubmit(t.Context(), "alice", spec, "k-1")
	if err != nil {
		t.Fatal(err)
	}
	<-again.Done()
	if j2, err := again.Result(); err != nil || j2.ID != j.ID || !again.Replayed() {
		t.Fatalf("the key again: %+v %v replayed=%v, want job %d replayed", j2, err, again.Replayed(), j.ID)
	}
}

// TestAnExistingDefaultOutputDoesNotBlockSubmission (found by the audit):
// when the default output directory of the next job id already exists (a
// queue reset, a restored backup, another queue on the same dataset), the
// submission failed with "file exists" and every retry used up a job id.
// The default directory is the queue's to choose: it takes the next free
// name, leaves the existing directory alone, and consumes no job id.
func TestAnExistingDefaultOutputDoesNotBlockSubmission(t *testing.T) {
	for _, root := range []bool{true, false} {
		t.Run(map[bool]string{true: "outputs-root", false: "beside-dataset"}[root], func(t *testing.T) {
			e := queuetest.New(t, func(c *queue.Config) {
				if !root {
					c.OutputsRoot = ""
				}
			})
			ctx := context.Background()
			ds := e.Dataset("ds", 2)
			spec := api.JobSpec{Dataset: ds, Command: []string{"p", "{input}"}, BatchSize: 1}
			first, err := e.Q.Submit(ctx, "alice", spec)
			if err != nil {
				t.Fatal(err)
			}
			// Where the next job's default output goes, and the one after.
			next := func(id int64) string {
				if root {
					return filepath.Join(e.Cfg.OutputsRoot, "alice", fmt.Sprintf("job-%d", id))
				}
				return fmt.Sprintf("%s.out-%d", ds, id)
			}
			taken := next(first.ID + 1)
			for _, p := range []string{taken, taken + ".2"} {
				if err := os.MkdirAll(p, 0o755); err != nil {
					t.Fatal(err)
				}
			}
			mark := filepath.Join(taken, "someone-elses")
			if err := os.WriteFile(mark, []byte("x"), 0o644); err != nil {
				t.Fatal(err)
			}
			j, err := e.Q.Submit(ctx, "alice", spec)
			if err != nil {
				t.Fatalf("a submission whose default output exists: %v, want stored", err)
			}
			if j.ID != first.ID+1 {
				t.Errorf("job id %d, want %d: an id was used up", j.ID, first.ID+1)
			}
			if j.OutputDir != taken+".3" {
				t.Errorf("output %s, want the next free name %s.3", j.OutputDir, taken)
			}
			if fi, err := os.Lstat(j.OutputDir); err != nil || !fi.IsDir() {
				t.Errorf("output %s not made: %v", j.OutputDir, err)
			}
			if entries, _ := os.ReadDir(j.OutputDir); len(entries) != 0 {
				t.Errorf("the new output is not fresh: %v", entries)
			}
			if _, err := os.Stat(mark); err != nil {
				t.Errorf("the existing directory was touched: %v", err)
			}
			// The next submission takes the next id and its plain name.
			j3, err := e.Q.Submit(ctx, "alice", spec)
			if err != nil || j3.ID != j.ID+1 || j3.OutputDir != next(j.ID+1) {
				t.Fatalf("the next submission: %+v %v, want job %d in %s", j3, err, j.ID+1, next(j.ID+1))
			}
		})
	}
}
