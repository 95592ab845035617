package queue_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/harvest-hpc/harvest/queue"
	"github.com/harvest-hpc/harvest/queue/api"
	"github.com/harvest-hpc/harvest/queue/queuetest"
)

// TestABatchedCommandsPlaceholdersAreChecked is issue 30 item 3: a
// command with {inputs} runs once per batch; its placeholders are checked
// at submission, and a refused one stores nothing.
func TestABatchedCommandsPlaceholdersAreChecked(t *testing.T) {
	e := queuetest.New(t)
	ctx := context.Background()
	ds := e.Dataset("ds", 3)
	for _, c := range []struct {
		argv  []string
		batch int
		want  string // "" = accepted; else a word of the refusal
	}{
		{[]string{"prog", "{inputs}"}, 10, ""},
		{[]string{"prog", "--job", "{job}", "{inputs}", "--", "{outputs}"}, 1000, ""},
		{[]string{"prog", "--in={inputs}"}, 10, "whole argument"},
		{[]string{"prog", "{inputs}", "{inputs}"}, 10, "once"},
		{[]string{"prog", "{inputs}", "{outputs}", "{outputs}"}, 10, "once"},
		{[]string{"prog", "{outputs}"}, 10, "{inputs}"},
		{[]string{"prog", "{inputs}", "{output}"}, 10, "{output} names one task"},
		{[]string{"prog", "{inputs}", "{task}"}, 10, "{task} names one task"},
		{[]string{"prog", "{inputs}"}, 1001, "at most 1000"},
		{[]string{"prog", "{input}"}, 5000, ""}, // one task per run: the queue's own bound
	} {
		j, err := e.Q.Submit(ctx, "alice", api.JobSpec{Dataset: ds, Command: c.argv, BatchSize: c.batch})
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%q batch %d refused: %v", c.argv, c.batch, err)
		case c.want == "":
			if strings.Join(j.Command, " ") != strings.Join(c.argv, " ") {
				t.Errorf("%q stored as %q", c.argv, j.Command)
			}
		case !errors.Is(err, api.ErrInvalid) || !strings.Contains(err.Error(), c.want):
			t.Errorf("%q batch %d: err %v, want a refusal saying %q", c.argv, c.batch, err, c.want)
		}
	}
	jobs, err := e.Q.ListJobs(ctx, queue.ListFilter{Owner: "alice"})
	if err != nil {
		t.Fatal(err)
	}
	if len(jobs.Jobs) != 3 {
		t.Errorf("%d jobs stored, want the 3 accepted", len(jobs.Jobs))
	}
}
