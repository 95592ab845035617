package rules

import (
	"errors"
	"testing"
	"time"

	"github.com/harvest-hpc/harvest/pilotproto"
	"github.com/harvest-hpc/harvest/queue/api"
)

func TestJobStateFollowsTasks(t *testing.T) {
	for _, tc := range []struct {
		name    string
		cur     string
		started bool
		c       Counts
		want    string
	}{
		{"a job with only waiting tasks is WAITING", api.JobWaiting, false, Counts{Total: 3, Waiting: 3}, api.JobWaiting},
		{"a job with an assigned task is RUNNING", api.JobWaiting, true, Counts{Total: 3, Waiting: 2, Active: 1}, api.JobRunning},
		{"a started job whose tasks were all requeued stays RUNNING", api.JobRunning, true, Counts{Total: 3, Waiting: 3}, api.JobRunning},
		{"all tasks done is DONE", api.JobRunning, true, Counts{Total: 3, Done: 3}, api.JobDone},
		{"some failed permanently is DONE_WARN", api.JobRunning, true, Counts{Total: 3, Done: 2, Failed: 1}, api.JobDoneWarn},
		{"all failed is FAILED", api.JobRunning, true, Counts{Total: 2, Failed: 2}, api.JobFailed},
		{"a killed job stays KILLED", api.JobKilled, true, Counts{Total: 2, Killed: 2}, api.JobKilled},
		{"an expired job stays ERROR_EW", api.JobErrorEW, false, Counts{Total: 2, Killed: 2}, api.JobErrorEW},
		{"a job being submitted stays SUBMITTING", JobSubmitting, false, Counts{}, JobSubmitting},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := JobState(tc.cur, tc.started, tc.c); got != tc.want {
				t.Fatalf("JobState = %s, want %s", got, tc.want)
			}
		})
	}
}

func TestResultTransitions(t *testing.T) {
	active := ActiveTask{State: api.TaskRunning, Attempt: 2, Tries: 1, MaxAttempts: 3, JobState: api.JobRunning}
	for _, tc := range []struct {
		name   string
		task   ActiveTask
		status string
		want   Transition
	}{
		{"done is DONE", active, pilotproto.StatusDone, Transition{api.TaskDone, ToDone, false}},
		{"a failure with attempts left is requeued and counted", active, pilotproto.StatusFailed, Transition{api.TaskWaiting, ToWaiting, true}},
		{"a timeout counts like a failure", active, pilotproto.StatusTimeout, Transition{api.TaskWaiting, ToWaiting, true}},
		{"the last failure is ERROR_E", ActiveTask{State: api.TaskRunning, Tries: 2, MaxAttempts: 3}, pilotproto.StatusFailed, Transition{api.TaskErrorE, ToFailed, true}},
		{"an interrupted task is requeued without counting", ActiveTask{Tries: 2, MaxAttempts: 3}, pilotproto.StatusInterrupted, Transition{api.TaskWaiting, ToWaiting, false}},
		{"a killed task is requeued without counting", ActiveTask{Tries: 2, MaxAttempts: 3}, pilotproto.StatusKilled, Transition{api.TaskWaiting, ToWaiting, false}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := AfterResult(tc.task, tc.status); got != tc.want {
				t.Fatalf("AfterResult = %+v, want %+v", got, tc.want)
			}
		})
	}
	t.Run("only the current attempt of an active task of a live job is current", func(t *testing.T) {
		for _, tc := range []struct {
			task    ActiveTask
			attempt int
			want    bool
		}{
			{active, 2, true},
			{active, 1, false},
			{ActiveTask{State: api.TaskZombie, Attempt: 2, JobState: api.JobRunning}, 2, true},
			{ActiveTask{State: api.TaskAssigned, Attempt: 1, JobState: api.JobWaiting}, 1, true},
			{ActiveTask{State: api.TaskWaiting, Attempt: 2, JobState: api.JobRunning}, 2, false},
			{ActiveTask{State: api.TaskDone, Attempt: 2, JobState: api.JobRunning}, 2, false},
			{ActiveTask{State: api.TaskRunning, Attempt: 2, JobState: api.JobKilled}, 2, false},
		} {
			if got := tc.task.Current(tc.attempt); got != tc.want {
				t.Errorf("%+v Current(%d) = %v, want %v", tc.task, tc.attempt, got, tc.want)
			}
		}
	})
	t.Run("an expiry counts an attempt and is final after the last", func(t *testing.T) {
		if got := AfterExpiry(0, 2); got != (Transition{api.TaskWaiting, ToWaiting, true}) {
			t.Errorf("first expiry: %+v", got)
		}
		if got := AfterExpiry(1, 2); got != (Transition{api.TaskExpired, ToFailed, true}) || !got.Final() {
			t.Errorf("last expiry: %+v", got)
		}
	})
}

func TestLeaseDecisions(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	const ttl = 30 * time.Second
	held := Lease{Epoch: 3, Holder: "p1", Address: "a1", Expires: t0.Add(10 * time.Second)}
	expired := Lease{Epoch: 3, Holder: "p1", Address: "a1", Expires: t0.Add(-time.Second)}
	for _, tc := range []struct {
		name    string
		cur     Lease
		req     pilotproto.LeaseRequest
		want    LeaseDecision
		wantErr error
	}{
		{"the first asker gets epoch 1", Lease{}, pilotproto.LeaseRequest{PilotID: "p1", Address: "a1"},
			LeaseDecision{Next: Lease{1, "p1", "a1", t0.Add(ttl)}, Granted: true, Write: true}, nil},
		{"another asker while the lease is held is refused with the holder", held, pilotproto.LeaseRequest{PilotID: "p2", Address: "a2"},
			LeaseDecision{Next: held}, nil},
		{"the holder renews with its epoch", held, pilotproto.LeaseRequest{PilotID: "p1", Epoch: 3},
			LeaseDecision{Next: Lease{3, "p1", "a1", t0.Add(ttl)}, Granted: true, Write: true}, nil},
		{"the holder asking again without its epoch keeps it", held, pilotproto.LeaseRequest{PilotID: "p1"},
			LeaseDecision{Next: Lease{3, "p1", "a1", t0.Add(ttl)}, Granted: true, Write: true}, nil},
		{"the holder renews after expiry when nobody took over", expired, pilotproto.LeaseRequest{PilotID: "p1", Epoch: 3},
			LeaseDecision{Next: Lease{3, "p1", "a1", t0.Add(ttl)}, Granted: true, Write: true}, nil},
		{"the first asker after expiry takes over with the next epoch", expired, pilotproto.LeaseRequest{PilotID: "p2", Address: "a2"},
			LeaseDecision{Next: Lease{4, "p2", "a2", t0.Add(ttl)}, Granted: true, Write: true}, nil},
		{"an older epoch is stale", held, pilotproto.LeaseRequest{PilotID: "p1", Epoch: 2}, LeaseDecision{}, api.ErrStaleEpoch},
		{"an epoch never granted is stale", held, pilotproto.LeaseRequest{PilotID: "p1", Epoch: 4}, LeaseDecision{}, api.ErrStaleEpoch},
		{"somebody else renewing the holder's epoch is stale", held, pilotproto.LeaseRequest{PilotID: "p2", Epoch: 3}, LeaseDecision{}, api.ErrStaleEpoch},
		{"the holder releases with its epoch: expired at once", held, pilotproto.LeaseRequest{PilotID: "p1", Epoch: 3, Release: true},
			LeaseDecision{Next: Lease{3, "p1", "a1", t0}, Write: true}, nil},
		{"a release without the epoch is refused", held, pilotproto.LeaseRequest{PilotID: "p1", Release: true}, LeaseDecision{}, api.ErrStaleEpoch},
		{"a release by another pilot is refused", held, pilotproto.LeaseRequest{PilotID: "p2", Epoch: 3, Release: true}, LeaseDecision{}, api.ErrStaleEpoch},
		{"a peek at a free lease grants nothing", Lease{}, pilotproto.LeaseRequest{PilotID: "p1", Address: "a1", Peek: true}, LeaseDecision{}, nil},
		{"a peek after expiry grants nothing", expired, pilotproto.LeaseRequest{PilotID: "p2", Address: "a2", Peek: true}, LeaseDecision{Next: expired}, nil},
		{"a peek by the holder renews nothing", held, pilotproto.LeaseRequest{PilotID: "p1", Peek: true}, LeaseDecision{Next: held}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := DecideLease(tc.cur, tc.req, t0, ttl)
			if !errors.Is(err, tc.wantErr) || (tc.wantErr == nil && err != nil) {
				t.Fatalf("error %v, want %v", err, tc.wantErr)
			}
			if got != tc.want {
				t.Fatalf("decision %+v, want %+v", got, tc.want)
			}
		})
	}
	t.Run("fencing", func(t *testing.T) {
		for _, tc := range []struct {
			epoch int64
			now   time.Time
			want  error
		}{
			{3, t0, nil},
			{0, t0, api.ErrInvalid},
			{2, t0, api.ErrStaleEpoch},
			{4, t0, api.ErrStaleEpoch},
			{3, t0.Add(10 * time.Second), api.ErrLeaseExpired},
		} {
			if err := CheckEpoch(held, tc.epoch, tc.now); !errors.Is(err, tc.want) || (tc.want == nil && err != nil) {
				t.Errorf("CheckEpoch(epoch %d at %v) = %v, want %v", tc.epoch, tc.now.Sub(t0), err, tc.want)
			}
		}
	})
}
