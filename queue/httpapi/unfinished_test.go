package httpapi_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/harvest-hpc/harvest/queue"
	"github.com/harvest-hpc/harvest/queue/api"
	"github.com/harvest-hpc/harvest/queue/queuetest"
)

// One user could fill the queue's disk with jobs of a million entries
// each. A job that would take its owner past MaxUnfinishedPerUser
// unfinished tasks is refused (409, nothing stored); other users are not
// affected, and the room comes back as the owner's tasks end.
func TestAJobPastTheUsersUnfinishedCapIsRefused(t *testing.T) {
	e := queuetest.New(t, func(c *queue.Config) { c.MaxUnfinishedPerUser = 5 })
	ctx := context.Background()
	alice := e.Client("alice")
	spec := func(ds string) api.JobSpec {
		return api.JobSpec{Dataset: ds, Command: []string{"p", "{input}"}, BatchSize: 1}
	}
	first, err := alice.Submit(ctx, spec(e.Dataset("three", 3)))
	if err != nil {
		t.Fatalf("3 of 5: %v", err)
	}
	before := e.Snapshot(t)
	_, err = alice.Submit(ctx, spec(e.Dataset("three-more", 3)))
	if !errors.Is(err, api.ErrConflict) || !strings.Contains(err.Error(), "max-unfinished-tasks-per-user") {
		t.Fatalf("3 more with 3 unfinished and a cap of 5: %v, want a conflict naming the cap", err)
	}
	if after := e.Snapshot(t); after != before {
		t.Errorf("a refused job changed the database:\n%s", after)
	}
	if _, err := alice.Submit(ctx, spec(e.Dataset("two", 2))); err != nil {
		t.Errorf("2 more with 3 unfinished, up to the cap of 5: %v", err)
	}
	if _, err := e.Client("bob").Submit(ctx, spec(e.Dataset("bobs", 5))); err != nil {
		t.Errorf("bob's 5 while alice has 5: %v", err)
	}
	if _, err := alice.Cancel(ctx, first.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := alice.Submit(ctx, spec(e.Dataset("after-cancel", 3))); err != nil {
		t.Errorf("3 more after cancelling the first 3: %v", err)
	}
}
