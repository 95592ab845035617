package cluster

import (
	"encoding/json"
	"errors"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"
)

func TestLimitJSON(t *testing.T) {
	cases := []struct {
		name string
		in   string
		want Limit
		err  bool
	}{
		{"null means unlimited", `null`, Unlimited, false},
		{"a number is seconds", `1020`, 1020, false},
		{"a negative number is refused", `-5`, 0, true},
		{"a string is refused", `"10m"`, 0, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var l Limit
			err := json.Unmarshal([]byte(tc.in), &l)
			if (err != nil) != tc.err {
				t.Fatalf("err = %v, want error %v", err, tc.err)
			}
			if !tc.err && l != tc.want {
				t.Fatalf("got %v, want %v", l, tc.want)
			}
		})
	}
	b, _ := json.Marshal(struct {
		A Limit `json:"a"`
		B Limit `json:"b"`
		C Limit `json:"c"`
	}{Unlimited, 60, -5})
	if string(b) != `{"a":null,"b":60,"c":-5}` {
		t.Fatalf("marshal = %s", b)
	}
}

func TestLimitMinTreatsUnlimitedAsLargest(t *testing.T) {
	if got := Unlimited.Min(60); got != 60 {
		t.Errorf("Unlimited.Min(60) = %v", got)
	}
	if got := Limit(30).Min(Unlimited); got != 30 {
		t.Errorf("30.Min(Unlimited) = %v", got)
	}
	if got := Limit(30).Min(20); got != 20 {
		t.Errorf("30.Min(20) = %v", got)
	}
}

func TestRemainingOfAnOverrunningJobIsZero(t *testing.T) {
	if r := (Job{TimeLimit: 60, RunTime: 90}).Remaining(); r != 0 {
		t.Fatalf("Remaining = %v, want 0", r)
	}
	if r := (Job{TimeLimit: Unlimited, RunTime: 90}).Remaining(); !r.IsUnlimited() {
		t.Fatalf("Remaining = %v, want unlimited", r)
	}
}

func TestValidateRejectsContradictions(t *testing.T) {
	ok := Job{ID: "1", State: Running, Nodes: 1, TimeLimit: 60}
	cases := []struct {
		name string
		s    Snapshot
		msg  string
	}{
		{"more idle than total", Snapshot{TotalNodes: 2, IdleNodes: 3}, "exceeds total"},
		{"duplicate job ids", Snapshot{TotalNodes: 2, Jobs: []Job{ok, ok}}, "twice"},
		{"unknown state", Snapshot{TotalNodes: 2, Jobs: []Job{{ID: "1", State: "done", Nodes: 1, TimeLimit: 60}}}, "state"},
		{"zero nodes", Snapshot{TotalNodes: 2, Jobs: []Job{{ID: "1", State: Running, TimeLimit: 60}}}, "nodes must be positive"},
		{"missing time limit", Snapshot{TotalNodes: 2, Jobs: []Job{{ID: "1", State: Running, Nodes: 1}}}, "time_limit_s"},
		{"min above max", Snapshot{TotalNodes: 2, MinNodes: 3, MaxNodes: 2}, "min_nodes"},
		{"negative demand", Snapshot{TotalNodes: 2, Demand: &Demand{PendingTasks: -1}}, "demand"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.s.Validate()
			if !errors.Is(err, ErrInvalidSnapshot) || !strings.Contains(err.Error(), tc.msg) {
				t.Fatalf("Validate = %v, want an error containing %q", err, tc.msg)
			}
		})
	}
	if err := (Snapshot{TotalNodes: 2, IdleNodes: 1, Jobs: []Job{ok}}).Validate(); err != nil {
		t.Fatalf("valid snapshot rejected: %v", err)
	}
}

func TestFirstDuplicateAgreesWithAMapOnLargeSnapshots(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for round := range 200 {
		n := r.IntN(3000)
		jobs := make([]Job, n)
		for i, id := range r.Perm(n) {
			jobs[i].ID = strconv.Itoa(id)
		}
		if n > 1 && round%3 != 0 { // one duplicate anywhere, or none
			a, b := r.IntN(n), r.IntN(n)
			if a != b {
				jobs[max(a, b)].ID = jobs[min(a, b)].ID
			}
		}
		want := -1
		seen := map[string]bool{}
		for i, j := range jobs {
			if seen[j.ID] {
				want = i
				break
			}
			seen[j.ID] = true
		}
		if got := firstDuplicate(jobs); got != want {
			t.Fatalf("round %d (%d jobs): first duplicate at %d, want %d", round, n, got, want)
		}
	}
}
