package agent

import (
	"context"
	"testing"
	"time"

	"github.com/harvest-hpc/harvest/adapters/adaptertest"
)

// A new master's first cap must act at once: with an hour between polls,
// a wake (the queue's PlanMoved) brings the next round.
func TestRunRoundsAtOnceWhenWoken(t *testing.T) {
	cfg := testConfig()
	cfg.PollInterval, cfg.FastPoll = time.Hour, 0
	r := NewReconciler(adaptertest.NewMemory(2), nil, cfg, nil)
	rounds := make(chan struct{}, 10)
	wake := make(chan struct{}, 1)
	r.Wake = wake
	r.OnRound = func(RoundResult) { rounds <- struct{}{} }
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	defer func() {
		cancel()
		<-done
	}()
	round := func(what string) {
		t.Helper()
		select {
		case <-rounds:
		case <-time.After(30 * time.Second): // an hour's poll never comes in time
			t.Fatalf("no round %s", what)
		}
	}
	round("at start")
	wake <- struct{}{}
	round("after the wake")
}
