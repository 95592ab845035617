package agent

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cenkalti/backoff/v4"

	"github.com/harvest-hpc/harvest/adapters"
)

// flakyInfo answers Info with an error the first fails times.
type flakyInfo struct {
	adapters.Adapter
	fails, calls int
	health       *Health
	seenDown     []bool
}

func (f *flakyInfo) Info(context.Context) (adapters.Info, error) {
	f.calls++
	_, _, down := f.health.Unreachable()
	f.seenDown = append(f.seenDown, down)
	if f.calls <= f.fails {
		return adapters.Info{}, errors.New("sinfo --version: unrecognised output \"garbage\"")
	}
	return adapters.Info{Name: "slurm", Version: "22.05.8"}, nil
}

// Issue 35 item 5: a batch system that answers garbage at start is asked
// again (with backoff) until it answers, and meanwhile the agent's health
// says since when it is unreachable and why.
func TestWaitForAdapterRetriesUntilTheBatchSystemAnswers(t *testing.T) {
	h := NewHealth()
	start := time.Unix(1_800_000_000, 0)
	h.now = func() time.Time { return start }
	ad := &flakyInfo{fails: 3, health: h}
	info, err := waitForAdapter(context.Background(), ad, time.Second, &backoff.ZeroBackOff{}, h, slog.New(slog.DiscardHandler))
	if err != nil || info.Version != "22.05.8" {
		t.Fatalf("waitForAdapter = %+v, %v; want the fourth answer", info, err)
	}
	if ad.calls != 4 {
		t.Errorf("Info called %d times, want 4", ad.calls)
	}
	if want := []bool{false, true, true, true}; !slices.Equal(ad.seenDown, want) {
		t.Errorf("unreachable seen at each call: %v, want %v", ad.seenDown, want)
	}
	if _, _, down := h.Unreachable(); down {
		t.Error("still unreachable after the batch system answered")
	}
}

// While it never answers, the wait ends only with the context, and the
// health keeps the first failure's time and the last error.
func TestWaitForAdapterHoldsUntilStopped(t *testing.T) {
	h := NewHealth()
	start := time.Unix(1_800_000_000, 0)
	h.now = func() time.Time { return start }
	ctx, cancel := context.WithCancel(context.Background())
	ad := &stopAfter{n: 5, cancel: cancel}
	_, err := waitForAdapter(ctx, ad, time.Second, &backoff.ZeroBackOff{}, h, slog.New(slog.DiscardHandler))
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("waitForAdapter after cancel: %v, want context.Canceled", err)
	}
	since, why, down := h.Unreachable()
	if !down || !since.Equal(start) || !strings.Contains(why, "slurm controller") {
		t.Errorf("health = %v %q %v, want down since %v with the last error", since, why, down, start)
	}
}

type stopAfter struct {
	adapters.Adapter
	n      int
	cancel func()
}

func (s *stopAfter) Info(context.Context) (adapters.Info, error) {
	s.n--
	if s.n == 0 {
		s.cancel()
	}
	return adapters.Info{}, errors.New("Unable to contact slurm controller (connect failure)")
}
